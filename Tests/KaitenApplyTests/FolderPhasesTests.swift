import Foundation
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenTransfer
import Synchronization
import Testing

@testable import KaitenApply
@testable import KaitenIndex

#if canImport(Glibc)
import Glibc
#endif

/// The executor's phases on a fake file system: what each does to the folder, what it reports,
/// and what it refuses, without a disk, a peer or a plan made by the planner.
@Suite struct FolderPhasesTests {
    static let nas = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")

    /// A folder in memory: its entries by name, and every operation asked of it, in order.
    final class FakeFolder: FolderFileSystem {
        struct State {
            var files: [String: LocalFile.Kind] = [:]
            var operations: [String] = []
            /// Names whose content changed since the plan (the check refuses them).
            var changed: Set<String> = []
            /// Directories that refuse to go (they still hold something the plan does not know).
            var notEmpty: Set<String> = []
            var ignoreFileFails = false
            var flushed: [Set<String>] = []
        }
        let state: Mutex<State>
        let archives: Bool
        /// Called after each deletion (a test raises a stop from here).
        let afterDelete: @Sendable (String) -> Void

        init(_ files: [String: LocalFile.Kind], archives: Bool = false, afterDelete: @escaping @Sendable (String) -> Void = { _ in }) {
            state = Mutex(State(files: files))
            self.archives = archives
            self.afterDelete = afterDelete
        }

        func note(_ operation: String) { state.withLock { $0.operations.append(operation) } }
        var operations: [String] { state.withLock { $0.operations } }
        var files: [String: LocalFile.Kind] { state.withLock { $0.files } }

        func writeIgnoreFile(_ content: String) throws {
            if state.withLock({ $0.ignoreFileFails }) { throw POSIXError(.EROFS) }
            note("write .stignore")
        }
        func removeTemporary(_ name: String) -> Bool {
            note("unlink \(name)")
            return state.withLock { $0.files.removeValue(forKey: name) != nil }
        }
        func checkUnchanged(_ name: String, planned: LocalFile?) throws(ApplyError) {
            if state.withLock({ $0.changed.contains(name) }) { throw ApplyError(.changedLocally, path: name, "changed locally since the plan; kept") }
        }
        func makeParents(of name: String) throws(ApplyError) {
            let parent = (name as NSString).deletingLastPathComponent
            note("mkdir -p \(parent)")
            state.withLock { $0.files[parent] = .directory }
        }
        func checkParents(of name: String) throws(ApplyError) {}
        func delete(_ name: String, archive: Bool) throws(ApplyError) {
            note(archive ? "archive \(name)" : "delete \(name)")
            state.withLock { _ = $0.files.removeValue(forKey: name) }
            afterDelete(name)
        }
        func isDirectory(_ name: String) -> Bool { state.withLock { $0.files[name] == .directory } }
        func removeDirectory(_ name: String) -> Int32? {
            note("rmdir \(name)")
            return state.withLock { state in
                if state.notEmpty.contains(name) { return ENOTEMPTY }
                state.files[name] = nil
                return nil
            }
        }
        func setMode(_ name: String, _ mode: UInt32) throws(ApplyError) { note("chmod \(String(mode, radix: 8)) \(name)") }
        func syncParents(of removed: Set<String>) async { state.withLock { $0.flushed.append(removed) } }
    }

    func phases(_ disk: FakeFolder, planned: [String: LocalFile.Kind], requirePeers: Int = 1, stop: StopSignal? = nil)
        -> (FolderPhases, Events)
    {
        let events = Events()
        let tree = LocalTree(entries: Dictionary(uniqueKeysWithValues: planned.map { ($0.key, LocalFile(path: $0.key, kind: $0.value, size: 10)) }))
        let phases = FolderPhases(
            folder: "f", disk: disk, planned: tree, requirePeers: requirePeers, stop: stop, report: ApplyReport(), events: events.record)
        return (phases, events)
    }

    /// The events told, as short lines.
    final class Events: Sendable {
        private let lines = Mutex<[String]>([])
        var all: [String] { lines.withLock { $0 } }
        func record(_ event: ApplyEvent) {
            let line: String
            switch event {
            case .done(_, let action, let note): line = "done \(action.action.rawValue) \(action.path)" + (note.map { " (\($0))" } ?? "")
            case .failed(_, let action, let reason): line = "failed \(action.action.rawValue) \(action.path): \(reason)"
            case .kept(_, let action, let reason): line = "kept \(action.path): \(reason)"
            case .removedTemporary(_, let path): line = "removed temporary \(path)"
            default: line = "\(event)"
            }
            lines.withLock { $0.append(line) }
        }
    }

    func action(_ kind: Action.Kind, _ path: String, _ cause: Action.Cause, type: Action.EntryType = .file, mode: UInt32? = nil) -> Action {
        Action(action: kind, path: path, size: 10, reason: "", type: type, cause: cause, mode: mode)
    }

    func global(_ path: String, deleted: Bool = false, holders: [DeviceID]) -> GlobalEntry {
        var info = BEPFileInfo()
        info.name = path
        info.deleted = deleted
        let file = FileEntry(announced: info)
        return GlobalEntry(path: path, file: file, holders: holders, announcements: holders.map { ($0, file) })
    }

    /// The peers as the deletions see them: `nas` connected, holding what `held` names.
    func holders(held: Set<String>, deleted: Set<String> = []) -> FolderPhases.Holders {
        let entries = Dictionary(
            uniqueKeysWithValues: held.map { ($0, global($0, holders: [Self.nas])) } + deleted.map { ($0, global($0, deleted: true, holders: [Self.nas])) })
        return { ([Self.nas], { entries[$0] }) }
    }

    @Test func aDeletionGoesOnlyWhenTheRecheckAndTheLocalCheckAgree() async {
        let disk = FakeFolder(["docs": .directory, "docs/held.txt": .file, "docs/lonely.txt": .file, "edited.txt": .file, "gone.txt": .file])
        disk.state.withLock { $0.changed = ["edited.txt"] }
        let (phases, events) = phases(disk, planned: disk.files)
        await phases.delete(
            [
                action(.delete, "docs/held.txt", .deselected), action(.delete, "docs/lonely.txt", .deselected),
                action(.delete, "edited.txt", .deselected), action(.delete, "gone.txt", .deletedOnPeers),
            ],
            holders: holders(held: ["docs/held.txt", "edited.txt"], deleted: ["gone.txt"]))
        #expect(disk.operations.sorted() == ["delete docs/held.txt", "delete gone.txt"])
        #expect(disk.files.keys.sorted() == ["docs", "docs/lonely.txt", "edited.txt"])
        #expect(
            events.all == [
                "done delete docs/held.txt",
                "kept docs/lonely.txt: only 0 connected peers hold it now (--require-peers 1); kept",
                "failed delete edited.txt: changed locally since the plan; kept",
                "done delete gone.txt",
            ])
        #expect(phases.report.done == 2 && phases.report.freedBytes == 20)
        #expect(phases.report.keptForSafety.map(\.path) == ["docs/lonely.txt"])
        #expect(phases.report.failed.map(\.path) == ["edited.txt"])
        #expect(phases.tree["docs/held.txt"] == nil && phases.tree["docs/lonely.txt"] != nil)
        // The directories are flushed once, after the batch, for the entries removed.
        #expect(disk.state.withLock { $0.flushed }.isEmpty)
        await phases.flushRemovals()
        #expect(disk.state.withLock { $0.flushed } == [["docs/held.txt", "gone.txt"]])
    }

    @Test func whatThePeersDeletedIsArchivedAndWhatIsDeselectedIsNot() async {
        let disk = FakeFolder(["a.txt": .file, "b.txt": .file], archives: true)
        let (phases, _) = phases(disk, planned: disk.files)
        await phases.delete(
            [action(.delete, "a.txt", .deletedOnPeers), action(.delete, "b.txt", .deselected)], holders: holders(held: ["b.txt"], deleted: ["a.txt"]))
        #expect(disk.operations == ["archive a.txt", "delete b.txt"])
    }

    @Test func aStopIsHonouredBetweenBatchesOfDeletions() async {
        let names = (0..<1_200).map { String(format: "n%04d", $0) }
        let stop = StopSignal()
        let disk = FakeFolder(Dictionary(uniqueKeysWithValues: names.map { ($0, .file) }), afterDelete: { _ in stop.raise(SIGINT) })
        let (phases, _) = phases(disk, planned: disk.files, stop: stop)
        await phases.delete(names.map { action(.delete, $0, .deselected) }, holders: holders(held: Set(names)))
        // The batch running when the stop came ends; no other starts.
        #expect(phases.report.done == 512)
        #expect(disk.files.count == 1_200 - 512)
    }

    @Test func aDirectoryIsRemovedWhenEmptyLeftWhenNotAndAFailureOnlyWhenItMustMakeRoom() {
        let disk = FakeFolder(["empty": .directory, "full": .directory, "blocking": .directory, "file": .file])
        disk.state.withLock { $0.notEmpty = ["full", "blocking"] }
        let (phases, events) = phases(disk, planned: disk.files)
        for a in [
            action(.rmdir, "empty", .deselected, type: .directory), action(.rmdir, "full", .deletedOnPeers, type: .directory),
            action(.rmdir, "blocking", .replaced, type: .directory), action(.rmdir, "never-there", .deletedOnPeers, type: .directory),
            action(.rmdir, "file", .deletedOnPeers, type: .directory),
        ] {
            phases.removeDirectory(a)
        }
        #expect(
            events.all == [
                "done rmdir empty",
                "done rmdir full (left in place: it still holds files)",
                "failed rmdir blocking: cannot remove it to make room: \(String(cString: strerror(ENOTEMPTY)))",
                "done rmdir never-there (already gone)",
                "done rmdir file (already gone)",
            ])
        #expect(disk.operations == ["rmdir empty", "rmdir full", "rmdir blocking"])
        #expect(phases.report.done == 4 && phases.report.failed.map(\.path) == ["blocking"])
        #expect(phases.tree["empty"] == nil && phases.tree["full"] != nil)
    }

    @Test func directoryModesComeLastDeepestFirstAndCountOnlyWhenThePlanListsThem() {
        let disk = FakeFolder(["a": .directory, "a/b": .directory, "x.sh": .file])
        let (phases, events) = phases(disk, planned: disk.files)
        phases.makeDirectories([action(.mkdir, "c", .selected, type: .directory, mode: 0o500), action(.mkdir, "d", .selected, type: .directory)])
        let chmods = [action(.chmod, "x.sh", .permissions, mode: 0o755), action(.chmod, "a/b", .permissions, type: .directory, mode: 0o555)]
        phases.setModes(chmods)
        // A file's mode at once; no directory's yet (a read-only one would refuse the pulls).
        #expect(disk.operations == ["mkdir -p c", "mkdir -p d", "chmod 755 x.sh"])
        phases.setDirectoryModes(listed: chmods)
        // The deeper first, though the shallower one was made first.
        #expect(disk.operations.suffix(2) == ["chmod 555 a/b", "chmod 500 c"])
        // A new directory's mode is part of making it: not an action of its own.
        #expect(events.all == ["done mkdir c", "done mkdir d", "done chmod x.sh", "done chmod a/b"])
        #expect(phases.report.done == 4)
        #expect(phases.tree["d"]?.kind == .directory)
    }

    @Test func aFileChangedSinceThePlanKeepsItsMode() {
        let disk = FakeFolder(["x.sh": .file])
        disk.state.withLock { $0.changed = ["x.sh"] }
        let (phases, events) = phases(disk, planned: disk.files)
        phases.setModes([action(.chmod, "x.sh", .permissions, mode: 0o755)])
        #expect(disk.operations.isEmpty)
        #expect(events.all == ["failed chmod x.sh: changed locally since the plan; kept"])
    }

    @Test func withoutTheAllowlistWrittenTheFolderStops() {
        let disk = FakeFolder([:])
        disk.state.withLock { $0.ignoreFileFails = true }
        let (phases, events) = phases(disk, planned: [:])
        #expect(!phases.writeIgnoreFile(FolderPlan.StIgnoreChange(changed: true, content: "!/a\n*\n", managed: true)))
        #expect(phases.report.failed.map(\.path) == [".stignore"])
        #expect(events.all.count == 1 && events.all[0].hasPrefix("failed write-stignore .stignore"))
        // Unchanged: nothing written, nothing said, the folder goes on.
        let (calm, quiet) = self.phases(FakeFolder([:]), planned: [:])
        #expect(calm.writeIgnoreFile(FolderPlan.StIgnoreChange(changed: false, content: "", managed: true)))
        #expect(quiet.all.isEmpty)
    }

    @Test func leftoverTemporariesGoExceptThoseOfFilesThisPlanPulls() {
        let resumed = SafePath.temporaryName(for: "big.iso")
        let stale = SafePath.temporaryName(for: "old.iso")
        let disk = FakeFolder([resumed: .file, stale: .file])
        let (phases, events) = phases(disk, planned: [:])
        phases.removeTemporaries([resumed, stale], resuming: [action(.pull, "big.iso", .selected)])
        #expect(disk.files.keys.sorted() == [resumed])
        #expect(events.all == ["removed temporary \(stale)"])
    }
}
