import Foundation
import KaitenIndex
import KaitenProtocol
import KaitenScan
import KaitenSelection
import Testing

@testable import KaitenReconcile

/// What Kaiten announces for a folder (issue 11, item 1): held → valid at the global version,
/// left out → invalid at it, wanted but missing → not announced (withdrawn when it was).
@Suite(.timeLimit(.minutes(5)))
struct AnnouncementTests {
    func desired(_ f: Fixture, announced: [String: FileEntry] = [:]) throws -> [String: BEPFileInfo] {
        let selection = Selection(try SelectionFile.parse(f.selection, file: "sel.txt"), global: f.global)
        let list = Announcement.desired(global: f.global, local: f.local, selection: selection, announced: { announced[$0] })
        return Dictionary(uniqueKeysWithValues: list.map { ($0.name, $0) })
    }

    /// This device's announcement of a file it does not hold nor want: invalid at `version`.
    static func notHeld(_ name: String, version: UInt64) -> FileEntry {
        var info = BEPFileInfo()
        info.name = name
        info.invalid = true
        info.version = Fixture.version(version)
        return FileEntry(announced: info)
    }

    @Test func heldLeftOutWantedAndDeleted() throws {
        var f = Fixture()
        f.announce("held.txt", "h", version: 3)
        f.announce("left-out.txt", "l", version: 2)
        f.announce("wanted.txt", "w", version: 1)
        f.announce("stale.txt", "new", version: 5)
        f.announce("gone.txt", version: 4, deleted: true)
        f.announce("dir", type: .directory)
        f.announce("other-dir", type: .directory)
        f.selection = "held.txt\nwanted.txt\nstale.txt\ndir\n"
        f.onDisk("held.txt", "h", synced: (3, "h"))
        f.onDisk("stale.txt", "old", synced: (4, "old"))
        f.onDisk("dir", kind: .directory)
        let out = try desired(f)

        let held = try #require(out["held.txt"])
        #expect(!held.invalid && !held.deleted && held.version == Fixture.version(3) && held.size == 100)
        #expect(held.blocksHash == Data(Fixture.content("h").bytes), "the content travels as the hash; blocks are read when recorded")
        let leftOut = try #require(out["left-out.txt"])
        #expect(leftOut.invalid && leftOut.version == Fixture.version(2) && leftOut.size == 0 && leftOut.blocks.isEmpty)
        #expect(out["wanted.txt"] == nil, "wanted and missing: needed, so not announced")
        #expect(out["stale.txt"] == nil, "an older local copy is not the global version")
        let gone = try #require(out["gone.txt"])
        #expect(gone.deleted && !gone.invalid && gone.version == Fixture.version(4))
        #expect(out["dir"]?.invalid == false)
        #expect(out["other-dir"]?.invalid == true)
    }

    /// Announced before (say, as not wanted) and now selected but not here: withdrawn with an
    /// empty version, which every peer counts as needed.
    @Test func aNewlySelectedFileIsWithdrawn() throws {
        var f = Fixture()
        f.announce("b.txt", "b", version: 2)
        f.selection = "b.txt\n"
        let out = try desired(f, announced: ["b.txt": Self.notHeld("b.txt", version: 2)])
        let withdrawn = try #require(out["b.txt"])
        #expect(withdrawn.invalid && withdrawn.version.counters.isEmpty)
        // Once withdrawn, not again.
        let again = try desired(f, announced: ["b.txt": FileEntry(announced: withdrawn)])
        #expect(again["b.txt"] == nil)
    }

    /// An apply puts off announcing as needed only what this device claimed nothing of (an
    /// invalid announcement), and counts it; a copy it announced as held and no longer has is
    /// withdrawn at once.
    @Test func anApplyPutsOffOnlyNeedsThatClaimNothing() throws {
        var f = Fixture()
        f.announce("not-held.txt", "n", version: 2)
        f.announce("was-held.txt", "w", version: 3)
        f.announce("new.txt", "x", version: 1)
        f.selection = "not-held.txt\nwas-held.txt\nnew.txt\n"
        let announced = [
            "not-held.txt": Self.notHeld("not-held.txt", version: 2), "was-held.txt": LocalChangeTests.announcedHeld("was-held.txt", version: 3, text: "w"),
        ]
        let selection = Selection(try SelectionFile.parse(f.selection, file: "sel.txt"), global: f.global)
        func run(_ deferred: Announcement.DeferredNeeds?) -> [String: BEPFileInfo] {
            var out: [String: BEPFileInfo] = [:]
            Announcement.forEachDesired(
                global: f.global, local: f.local, selection: selection, announced: { announced[$0] }, deferringNeeds: deferred
            ) { out[$0.name] = $0 }
            return out
        }
        let deferred = Announcement.DeferredNeeds()
        let out = run(deferred)
        #expect(out["not-held.txt"] == nil, "still announced as not held, until the apply's end")
        #expect(deferred.count == 1)
        let withdrawn = try #require(out["was-held.txt"], "a claim to hold it is withdrawn at once")
        #expect(withdrawn.invalid && withdrawn.version.counters.isEmpty)
        #expect(out["new.txt"] == nil, "never announced: needed already")
        // Without deferring, both are announced as needed.
        let now = run(nil)
        #expect(now["not-held.txt"]?.invalid == true && now["not-held.txt"]?.version.counters.isEmpty == true)
        #expect(now["was-held.txt"]?.invalid == true)
    }

    /// A deletion on the peers while a local copy stays (kept as a conflict): invalid, not
    /// "deleted here too".
    @Test func aDeletionWithALocalCopyIsNotClaimed() throws {
        var f = Fixture()
        f.announce("kept.txt", version: 3, deleted: true)
        f.onDisk("kept.txt", "mine", synced: (1, "x"))
        let out = try desired(f)
        #expect(out["kept.txt"]?.invalid == true && out["kept.txt"]?.deleted == true)
    }
}
