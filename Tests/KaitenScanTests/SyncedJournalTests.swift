import Crypto
import CZlib
import Foundation
import KaitenProtocol
import KaitenTestSupport
import Testing

@testable import KaitenScan

/// The synced journal: the version apply wrote is recorded with the rename, and survives a
/// crash before the scan cache is saved (issue 19, item 2).
@Suite(.timeLimit(.minutes(5)))
struct SyncedJournalTests {
    static func version(_ value: UInt64) -> BEPVector {
        var counter = BEPCounter()
        counter.id = 42
        counter.value = value
        var vector = BEPVector()
        vector.counters = [counter]
        return vector
    }

    static func hash(_ text: String) -> ContentHash { ContentHash(SHA256.hash(data: Array(text.utf8))) }

    static func tree(_ entries: [(String, String, UInt64?)]) -> LocalTree {
        var tree = LocalTree()
        for (path, text, synced) in entries {
            var file = LocalFile(path: path, kind: .file, size: 1, contentHash: hash(text))
            if let synced { file.synced = SyncedVersion(version: version(synced), contentHash: hash(text)) }
            tree[path] = file
        }
        return tree
    }

    @Test func aRecordAppliesWhereTheDiskHasItsContent() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-journal")
        defer { dir.remove() }
        let path = dir.file("f.synced")
        let journal = try SyncedJournal(path: path)
        try journal.record("written.txt", SyncedVersion(version: Self.version(3), contentHash: Self.hash("v3")))
        try journal.record("never-renamed.txt", SyncedVersion(version: Self.version(3), contentHash: Self.hash("v3")))
        try journal.record("stale.txt", SyncedVersion(version: Self.version(1), contentHash: Self.hash("same")))
        journal.sync()

        var tree = Self.tree([("written.txt", "v3", 2), ("never-renamed.txt", "v2", 2), ("stale.txt", "same", 4)])
        let changed = SyncedJournal.merge(path: path, into: &tree) { $0.contentHash }
        #expect(changed == 1)
        #expect(tree["written.txt"]?.synced?.version == Self.version(3))
        #expect(tree["never-renamed.txt"]?.synced?.version == Self.version(2))
        // An old record never steps a newer synced version back.
        #expect(tree["stale.txt"]?.synced?.version == Self.version(4))
    }

    @Test func aTornTailIsIgnoredAndEarlierRecordsKept() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-journal")
        defer { dir.remove() }
        let path = dir.file("f.synced")
        let journal = try SyncedJournal(path: path)
        try journal.record("a.txt", SyncedVersion(version: Self.version(1), contentHash: Self.hash("a")))
        try journal.record("b.txt", SyncedVersion(version: Self.version(1), contentHash: Self.hash("b")))
        let full = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(SyncedJournal.load(path: path).map(\.name) == ["a.txt", "b.txt"])
        var tornAtLeastOnce = false
        for cut in 1..<full.count {
            try full.prefix(cut).write(to: URL(fileURLWithPath: path))
            let names = SyncedJournal.load(path: path).map(\.name)
            #expect(names == [] || names == ["a.txt"] || (cut == full.count && names == ["a.txt", "b.txt"]), "cut \(cut)")
            if names == ["a.txt"] { tornAtLeastOnce = true }
        }
        #expect(tornAtLeastOnce)
        // A flipped byte inside a record stops the load there.
        var damaged = [UInt8](full)
        damaged[damaged.count - 10] ^= 0xFF
        try Data(damaged).write(to: URL(fileURLWithPath: path))
        #expect(SyncedJournal.load(path: path).map(\.name) == ["a.txt"])
    }
}

/// A format-1 scan cache (content hashes with weak hashes in them) loads converted, and the
/// synced record of unchanged content follows (issue 19, item 4).
@Suite(.timeLimit(.minutes(5)))
struct ScanCacheFormatTests {
    @Test func aFormat1CacheIsConvertedAsItLoads() throws {
        let blocks = [LocalBlock(hash: SyncedJournalTests.hash("b1"), weakHash: 7, size: 4)]
        let oldStyle = SyncedJournalTests.hash("a 1.x-style hash")
        var tree = LocalTree()
        var unchanged = LocalFile(path: "same.txt", kind: .file, size: 4, contentHash: oldStyle, blockSize: 131072, blocks: blocks)
        unchanged.synced = SyncedVersion(version: SyncedJournalTests.version(3), contentHash: oldStyle)
        var edited = unchanged
        edited.path = "edited.txt"
        edited.synced = SyncedVersion(version: SyncedJournalTests.version(3), contentHash: SyncedJournalTests.hash("before the edit"))
        tree["same.txt"] = unchanged
        tree["edited.txt"] = edited
        var bytes = ScanCache.encode(tree, format: 2)
        bytes[11] = 1  // format 1
        bytes.removeLast(4)
        let crc = bytes.withUnsafeBufferPointer { UInt32(crc32(0, $0.baseAddress, uInt($0.count))) }
        bytes += [UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)]

        let loaded = try ScanCache.decode(bytes)
        let expected = BEPFileInfo.blocksHash(ofHashes: blocks.map(\.hash))
        #expect(loaded["same.txt"]?.contentHash == expected)
        #expect(loaded["same.txt"]?.synced?.contentHash == expected)
        #expect(loaded["edited.txt"]?.contentHash == expected)
        #expect(loaded["edited.txt"]?.synced?.contentHash == SyncedJournalTests.hash("before the edit"), "an edit stays an edit")
    }
}
