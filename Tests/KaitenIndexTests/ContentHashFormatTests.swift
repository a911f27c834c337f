import Crypto
import Foundation
import KaitenProtocol
import KaitenTestSupport
import Testing

@testable import KaitenIndex

/// Syncthing 1.x and 2.x announce different `blocks_hash` values for the same bytes (issue 19,
/// item 4): Kaiten's index keeps its own, computed from the blocks, and converts format-1 logs.
@Suite(.timeLimit(.minutes(5)))
struct ContentHashFormatTests {
    static let peer = IndexLogTests.peerA

    /// What 1.19.2 announces: SHA-256 over (hash || weak hash as big-endian u32) per block.
    static func syncthing1BlocksHash(_ blocks: [BEPBlockInfo]) -> Data {
        var hasher = SHA256()
        for block in blocks {
            hasher.update(data: block.hash)
            let weak = block.weakHash
            hasher.update(data: [UInt8(weak >> 24), UInt8(weak >> 16 & 0xFF), UInt8(weak >> 8 & 0xFF), UInt8(weak & 0xFF)])
        }
        return Data(hasher.finalize())
    }

    static func announced(byGeneration generation: Int) -> BEPFileInfo {
        var file = IndexLogTests.file("a.bin", size: 10, sequence: 1, version: [(1, 1)])
        let concatenated = file.blocks.flatMap { [UInt8]($0.hash) }
        file.blocksHash = generation == 1 ? syncthing1BlocksHash(file.blocks) : Data(SHA256.hash(data: concatenated))
        return file
    }

    @Test func theSameBytesFromA1xAndA2xPeerHaveOneContentHash() {
        let one = FileEntry(announced: Self.announced(byGeneration: 1))
        let two = FileEntry(announced: Self.announced(byGeneration: 2))
        #expect(one.contentHash == two.contentHash)
        // ... and it is 2.x's blocks_hash.
        #expect(Data(two.contentHash.bytes) == Self.announced(byGeneration: 2).blocksHash)
    }

    @Test func aFormat1LogIsReadWithKaitensHashAndConvertedOnTheFirstWritableOpen() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-index")
        defer { dir.remove() }
        let path = dir.file("f.log")
        // A format-1 log as an older Kaiten wrote it: the peer's (1.x) blocks hash in the meta.
        // Formats 1 and 2 had no generation: magic, version, folder ID, CRC.
        var header = IndexLog.magic
        header.appendBigEndian(UInt32(1))
        header += [0, 1] + Array("f".utf8)
        header.appendBigEndian(CRC32.checksum(header))
        let file = Self.announced(byGeneration: 1)
        var meta = file
        meta.blocks = []
        var blocksOnly = BEPFileInfo()
        blocksOnly.blocks = file.blocks
        var payload = Self.peer.bytes
        let metaBytes: [UInt8] = try meta.serializedBytes()
        payload.appendBigEndian(UInt32(metaBytes.count))
        payload += metaBytes
        payload += try blocksOnly.serializedBytes() as [UInt8]
        var bytes = header
        IndexLog.appendRecord(.file, payload, to: &bytes)
        var checkpoint = Self.peer.bytes
        checkpoint.appendBigEndian(UInt64(9))
        checkpoint.appendBigEndian(UInt64(1))
        IndexLog.appendRecord(.checkpoint, checkpoint, to: &bytes)
        try Data(bytes).write(to: URL(fileURLWithPath: path))

        let expected = FileEntry(announced: Self.announced(byGeneration: 2)).contentHash
        let readOnly = try IndexLog.open(path: path, folderID: "f", readOnly: true)
        #expect(readOnly.index.global("a.bin")?.file.contentHash == expected)
        readOnly.close()
        #expect(try Data(contentsOf: URL(fileURLWithPath: path))[11] == 1, "a read-only open changes nothing")

        let writable = try IndexLog.open(path: path, folderID: "f")
        #expect(writable.index.global("a.bin")?.file.contentHash == expected)
        #expect(writable.checkpoints[Self.peer]?.maxSequence == 1)
        #expect(try writable.blocks(of: writable.index.global("a.bin")!.file) == file.blocks)
        writable.close()
        #expect(UInt32(try Data(contentsOf: URL(fileURLWithPath: path))[11]) == IndexLog.formatVersion, "converted to the current format")
        let again = try IndexLog.open(path: path, folderID: "f", readOnly: true)
        #expect(again.index.global("a.bin")?.file.contentHash == expected)
    }
}

/// The conflict rule of each syncthing generation (issue 15, item 4).
@Suite(.timeLimit(.minutes(5)))
struct ConflictRuleTests {
    static func entries() -> [DeviceID: FileEntry] {
        // Concurrent: A edited (older mtime), B deleted (newer mtime).
        let edit = IndexLogTests.file("x.txt", sequence: 1, version: [(1, 2)], mtime: 1000)
        let delete = IndexLogTests.file("x.txt", sequence: 1, version: [(1, 1), (2, 1)], deleted: true, mtime: 2000)
        return [IndexLogTests.peerA: FileEntry(announced: edit), IndexLogTests.peerB: FileEntry(announced: delete)]
    }

    @Test func syncthing1LetsAnEditBeatAConcurrentDeletion() {
        #expect(GlobalIndex.winner("x.txt", Self.entries(), rule: .syncthing1)?.file.isDeleted == false)
    }

    @Test func syncthing2LetsTheLaterChangeWinEvenADeletion() {
        #expect(GlobalIndex.winner("x.txt", Self.entries(), rule: .syncthing2)?.file.isDeleted == true)
        var index = GlobalIndex()
        index.conflictRule = .syncthing2
        for (device, entry) in Self.entries() { index.set(entry, for: device) }
        #expect(index.global("x.txt")?.file.isDeleted == true)
    }
}

/// Syncthing 2.x forgets tombstones after ~15 months; a full index that no longer lists a file
/// a peer announced deleted must not bring it back from a peer that was away (issue 15, item 5).
@Suite(.timeLimit(.minutes(5)))
struct ForgottenTombstoneTests {
    @Test func aTombstoneAFullIndexLeavesOutIsKeptAcrossReopen() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-index")
        defer { dir.remove() }
        let path = dir.file("f.log")
        let a = IndexLogTests.peerA
        let b = IndexLogTests.peerB
        let log = try IndexLog.open(path: path, folderID: "f")
        let live = IndexLogTests.file("x.txt", sequence: 1, version: [(1, 1)])
        try log.apply(device: a, indexID: 1, files: [live, IndexLogTests.file("keep.txt", sequence: 2, version: [(1, 1)])], isFullIndex: true)
        // b was away with the live version.
        try log.apply(device: b, indexID: 2, files: [IndexLogTests.file("x.txt", sequence: 1, version: [(1, 1)])], isFullIndex: true)
        // a deletes it...
        try log.apply(device: a, indexID: 1, files: [IndexLogTests.file("x.txt", sequence: 3, version: [(1, 2)], deleted: true)], isFullIndex: false)
        #expect(log.index.global("x.txt")?.file.isDeleted == true)
        // ... and, months later, sends a full index that no longer lists the deletion.
        try log.apply(device: a, indexID: 1, files: [IndexLogTests.file("keep.txt", sequence: 4, version: [(1, 1)])], isFullIndex: true)
        #expect(log.index.global("x.txt")?.file.isDeleted == true, "b's older live copy must not come back")
        log.close()
        let reopened = try IndexLog.open(path: path, folderID: "f", readOnly: true)
        #expect(reopened.index.global("x.txt")?.file.isDeleted == true)
        #expect(reopened.index.global("keep.txt")?.file.isDeleted == false)
        reopened.close()

        // A file re-created later has a newer version and wins as usual.
        let again = try IndexLog.open(path: path, folderID: "f")
        try again.apply(device: a, indexID: 1, files: [IndexLogTests.file("x.txt", sequence: 5, version: [(1, 3)])], isFullIndex: false)
        #expect(again.index.global("x.txt")?.file.isDeleted == false)
    }
}
