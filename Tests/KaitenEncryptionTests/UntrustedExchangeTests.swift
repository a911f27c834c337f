import Crypto
import Foundation
import KaitenProtocol
import KaitenTestSupport
import Testing

@testable import KaitenEncryption

/// A trusted device, an untrusted one that stores what it is sent, and a second trusted device
/// that knows the password and has only the untrusted one to pull from: every message of the
/// way, without sockets.
@Suite(.timeLimit(.minutes(2)))
struct UntrustedExchangeTests {
    static let key = FolderKey(folderID: "photos", raw: (0..<32).map { UInt8($0 * 7 & 0xff) })
    static let exchange = UntrustedExchange(key: key)

    static func file(_ name: String, _ data: [UInt8], sequence: Int64 = 1) -> BEPFileInfo {
        var file = BEPFileInfo()
        file.name = name
        file.type = .file
        file.size = Int64(data.count)
        file.permissions = 0o640
        file.modifiedS = 1_700_000_000
        file.sequence = sequence
        file.blockSize = 128 << 10
        var counter = BEPCounter()
        counter.id = 99
        counter.value = 3
        file.version.counters = [counter]
        file.blocks = TestBlocks.of(data)
        return file
    }

    @Test func aBlockTravelsFromATrustedDeviceThroughAnUntrustedOneToAnother() throws {
        let data = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 8) }
        let plain = Self.file("albums/2024/a.jpg", data)
        // The trusted device announces it; the untrusted one stores the outer FileInfo.
        let outer = try #require(try Self.exchange.outgoing([plain]).first)
        #expect(outer.name != plain.name && !outer.name.contains("albums"))
        // The untrusted device asks for each block by the outer block list (as syncthing's
        // puller does: offset, size, hash and number from it).
        var stored: [[UInt8]] = []
        for (number, sealed) in outer.blocks.enumerated() {
            var request = BEPRequest()
            request.name = outer.name
            request.offset = sealed.offset
            request.size = sealed.size
            request.hash = sealed.hash
            request.blockNo = Int32(number)
            let asked = try Self.exchange.plainBlock(for: request)
            let block = plain.blocks[number]
            #expect(asked == UntrustedExchange.PlainBlock(name: plain.name, offset: block.offset, size: Int(block.size), hash: Array(block.hash)))
            let bytes = Array(data[Int(asked.offset)..<Int(asked.offset) + asked.size])
            stored.append(try Self.exchange.seal(bytes, for: asked))
        }
        // Its index, sent back to a trusted device, decrypts to the plain FileInfo.
        #expect(try Self.exchange.incoming([outer]) == [plain])
        // Another trusted device pulls every block from it by the encrypted coordinates.
        for (number, block) in plain.blocks.enumerated() {
            let request = try Self.exchange.encryptedRequest(name: plain.name, offset: block.offset, size: Int(block.size), number: number, hash: block.hash)
            #expect(request.name == outer.name && request.offset == outer.blocks[number].offset && request.size == outer.blocks[number].size)
            #expect(request.hash == outer.blocks[number].hash)
            let opened = try Self.exchange.openAnswer(stored[number], name: plain.name, offset: block.offset, size: Int(block.size), hash: block.hash)
            #expect(opened == Array(data[Int(block.offset)..<Int(block.offset) + Int(block.size)]))
        }
    }

    @Test func whatAnUntrustedDeviceAltersIsRefused() throws {
        let data = Array("a short file, padded when sealed".utf8)
        let plain = Self.file("notes.txt", data)
        let outer = try #require(try Self.exchange.outgoing([plain]).first)
        var request = BEPRequest()
        request.name = outer.name
        request.offset = 0
        request.size = outer.blocks[0].size
        request.hash = outer.blocks[0].hash
        // Another name, an altered hash, a size below a sealed block, no hash: each refused.
        var renamed = request
        renamed.name = Self.key.encryptName("other.txt")
        var badHash = request
        badHash.hash = Data(outer.blocks[0].hash.reversed())
        var short = request
        short.size = 100
        var noHash = request
        noHash.hash = Data()
        // (Another file's valid name: its hash was sealed with this file's key, and does not open.)
        for bad in [renamed, badHash, short, noHash] {
            #expect(throws: EncryptionError.self) { try Self.exchange.plainBlock(for: bad) }
        }
        var garbled = request
        garbled.name = "Q.syncthing-enc/AB/CDEF"
        #expect(throws: EncryptionError.self) { try Self.exchange.plainBlock(for: garbled) }
        // An answer altered, or another file's block, does not open.
        let asked = try Self.exchange.plainBlock(for: request)
        var answer = try Self.exchange.seal(data, for: asked)
        #expect(try Self.exchange.openAnswer(answer, name: "notes.txt", offset: 0, size: data.count, hash: plain.blocks[0].hash) == data)
        #expect(throws: EncryptionError.self) { try Self.exchange.openAnswer(answer, name: "other.txt", offset: 0, size: data.count, hash: plain.blocks[0].hash) }
        answer[30] ^= 1
        #expect(throws: EncryptionError.self) { try Self.exchange.openAnswer(answer, name: "notes.txt", offset: 0, size: data.count, hash: plain.blocks[0].hash) }
        // An index entry whose metadata was altered is refused, naming it.
        var tampered = outer
        tampered.encrypted[tampered.encrypted.count - 1] ^= 1
        let error = #expect(throws: EncryptionError.self) { try Self.exchange.incoming([tampered]) }
        #expect("\(error!)".contains(outer.name))
    }

    /// What the untrusted device takes in: only entries shaped as syncthing seals them. A
    /// trusted peer's plain index (it takes this device for a trusted one), a name that is
    /// not an encrypted one, or blocks that are not sealed blocks are refused by name.
    @Test func theUntrustedDeviceTakesOnlySealedEntries() throws {
        let data = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let plain = Self.file("albums/a.jpg", data)
        let outer = try #require(try Self.exchange.outgoing([plain]).first)
        try outer.validateSealed()
        var directory = BEPFileInfo()
        directory.name = "albums"
        directory.type = .directory
        try #require(try Self.exchange.outgoing([directory]).first).validateSealed()

        func refusal(_ entry: BEPFileInfo) -> String? {
            do {
                try entry.validateSealed()
                return nil
            } catch {
                return error.description
            }
        }
        #expect(refusal(plain)?.contains("plain data where ciphertext belongs") == true)
        var noFileInfo = outer
        noFileInfo.encrypted = Data()
        #expect(refusal(noFileInfo)?.contains("plain data where ciphertext belongs") == true)
        var lowerCase = outer
        lowerCase.name = outer.name.lowercased()
        #expect(refusal(lowerCase) != nil)
        var escaping = outer
        escaping.name = "../" + outer.name
        #expect(refusal(escaping) != nil)
        var plainHash = outer
        plainHash.blocks[0].hash = plain.blocks[0].hash
        #expect(refusal(plainHash)?.contains("not a sealed block") == true)
        var gap = outer
        gap.blocks[1].offset += 1
        #expect(refusal(gap)?.contains("not a sealed block") == true)
        var longer = outer
        longer.size += 1
        #expect(refusal(longer)?.contains("add up to") == true)
    }
}
