import Foundation
import KaitenIndex
import KaitenProtocol
import KaitenScan
import Testing

@testable import KaitenReconcile

/// Issue 19, items 1 and 2: only connected peers count as holders of a file to delete, and a
/// version the synced record dominates (or is concurrent with) is never written.
@Suite(.timeLimit(.minutes(5)))
struct PeerSafetyRuleTests {
    @Test func aDeselectedFileHeldOnlyByOfflinePeersIsKept() throws {
        var f = Fixture()
        f.announce("old.txt", "same", by: Fixture.peerA)
        f.announce("old.txt", "same", by: Fixture.peerB)
        f.onDisk("old.txt", "same", synced: (1, "same"))
        f.connected = []
        let plan = try f.plan()
        #expect(plan.lines.isEmpty)
        #expect(plan.conflictLines == ["holders-offline old.txt"])
        #expect(plan.conflicts.first?.reason.contains("only 0 of the 2 peers holding it are connected") == true)
    }

    @Test func connectedHoldersAreCountedAgainstRequirePeers() throws {
        var f = Fixture()
        f.announce("old.txt", "same", by: Fixture.peerA)
        f.announce("old.txt", "same", by: Fixture.peerB)
        f.onDisk("old.txt", "same", synced: (1, "same"))
        f.connected = [Fixture.peerA]
        f.requirePeers = 2
        #expect(try f.plan().conflictLines == ["holders-offline old.txt"])
        f.requirePeers = 1
        let plan = try f.plan()
        #expect(plan.lines == ["delete old.txt"])
        #expect(plan.actions.first?.cause == .deselected)
        #expect(plan.actions.first?.peers == [Fixture.peerA.description])
    }

    @Test func anOfflinePlanCountsLastKnownHolders() throws {
        var f = Fixture()
        f.announce("old.txt", "same")
        f.onDisk("old.txt", "same", synced: (1, "same"))
        f.connected = nil
        #expect(try f.plan().lines == ["delete old.txt"])
    }

    @Test func anOlderGlobalVersionIsNeverPulledOverANewerSyncedCopy() throws {
        var f = Fixture()
        f.announce("reg.txt", "V2", version: 2)
        f.onDisk("reg.txt", "V3", synced: (3, "V3"))
        f.selection = "reg.txt\n"
        let plan = try f.plan()
        #expect(plan.lines.isEmpty)
        #expect(plan.conflicts.isEmpty)
        #expect(plan.warnings.contains { $0.contains("reg.txt: the local copy") && $0.contains("newer than any version the peers announce") })
    }

    @Test func aConcurrentGlobalVersionIsAConflictNotAPull() throws {
        var f = Fixture()
        var file = BEPFileInfo()
        file.name = "c.txt"
        file.type = .file
        file.size = 100
        file.version = Fixture.version(2, device: 7)
        file.modifiedS = 1_700_000_000
        file.blockSize = 131072
        file.blocksHash = Data(Fixture.content("theirs").bytes)
        f.global.announce(file, by: Fixture.peerA)
        f.onDisk("c.txt", "mine", synced: (3, "mine"))
        f.selection = "c.txt\n"
        let plan = try f.plan()
        #expect(plan.lines.isEmpty)
        #expect(plan.conflictLines == ["concurrent c.txt"])
        #expect(plan.conflicts.first?.choices == [.useGlobal, .keep])
    }

    @Test func anOlderSupersededCopyMayGoWhenDeselected() throws {
        var f = Fixture()
        f.announce("a.txt", "new", version: 2)
        f.onDisk("a.txt", "old", synced: (1, "old"))
        f.connected = [Fixture.peerA]
        #expect(try f.plan().lines == ["delete a.txt"])
    }

    @Test func aDeselectedCopyNewerThanEveryPeerIsTheLastCopy() throws {
        var f = Fixture()
        f.announce("reg.txt", "V2", version: 2)
        f.onDisk("reg.txt", "V3", synced: (3, "V3"))
        f.connected = [Fixture.peerA]
        #expect(try f.plan().conflictLines == ["last-copy reg.txt"])
    }

    @Test func aDeletionThatDoesNotReplaceTheSyncedVersionDeletesNothing() throws {
        var f = Fixture()
        f.announce("d.txt", version: 2, deleted: true)
        f.onDisk("d.txt", "kept", synced: (3, "kept"))
        f.selection = "d.txt\n"
        let plan = try f.plan()
        #expect(plan.lines.isEmpty)
        #expect(plan.conflictLines == ["concurrent d.txt"])
        #expect(plan.conflicts.first?.choices == [.deleteLocal, .keep])
        f.global = GlobalIndex()
        f.announce("d.txt", version: 4, deleted: true)
        let newer = try f.plan()
        #expect(newer.lines == ["delete d.txt"])
        #expect(newer.actions.first?.cause == .deletedOnPeers)
    }

    @Test func confirmingNeverStepsASyncedRecordBack() throws {
        var f = Fixture()
        f.announce("a.txt", "same", version: 2)
        f.onDisk("a.txt", "same", synced: (5, "same"))
        Reconciler.confirmSynced(&f.local, global: f.global)
        #expect(f.local["a.txt"]?.synced?.version == Fixture.version(5))
    }
}

/// Permissions as syncthing applies them (issue 19, item 6) and a `.stignore` Kaiten cannot
/// manage never reads as "in sync" (item 7).
@Suite(.timeLimit(.minutes(5)))
struct PermissionAndStIgnoreRuleTests {
    @Test func aModeOnlyChangeIsAChmodAction() throws {
        var f = Fixture()
        f.announce("p755", "same", permissions: 0o700)
        f.announce("p644", "same", permissions: 0o755)
        f.onDisk("p755", "same", synced: (1, "same"), permissions: 0o755)
        f.onDisk("p644", "same", synced: (1, "same"), permissions: 0o644)
        f.selection = "p755\np644\n"
        let plan = try f.plan()
        #expect(plan.lines == ["chmod p644", "chmod p755"])
        #expect(plan.actions.map(\.mode) == [0o755, 0o700])
        #expect(plan.actions.first?.cause == .permissions)
        f.ignorePermissions = true
        #expect(try f.plan().lines.isEmpty)
    }

    @Test func directoriesAreCreatedAndKeptWithTheirModes() throws {
        var f = Fixture()
        f.announce("ro", type: .directory, permissions: 0o555)
        f.announce("ro/a.txt")
        f.announce("open", type: .directory, permissions: 0o700)
        f.onDisk("open", kind: .directory, permissions: 0o755)
        f.selection = "ro\nopen\n"
        let plan = try f.plan()
        #expect(plan.actions.first { $0.path == "ro" }?.mode == 0o555)
        #expect(plan.actions.contains { $0.action == .chmod && $0.path == "open" && $0.mode == 0o700 })
    }

    @Test func anUnmanagedStIgnoreWithASelectionIsPendingNotInSync() throws {
        var f = Fixture()
        f.announce("a.txt")
        f.selection = "a.txt\n"
        f.stignore = "#include x\n"
        let plan = try f.plan()
        #expect(plan.actions.isEmpty)
        #expect(plan.notApplied?.contains("not in Sushitrain's selective grammar") == true)
        let whole = Plan(lineage: "l", planID: "p", createdAt: "c", deviceID: "d", baseline: .init(configSHA256: "", folders: []), folders: [plan])
        #expect(whole.summary.notApplied == 1)
        #expect(whole.summary.isPending)
        // Without a selection the folder is simply not Kaiten's: nothing pending.
        f.selection = ""
        #expect(try f.plan().notApplied == nil)
    }
}

/// A path the peers turned from a file into a directory, or back, is settled in one apply when
/// the local side is what Kaiten synced (issue 19, item 8).
@Suite(.timeLimit(.minutes(5)))
struct ReplacedTypeRuleTests {
    @Test func aSyncedFileReplacedByADirectoryGoesBeforeThePulls() throws {
        var f = Fixture()
        f.announce("x", type: .directory)
        f.global = GlobalIndex()
        var dir = BEPFileInfo()
        dir.name = "x"
        dir.type = .directory
        dir.version = Fixture.version(2)
        dir.permissions = 0o755
        f.global.announce(dir, by: Fixture.peerA)
        f.announce("x/inner.txt", "inner", version: 2)
        f.onDisk("x", "old", synced: (1, "old"))
        f.selection = "x\n"
        let plan = try f.plan()
        #expect(plan.conflicts.isEmpty, "\(plan.conflictLines)")
        #expect(Set(plan.lines) == ["mkdir x", "pull x/inner.txt", "delete x"])
        #expect(plan.actions.first { $0.action == .delete }?.cause == .replaced)
    }

    @Test func anEditedFileReplacedByADirectoryIsStillAConflict() throws {
        var f = Fixture()
        var dir = BEPFileInfo()
        dir.name = "x"
        dir.type = .directory
        dir.version = Fixture.version(2)
        f.global.announce(dir, by: Fixture.peerA)
        f.onDisk("x", "edited", synced: (1, "old"))
        f.selection = "x\n"
        #expect(try f.plan().conflictLines == ["shadowed x"])
    }

    @Test func aDirectoryReplacedByAFileGoesWhenEverythingInItGoes() throws {
        var f = Fixture()
        f.announce("d", "now a file", version: 3)
        f.announce("d/a.txt", version: 2, deleted: true)
        f.onDisk("d", kind: .directory)
        f.onDisk("d/a.txt", "x", synced: (1, "x"))
        f.selection = "d\n"
        let plan = try f.plan()
        #expect(plan.conflicts.isEmpty, "\(plan.conflictLines)")
        #expect(plan.lines == ["pull d", "delete d/a.txt", "rmdir d"])
        #expect(plan.actions.last?.cause == .replaced)
        // A file below that stays (never synced) keeps the directory: a conflict, nothing removed.
        f.onDisk("d/mine.txt", "mine")
        let kept = try f.plan()
        #expect(kept.conflictLines.contains("shadowed d"))
        #expect(!kept.lines.contains("rmdir d"))
    }
}

/// Issue 10, item 18: a conflict copy is reported as one, not as an unknown file.
@Suite(.timeLimit(.minutes(5)))
struct ConflictCopyRuleTests {
    @Test func aConflictCopyIsItsOwnKind() throws {
        var f = Fixture()
        f.announce("notes.txt", "global")
        f.onDisk("notes.sync-conflict-20261123-010203-ABCDEFG.txt", "mine")
        f.onDisk("stray.txt", "mine")
        let plan = try f.plan()
        #expect(plan.conflictLines == ["conflict-copy notes.sync-conflict-20261123-010203-ABCDEFG.txt", "extraneous stray.txt"])
    }
}
