import Crypto
import Foundation
import KaitenProtocol
import KaitenTestSupport
import Testing

@testable import KaitenScan

/// The synced journal: the version apply wrote is recorded with the rename, and survives a
/// crash before the scan cache is saved (issue 19, item 2).
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
