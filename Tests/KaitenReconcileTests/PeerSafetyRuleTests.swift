import Foundation
import KaitenIndex
import KaitenProtocol
import KaitenScan
import Testing

@testable import KaitenReconcile

/// Issue 19, items 1 and 2: only connected peers count as holders of a file to delete, and a
/// version the synced record dominates (or is concurrent with) is never written.
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
        #expect(plan.conflicts.first?.choices == ["use-global", "keep"])
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
        #expect(plan.conflicts.first?.choices == ["delete-local", "keep"])
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
