import Crypto
import Foundation
import KaitenConfig
import KaitenEncryption
import KaitenProtocol
import Testing

@testable import KaitenPeer

/// The connection's translation for a folder held by an untrusted device, and the checks of
/// its ClusterConfig, without a socket.
@Suite(.timeLimit(.minutes(5)))
struct SealedFoldersTests {
    static let me = try! DeviceID(bytes: Array(repeating: 0x11, count: 32))
    static let peer = try! DeviceID(bytes: Array(repeating: 0x22, count: 32))
    static let key = FolderKey(folderID: "f", raw: Array(repeating: 9, count: 32))
    static let exchange = UntrustedExchange(key: key)

    /// A request as the untrusted device sends it, for `size` plain bytes of block `number`.
    static func sealedRequest(_ name: String, block number: Int, size: Int, hash: [UInt8]) throws -> BEPRequest {
        var request = try exchange.encryptedRequest(name: name, offset: Int64(number) * 131_072, size: size, number: number, hash: hash)
        request.folder = "f"
        request.id = 7
        return request
    }

    @Test func aRequestIsAnsweredInPlainTermsAndSealed() throws {
        let plain = [UInt8](repeating: 0x5A, count: 300)
        let hash = Array(SHA256.hash(data: plain))
        let request = try Self.sealedRequest("dir/a.txt", block: 1, size: 300, hash: hash)
        var asked: [(BEPRequest, Bool)] = []
        let reply = SealedFolders.answer(request, exchange: Self.exchange) { plainRequest, sealed in
            asked.append((plainRequest, sealed))
            var response = BEPResponse()
            response.data = Data(plain)
            return .response(response)
        }
        #expect(asked.count == 1 && asked[0].1)
        // Padded to 1 KiB when sealed: the block server is asked for that much at the plain offset.
        #expect(asked[0].0.name == "dir/a.txt" && asked[0].0.offset == 131_072 && asked[0].0.size == 1024 && Array(asked[0].0.hash) == hash)
        guard case .response(let response) = reply else { Issue.record("no response"); return }
        #expect(response.id == 7 && response.code == .noError)
        let opened = try EncryptedBlock.open(response.data, fileKey: Self.key.fileKey(for: "dir/a.txt"), plainSize: 300)
        #expect(opened == plain)
        #expect(!response.data.contains(Data(plain.prefix(16))))
    }

    @Test func aRequestThatDoesNotOpenIsRefusedWithoutAskingAnything() throws {
        var request = try Self.sealedRequest("a.txt", block: 0, size: 2000, hash: Array(repeating: 1, count: 32))
        request.name = "0.syncthing-enc/AA/BBBB"  // not a name sealed with this key
        var called = false
        let reply = SealedFolders.answer(request, exchange: Self.exchange) { _, _ in
            called = true
            return .response(BEPResponse())
        }
        #expect(!called)
        guard case .response(let response) = reply else { Issue.record("no response"); return }
        #expect(response.code == .invalidFile && response.data.isEmpty)
        // A name that opens to one leaving the folder is refused too.
        let escaping = try Self.sealedRequest("../x", block: 0, size: 2000, hash: Array(repeating: 1, count: 32))
        let refused = SealedFolders.answer(escaping, exchange: Self.exchange) { _, _ in
            called = true
            return .response(BEPResponse())
        }
        #expect(!called)
        guard case .response(let escaped) = refused else { Issue.record("no response"); return }
        #expect(escaped.code == .invalidFile)
    }

    /// syncthing's encryption checks on the peer's ClusterConfig, in its words.
    @Test func theClusterConfigMustAgreeOnWhatIsEncryptedAndWithWhichPassword() {
        func config(peerToken: Data, myToken: Data = Data()) -> BEPClusterConfig {
            var folder = BEPFolder()
            folder.id = "f"
            var mine = BEPDevice()
            mine.id = Data(Self.me.bytes)
            mine.encryptionPasswordToken = myToken
            var theirs = BEPDevice()
            theirs.id = Data(Self.peer.bytes)
            theirs.encryptionPasswordToken = peerToken
            folder.devices = [mine, theirs]
            var clusterConfig = BEPClusterConfig()
            clusterConfig.folders = [folder]
            return clusterConfig
        }
        let sealed = ["f": Self.exchange]
        let token = Data(Self.key.passwordToken)
        func refusal(_ clusterConfig: BEPClusterConfig, sealed: [String: UntrustedExchange]) -> String? {
            EncryptedSharing.refusal(clusterConfig, me: Self.me, peer: Self.peer, folders: ["f"], sealed: sealed)
        }
        #expect(refusal(config(peerToken: token), sealed: sealed) == nil)
        #expect(refusal(config(peerToken: Data(repeating: 1, count: token.count)), sealed: sealed)?.contains("different encryption passwords used") == true)
        #expect(refusal(config(peerToken: Data()), sealed: sealed)?.contains("remote expects to exchange plain data") == true)
        #expect(refusal(config(peerToken: token), sealed: [:])?.contains("as an untrusted device") == true)
        #expect(refusal(config(peerToken: token, myToken: token), sealed: sealed)?.contains("remote expects to exchange encrypted data") == true)
        #expect(refusal(config(peerToken: Data(), myToken: token), sealed: [:])?.contains("--type receiveencrypted") == true)
        #expect(refusal(config(peerToken: Data()), sealed: [:]) == nil)
    }

    /// This device as the untrusted one: the first token a trusted peer gives is stored, a
    /// later one must equal it, and a peer that sends none (it takes this device for a
    /// trusted one) or seals for this device what it holds sealed is refused, in syncthing's words.
    @Test func aFolderHeldAsCiphertextTakesTheFirstTokenAndThenOnlyThatOne() {
        func config(mine: Data, theirs: Data = Data()) -> BEPClusterConfig {
            var folder = BEPFolder()
            folder.id = "f"
            var me = BEPDevice()
            me.id = Data(Self.me.bytes)
            me.encryptionPasswordToken = mine
            var peer = BEPDevice()
            peer.id = Data(Self.peer.bytes)
            peer.encryptionPasswordToken = theirs
            folder.devices = [me, peer]
            var clusterConfig = BEPClusterConfig()
            clusterConfig.folders = [folder]
            return clusterConfig
        }
        let token = Array(Self.key.passwordToken)
        let other = [UInt8](repeating: 7, count: token.count)
        func refusal(_ clusterConfig: BEPClusterConfig, held: [String: [UInt8]?]) -> String? {
            EncryptedSharing.refusal(clusterConfig, me: Self.me, peer: Self.peer, folders: ["f"], held: held)
        }
        let none: [String: [UInt8]?] = ["f": nil]
        let stored: [String: [UInt8]?] = ["f": .some(token)]
        #expect(refusal(config(mine: Data(token)), held: none) == nil)
        #expect(EncryptedSharing.tokensToStore(config(mine: Data(token)), me: Self.me, peer: Self.peer, held: none) == ["f": token])
        #expect(refusal(config(mine: Data(token)), held: stored) == nil)
        #expect(EncryptedSharing.tokensToStore(config(mine: Data(token)), me: Self.me, peer: Self.peer, held: stored).isEmpty)
        #expect(refusal(config(mine: Data(other)), held: stored)?.contains("different encryption passwords used") == true)
        #expect(refusal(config(mine: Data()), held: none)?.contains("remote expects to exchange plain data, but is configured to be encrypted") == true)
        #expect(refusal(config(mine: Data(token), theirs: Data(token)), held: none)?.contains("this is impossible") == true)
    }

    /// A folder held as ciphertext is listed to a trusted peer only once a token is stored,
    /// with that token on this device's entry (syncthing's untrusted device does the same).
    @Test func aFolderHeldAsCiphertextIsListedOnlyWithItsToken() {
        let folder = FolderConfiguration(id: "f", label: "f", path: "/nonexistent", type: .receiveencrypted, devices: [Self.me, Self.peer])
        let token = Array(Self.key.passwordToken)
        let unlisted = ClusterConfigBuilder.make(
            folders: [folder], devices: [], me: Self.me, peer: Self.peer, localIndexIDs: [:], held: ["f": nil])
        #expect(unlisted.folders.isEmpty)
        let listed = ClusterConfigBuilder.make(
            folders: [folder], devices: [], me: Self.me, peer: Self.peer, localIndexIDs: [:], held: ["f": .some(token)])
        #expect(listed.device(Self.me, in: "f")?.encryptionPasswordToken == Data(token))
        #expect(listed.device(Self.peer, in: "f")?.encryptionPasswordToken.isEmpty == true)
        #expect(listed.folders.first?.ignorePermissions == true)
    }
}
