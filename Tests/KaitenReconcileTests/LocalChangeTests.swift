import Foundation
import KaitenIndex
import KaitenProtocol
import KaitenScan
import KaitenSelection
import Testing

@testable import KaitenReconcile

/// What a folder that sends plans for changes made here (issue 11, item 3): the pure rules.
@Suite(.timeLimit(.minutes(5)))
struct LocalChangeTests {
    /// This device's announcement of `path` at `version` (valid, as after a pull).
    static func announcedHeld(_ path: String, version: UInt64, text: String = "x", type: BEPFileInfoType = .file) -> FileEntry {
        var file = BEPFileInfo()
        file.name = path
        file.type = type
        file.version = Fixture.version(version)
        if type == .file { file.blocksHash = Data(Fixture.content(text).bytes) }
        return FileEntry(announced: file)
    }

    /// This device's announcement of a file it sent: `text` at `version`.
    static func sent(_ path: String, _ text: String, version: BEPVector) -> FileEntry {
        var file = BEPFileInfo()
        file.name = path
        file.type = .file
        file.version = version
        file.blocksHash = Data(Fixture.content(text).bytes)
        return FileEntry(announced: file)
    }

    func actions(_ plan: FolderPlan) -> [String] {
        plan.actions.map { "\($0.action.rawValue) \($0.path) \($0.cause?.rawValue ?? "-")" }
    }

    @Test func newEditedAndDeletedFilesInsideTheSelectionAreSent() throws {
        var f = Fixture()
        f.sends = true
        f.selection = "docs\n"
        f.announce("docs", type: .directory)
        f.announce("docs/edited.txt", "old", version: 3)
        f.announce("docs/gone.txt", "g", version: 4)
        f.announce("docs/same.txt", "s", version: 5)
        f.onDisk("docs", kind: .directory)
        f.onDisk("docs/edited.txt", "new", synced: (3, "old"))
        f.onDisk("docs/same.txt", "s", synced: (5, "s"))
        f.onDisk("docs/new.txt", "n")
        f.onDisk("docs/sub", kind: .directory)
        f.onDisk("outside.txt", "o")
        f.announced["docs/gone.txt"] = Self.announcedHeld("docs/gone.txt", version: 4, text: "g")
        let plan = try f.plan()
        // Parents before children (by depth), then by name; deletions last.
        #expect(
            actions(plan) == [
                "send docs/edited.txt local-change", "send docs/new.txt local-change", "send docs/sub local-change",
                "send-delete docs/gone.txt local-change",
            ])
        // The version each replaces: the synced one, nothing for a new file, what was announced.
        #expect(plan.actions.first { $0.path == "docs/edited.txt" }?.version == Fixture.version(3).descriptions)
        #expect(plan.actions.first { $0.path == "docs/new.txt" }?.version == [])
        #expect(plan.conflicts.map(\.path) == ["outside.txt"], "outside the selection: still an extraneous file")
        #expect(Plan.Summary([plan]).send == 3 && Plan.Summary([plan]).sendDelete == 1)
    }

    /// A send whose synced record was lost (or left behind) by a crash between the two writes:
    /// what this device announced is on disk, so it is neither sent again under a new version
    /// nor, once deselected or deleted on the peers, taken for a local edit.
    @Test func aSendWhoseRecordWasLostIsNotSentAgain() throws {
        var f = Fixture()
        f.sends = true
        f.selection = "docs\n"
        f.announce("docs", type: .directory)
        f.onDisk("docs", kind: .directory)
        f.onDisk("docs/new.txt", "n")
        f.onDisk("docs/edited.txt", "two", synced: (3, "one"))
        f.announced["docs/new.txt"] = Self.sent("docs/new.txt", "n", version: BEPVector().updated(by: Fixture.me, now: 50))
        f.announced["docs/edited.txt"] = Self.sent("docs/edited.txt", "two", version: Fixture.version(3).updated(by: Fixture.me, now: 60))
        f.announce("docs/edited.txt", "one", version: 3)
        let plan = try f.plan()
        #expect(plan.actions.isEmpty, "\(actions(plan))")
        #expect(plan.conflicts.isEmpty, "\(plan.conflicts)")
        // Deselected: a file sent and held is deleted, not kept as "edited locally".
        f.selection = ""
        let deselected = try f.plan()
        #expect(!deselected.conflicts.contains { $0.kind == .localEdit }, "\(deselected.conflicts)")
    }

    /// A new file this device sent, that no peer has announced yet: neither sent again nor
    /// reported as an unknown (extraneous) file.
    @Test func aNewFileSentAndNotYetTakenIsQuiet() throws {
        var f = Fixture()
        f.sends = true
        f.selection = "docs\n"
        f.announce("docs", type: .directory)
        f.onDisk("docs", kind: .directory)
        f.onDisk("docs/new.txt", "n")
        var sent = BEPFileInfo()
        sent.name = "docs/new.txt"
        sent.type = .file
        sent.version = BEPVector().updated(by: Fixture.me, now: 50)
        sent.blocksHash = Data(Fixture.content("n").bytes)
        f.local["docs/new.txt"]?.synced = SyncedVersion(version: sent.version, contentHash: Fixture.content("n"))
        f.announced["docs/new.txt"] = FileEntry(announced: sent)
        let plan = try f.plan()
        #expect(plan.actions.isEmpty, "\(actions(plan))")
        #expect(plan.conflicts.isEmpty, "\(plan.conflicts)")
        // Edited again since: sent again, as a new version of what was sent.
        f.onDisk("docs/new.txt", "n2", synced: nil)
        f.local["docs/new.txt"]?.synced = SyncedVersion(version: sent.version, contentHash: Fixture.content("n"))
        let again = try f.plan()
        #expect(actions(again) == ["send docs/new.txt local-change"])
        #expect(again.actions.first?.version == sent.version.descriptions)
    }

    @Test func aReceiveOnlyFolderKeepsReportingLocalChangesAsConflicts() throws {
        var f = Fixture()
        f.selection = "docs\n"
        f.announce("docs/edited.txt", "old", version: 3)
        f.onDisk("docs/edited.txt", "new", synced: (3, "old"))
        f.onDisk("docs/new.txt", "n")
        let plan = try f.plan()
        #expect(plan.actions.isEmpty)
        #expect(plan.conflicts.map(\.kind) == [.localEdit, .extraneous])
    }

    @Test func aDeletionTheyChangedSinceIsPulledNotSent() throws {
        var f = Fixture()
        f.sends = true
        f.selection = "a.txt\n"
        f.announce("a.txt", "newer on the peer", version: 9)
        f.announced["a.txt"] = Self.announcedHeld("a.txt", version: 4)
        #expect(actions(try f.plan()) == ["pull a.txt selected"], "a modification beats a deletion")
        // Never announced here (never pulled): a selected file not here is pulled, not deleted.
        f.announced = [:]
        f.announce("a.txt", "x", version: 4)
        #expect(actions(try f.plan()) == ["pull a.txt selected"])
    }

    /// The peers deleted a file this device held, and apply carried the deletion out: the file
    /// is gone here and still announced as held until the announcement catches up. That is not
    /// a deletion made here (nothing to send), and the announcement is the peers' deletion —
    /// else a peer counts Kaiten as needing it for ever (found by `kaiten run`'s test).
    @Test func aDeletionTheyMadeAndApplyCarriedOutIsNotSentAgain() throws {
        var f = Fixture()
        f.sends = true
        f.selection = "a.txt\n"
        f.announce("a.txt", version: 5, deleted: true)
        f.announced["a.txt"] = Self.announcedHeld("a.txt", version: 4)
        #expect(actions(try f.plan()).isEmpty)
        #expect(LocalChange.of(global: f.global.global("a.txt")?.file, local: nil, announced: f.announced["a.txt"], me: Fixture.me, rule: .syncthing1) == nil)
    }

    @Test func concurrentEditsFollowSyncthingsWinner() throws {
        var f = Fixture()
        f.sends = true
        f.selection = "c.txt\n"
        f.announce("c.txt", "theirs", version: 7)  // the peer's edit: modified at 1_700_000_000 s
        f.onDisk("c.txt", "mine", synced: (3, "base"))
        f.local["c.txt"]?.modifiedNs = 1_700_000_100 * 1_000_000_000  // newer: this edit wins
        #expect(actions(try f.plan()) == ["send c.txt conflict-won"])
        f.local["c.txt"]?.modifiedNs = 1_699_999_900 * 1_000_000_000  // older: theirs wins
        let plan = try f.plan()
        #expect(actions(plan) == ["pull c.txt conflict-lost"])
        #expect(plan.actions.first?.reason.contains("sync-conflict") == true)
        // sendonly takes nothing: the conflict is reported instead.
        f.receives = false
        #expect(try f.plan().conflicts.map(\.kind) == [.concurrent])
    }

    @Test func conflictCopyNamesAreSyncthings() {
        let winner: UInt64 = 0x0123_4567_89AB_CDEF
        let id = DeviceID.shortIDString(winner)
        #expect(id.count == 7)
        #expect(
            LocalChange.conflictCopyName("docs/c.txt", year: 2026, month: 11, day: 3, hour: 7, minute: 5, second: 9, winner: winner)
                == "docs/c.sync-conflict-20261103-070509-\(id).txt")
        #expect(
            LocalChange.conflictCopyName("archive.tar.gz", year: 2026, month: 1, day: 23, hour: 17, minute: 45, second: 0, winner: winner)
                == "archive.tar.sync-conflict-20260123-174500-\(id).gz")
        // Go's filepath.Ext: a dot file is all extension.
        #expect(
            LocalChange.conflictCopyName("home/.bashrc", year: 2026, month: 1, day: 1, hour: 0, minute: 0, second: 0, winner: winner)
                == "home/.sync-conflict-20260101-000000-\(id).bashrc")
    }

    @Test func versionsUpdateAndMergeAsSyncthings() {
        var v = Fixture.version(5, device: 1).merged(with: Fixture.version(9, device: 3))
        #expect(v.descriptions.count == 2)
        #expect(v.merged(with: Fixture.version(2, device: 3)) == v)
        v = v.updated(by: 2, now: 1000)
        #expect(v.counters.map(\.id) == [1, 2, 3], "kept sorted by ID")
        #expect(v.counters.map(\.value) == [5, 1000, 9], "a new counter starts at the time")
        #expect(v.updated(by: 2, now: 10).counters[1].value == 1001, "never below its value + 1")
        #expect(v.updated(by: 2, now: 5000).counters[1].value == 5000)
        #expect(v.updated(by: 2, now: 0).compare(v) == .greater)
    }

    /// A change sent by this device stays announced as sent until the peers' version replaces
    /// it; a change not yet sent keeps the announcement it had (no withdrawal meanwhile).
    @Test func theAnnouncementKeepsWhatWasSentAndWhatIsPending() throws {
        var f = Fixture()
        f.selection = "a.txt\nb.txt\n"
        f.announce("a.txt", "base", version: 3)
        f.announce("b.txt", "base", version: 3)
        var sent = BEPFileInfo()
        sent.name = "a.txt"
        sent.type = .file
        sent.version = Fixture.version(3).updated(by: Fixture.me, now: 50)
        sent.blocksHash = Data(Fixture.content("mine").bytes)
        let announced: [String: FileEntry] = ["a.txt": FileEntry(announced: sent), "b.txt": Self.announcedHeld("b.txt", version: 3, text: "base")]
        f.onDisk("a.txt", "mine", synced: (3, "base"))
        f.local["a.txt"]?.synced = SyncedVersion(version: sent.version, contentHash: Fixture.content("mine"))
        f.onDisk("b.txt", "edited, not yet sent", synced: (3, "base"))
        let selection = Selection(try SelectionFile.parse(f.selection, file: "s"), global: f.global)
        let sending = Announcement.Sending(me: Fixture.me, rule: .syncthing1)
        let desired = Announcement.desired(global: f.global, local: f.local, selection: selection, sending: sending) { announced[$0] }
        #expect(desired.isEmpty, "\(desired.map(\.name))")
        // Without sending (receiveonly), both would be withdrawn as needed.
        let receiving = Announcement.desired(global: f.global, local: f.local, selection: selection) { announced[$0] }
        #expect(receiving.map(\.name) == ["a.txt", "b.txt"])
    }
}
