import KaitenProtocol
import KaitenReconcile
import Testing

@testable import KaitenApply
@testable import KaitenIndex

/// A planned deletion decided again as it runs, from what the peers say now: the rule that
/// keeps the last copy of a file, tested without a folder or a peer.
@Suite struct DeletionRecheckTests {
    static let nas = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")
    static let laptop = try! DeviceID("MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD")

    func global(_ type: BEPFileInfoType = .file, deleted: Bool = false, invalid: Bool = false, holders: [DeviceID]) -> GlobalEntry {
        var info = BEPFileInfo()
        info.name = "a.mkv"
        info.type = type
        info.deleted = deleted
        info.invalid = invalid
        let file = FileEntry(announced: info)
        return GlobalEntry(path: "a.mkv", file: file, holders: holders, announcements: holders.map { ($0, file) })
    }

    func delete(_ cause: Action.Cause) -> Action {
        Action(action: .delete, path: "a.mkv", size: 1, reason: "", type: .file, cause: cause)
    }

    @Test func aDeselectedFileGoesOnlyWhileEnoughConnectedPeersHoldIt() {
        let held = global(holders: [Self.nas, Self.laptop])
        #expect(DeletionRecheck.verdict(for: delete(.deselected), global: held, live: [Self.nas], requirePeers: 1) == .proceed)
        #expect(
            DeletionRecheck.verdict(for: delete(.deselected), global: held, live: [Self.nas], requirePeers: 2)
                == .kept("only 1 connected peer holds it now (--require-peers 2); kept"))
        // A peer that announced it but is not connected now (the NAS that died overnight) counts for nothing.
        #expect(
            DeletionRecheck.verdict(for: delete(.deselected), global: held, live: [], requirePeers: 1)
                == .kept("only 0 connected peers hold it now (--require-peers 1); kept"))
    }

    @Test func aDeselectedFileWhoseGlobalVersionIsGoneOrInvalidIsKept() {
        #expect(DeletionRecheck.verdict(for: delete(.deselected), global: nil, live: [Self.nas], requirePeers: 1) != .proceed)
        let deleted = global(deleted: true, holders: [Self.nas])
        #expect(DeletionRecheck.verdict(for: delete(.deselected), global: deleted, live: [Self.nas], requirePeers: 1) != .proceed)
        let invalid = global(invalid: true, holders: [Self.nas])
        #expect(DeletionRecheck.verdict(for: delete(.deselected), global: invalid, live: [Self.nas], requirePeers: 1) != .proceed)
    }

    @Test func aFileDeletedOnThePeersGoesOnlyWhileItIsStillDeletedThere() {
        let stillDeleted = global(deleted: true, holders: [])
        #expect(DeletionRecheck.verdict(for: delete(.deletedOnPeers), global: stillDeleted, live: [], requirePeers: 3) == .proceed)
        #expect(DeletionRecheck.verdict(for: delete(.deletedOnPeers), global: nil, live: [], requirePeers: 1) == .proceed)
        let restored = global(holders: [Self.nas])
        #expect(
            DeletionRecheck.verdict(for: delete(.deletedOnPeers), global: restored, live: [Self.nas], requirePeers: 1)
                == .refused("it is no longer deleted on peers; kept"))
        #expect(DeletionRecheck.verdict(for: delete(.movedOnPeers), global: restored, live: [Self.nas], requirePeers: 1) != .proceed)
    }

    @Test func aFileReplacedByADirectoryGoesOnlyWhileThePeersHaveTheDirectory() {
        let directory = global(.directory, holders: [Self.nas])
        #expect(DeletionRecheck.verdict(for: delete(.replaced), global: directory, live: [], requirePeers: 1) == .proceed)
        let file = global(.file, holders: [Self.nas])
        #expect(
            DeletionRecheck.verdict(for: delete(.replaced), global: file, live: [Self.nas], requirePeers: 1)
                == .refused("the peers no longer have a directory here; kept"))
        #expect(DeletionRecheck.verdict(for: delete(.replaced), global: nil, live: [], requirePeers: 1) != .proceed)
    }
}
