import Crypto
import Foundation
import KaitenConfig
import KaitenPeer
import KaitenProtocol
import KaitenTestSupport
import NIOConcurrencyHelpers

/// A BEP peer whose every word the test chooses: it announces the index it is given — names,
/// symlinks and all, things real syncthing would never send — and serves blocks from memory.
/// It stands in for a hostile or broken device where real syncthing cannot play that part;
/// every other test uses real syncthing.
final class ScriptedPeer: Sendable {
    let device: KaitenDevice
    private let listener: PeerListener
    private let contents: NIOLockedValueBox<[String: Data]>
    private let announcement: NIOLockedValueBox<(files: [BEPFileInfo], sendIndex: Bool)>
    /// Every Request received, in order (folder/name@offset).
    let requests = NIOLockedValueBox<[String]>([])
    /// The latest connection from Kaiten (for requests the test sends it).
    let latest = NIOLockedValueBox<PeerConnection?>(nil)
    /// The connections on which Kaiten's ClusterConfig arrived. A peer asks for blocks only
    /// after it: Kaiten sets up its answers to requests before it sends one.
    let configured = NIOLockedValueBox<Set<ObjectIdentifier>>([])
    /// How many of the next connections get only a `secondary` ClusterConfig, as from a
    /// syncthing that still holds an earlier connection of this device as its primary.
    let secondaryOnly = NIOLockedValueBox(0)
    /// Encryption password tokens its ClusterConfig puts on its own entry (it holds the folder
    /// as an untrusted device) and on Kaiten's (it treats Kaiten as one), as syncthing would.
    let passwordTokens = NIOLockedValueBox<(own: Data, kaitens: Data)>((Data(), Data()))
    /// Folders Kaiten does not share with it that it claims anyway: listed in its ClusterConfig
    /// with both devices, and an Index of these entries sent for each.
    let planted = NIOLockedValueBox<[String: [BEPFileInfo]]>([:])

    var deviceID: DeviceID { device.deviceID }
    var address: String { "tcp://127.0.0.1:\(listener.localPort)" }

    /// Starts listening on 127.0.0.1 (a free port the kernel picks) and, to `allowed` when it
    /// connects, announces what ``announce(_:sendIndex:)`` set in `folder` and serves `contents`.
    init(in directory: String, folder: String, contents: [String: Data], allowed: DeviceID) async throws {
        device = try KaitenDevice(in: directory, name: "scripted")
        let box = NIOLockedValueBox(contents)
        self.contents = box
        let announcement = NIOLockedValueBox<(files: [BEPFileInfo], sendIndex: Bool)>(([], true))
        self.announcement = announcement
        let requests = self.requests
        let latest = self.latest
        let secondaryOnly = self.secondaryOnly
        let passwordTokens = self.passwordTokens
        let planted = self.planted
        let configured = self.configured
        let me = device.deviceID
        listener = try await PeerListener.bind(
            to: PeerAddress(host: "127.0.0.1", port: 0), identity: device.identity,
            hello: KaitenVersion.hello(deviceName: "scripted"), isAllowed: { $0 == allowed },
            onConnection: { connection in
                latest.withLockedValue { $0 = connection }
                Task {
                    for await event in connection.events {
                        if case .clusterConfig = event { configured.withLockedValue { _ = $0.insert(ObjectIdentifier(connection)) } }
                    }
                }
                await connection.setRequestHandler { request in
                    requests.withLockedValue { $0.append("\(request.folder)/\(request.name)@\(request.offset)") }
                    var response = BEPResponse()
                    response.id = request.id
                    guard let data = box.withLockedValue({ $0[request.name] }), request.offset >= 0,
                        Int(request.offset) + Int(request.size) <= data.count
                    else {
                        response.code = .noSuchFile
                        return response
                    }
                    response.data = data.subdata(in: Int(request.offset)..<Int(request.offset) + Int(request.size))
                    return response
                }
                let secondary = secondaryOnly.withLockedValue { count -> Bool in
                    defer { count = max(0, count - 1) }
                    return count > 0
                }
                if secondary {
                    var clusterConfig = BEPClusterConfig()
                    clusterConfig.secondary = true
                    try? await connection.sendClusterConfig(clusterConfig)
                    _ = await connection.waitUntilClosed()
                    return
                }
                let (files, sendIndex) = announcement.withLockedValue { $0 }
                var clusterConfig = BEPClusterConfig()
                var wire = BEPFolder()
                wire.id = folder
                var mine = BEPDevice()
                mine.id = .init(me.bytes)
                mine.indexID = 0x5C41_7EED
                mine.maxSequence = files.map(\.sequence).max() ?? 0
                var theirs = BEPDevice()
                theirs.id = .init(connection.deviceID.bytes)
                (mine.encryptionPasswordToken, theirs.encryptionPasswordToken) = passwordTokens.withLockedValue { ($0.own, $0.kaitens) }
                wire.devices = [mine, theirs]
                clusterConfig.folders = [wire]
                let claimed = planted.withLockedValue { $0 }
                for (id, files) in claimed.sorted(by: { $0.key < $1.key }) {
                    var other = wire
                    other.id = id
                    other.devices[0].maxSequence = files.map(\.sequence).max() ?? 0
                    clusterConfig.folders.append(other)
                }
                try? await connection.sendClusterConfig(clusterConfig)
                for (id, files) in claimed.sorted(by: { $0.key < $1.key }) {
                    var index = BEPIndex()
                    index.folder = id
                    index.files = files
                    try? await connection.send(.index(index))
                }
                guard sendIndex else {
                    _ = await connection.waitUntilClosed()
                    return
                }
                var index = BEPIndex()
                index.folder = folder
                index.files = files
                try? await connection.send(.index(index))
                _ = await connection.waitUntilClosed()
            })
    }

    func stop() async { await listener.close() }

    /// What the next connection is told: `files` as a full Index, or — `sendIndex` false — only
    /// a ClusterConfig whose max sequence says "nothing newer than what you hold".
    func announce(_ files: [BEPFileInfo], sendIndex: Bool = true) {
        announcement.withLockedValue { $0 = (files, sendIndex) }
    }

    /// Asks Kaiten, on its latest connection, for `size` bytes of `name` at `offset`.
    func request(folder: String, _ name: String, offset: Int64, size: Int32) async throws -> BEPResponse {
        guard let connection = latest.withLockedValue({ $0 }), connection.isOpen else { throw HarnessError("Kaiten is not connected") }
        var request = BEPRequest()
        request.folder = folder
        request.name = name
        request.offset = offset
        request.size = size
        return try await connection.request(request)
    }

    func serve(_ name: String, _ data: Data) {
        contents.withLockedValue { $0[name] = data }
    }

    /// A regular file entry with syncthing's blocks (128 KiB) for `data`, modified by this peer.
    func file(_ name: String, _ data: Data, sequence: Int64, permissions: UInt32 = 0o644) -> BEPFileInfo {
        var info = entry(name, sequence: sequence)
        info.type = .file
        info.size = Int64(data.count)
        info.permissions = permissions
        info.blockSize = 128 << 10
        info.blocks = TestBlocks.of(data)
        info.blocksHash = Data(SHA256.hash(data: info.blocks.reduce(into: Data()) { $0 += $1.hash }))
        return info
    }

    func symlink(_ name: String, to target: String, sequence: Int64) -> BEPFileInfo {
        var info = entry(name, sequence: sequence)
        info.type = .symlink
        info.symlinkTarget = target
        info.permissions = 0o777
        return info
    }

    func directory(_ name: String, sequence: Int64) -> BEPFileInfo {
        var info = entry(name, sequence: sequence)
        info.type = .directory
        info.permissions = 0o755
        return info
    }

    private func entry(_ name: String, sequence: Int64) -> BEPFileInfo {
        var info = BEPFileInfo()
        info.name = name
        info.sequence = sequence
        info.modifiedS = 1_700_000_000
        info.modifiedBy = deviceID.shortID
        var counter = BEPCounter()
        counter.id = deviceID.shortID
        counter.value = UInt64(sequence)
        info.version.counters = [counter]
        return info
    }
}
