import Foundation
import KaitenFiles
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenTransfer

#if canImport(Glibc)
import Glibc
#endif

/// What the executor's phases do to a folder on disk, by name relative to the folder's root:
/// the seam that lets the phases run on a fake file system (``FolderPhasesTests``). The pulls
/// and the sends keep their own ways to the disk (``FilePuller``, the scan cache).
protocol FolderFileSystem: Sendable {
    /// Replaces `.stignore` atomically.
    func writeIgnoreFile(_ content: String) throws
    /// Removes a temp file left by an interrupted run; true when it was there.
    func removeTemporary(_ name: String) -> Bool
    /// Throws unless `name` is still what the plan saw (`planned`; nil: absent).
    func checkUnchanged(_ name: String, planned: LocalFile?) throws(ApplyError)
    /// Makes the parent directories of `name` that are missing.
    func makeParents(of name: String) throws(ApplyError)
    /// Throws unless the parents of `name` are real directories (no symlink on the way).
    func checkParents(of name: String) throws(ApplyError)
    /// Whether deletions of files the peers deleted or replaced are archived (versioning).
    var archives: Bool { get }
    /// Deletes the file `name`, or with `archive` moves it into the folder's versions.
    func delete(_ name: String, archive: Bool) throws(ApplyError)
    /// Whether `name` is a directory (not a symlink to one).
    func isDirectory(_ name: String) -> Bool
    /// Removes the empty directory `name`; the errno when it cannot.
    func removeDirectory(_ name: String) -> Int32?
    func setMode(_ name: String, _ mode: UInt32) throws(ApplyError)
    /// Flushes the directories entries were removed from (`removed` names the entries).
    func syncParents(of removed: Set<String>) async
}

/// The folder on disk.
struct FolderDisk: FolderFileSystem {
    let root: String
    let versioner: Versioner?

    func full(_ name: String) -> String { root + "/" + name }

    func writeIgnoreFile(_ content: String) throws { try AtomicFile.write(Array(content.utf8), to: full(".stignore")) }

    func removeTemporary(_ name: String) -> Bool { unlink(full(name)) == 0 }

    func checkUnchanged(_ name: String, planned: LocalFile?) throws(ApplyError) {
        try Applier.checkUnchanged(root: root, name: name, planned: planned)
    }

    func makeParents(of name: String) throws(ApplyError) { try SafePath.prepareParents(root: root, name: name) }

    func checkParents(of name: String) throws(ApplyError) { try SafePath.prepareParentsExisting(root: root, name: name) }

    var archives: Bool { versioner != nil }

    func delete(_ name: String, archive: Bool) throws(ApplyError) {
        if archive, let versioner {
            try versioner.archive(root: root, name: name)
        } else {
            try SafePath.unlinkMakingWritable(full(name), name: name)
        }
    }

    func isDirectory(_ name: String) -> Bool {
        var info = stat()
        return lstat(full(name), &info) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }

    func removeDirectory(_ name: String) -> Int32? { rmdir(full(name)) == 0 ? nil : errno }

    func setMode(_ name: String, _ mode: UInt32) throws(ApplyError) { try Applier.setMode(full(name), mode, name: name) }

    func syncParents(of removed: Set<String>) async {
        await SafePath.syncDirectories(Set(removed.map { (full($0) as NSString).deletingLastPathComponent }))
    }
}

/// One folder's plan carried out, phase by phase, on a ``FolderFileSystem``: what each phase
/// did goes into ``report`` and ``tree`` and is told through `events`, as it happens. The
/// executor runs the phases in its order (deletions that make room, directories, pulls, file
/// modes, deletions, directory modes, sends) and the pulls between them.
final class FolderPhases {
    let folder: String
    let disk: any FolderFileSystem
    /// The folder as the plan saw it: a deletion or a mode change goes ahead only on that.
    let planned: LocalTree
    let requirePeers: Int
    let stop: StopSignal?
    let events: (ApplyEvent) -> Void
    /// The report so far (of every folder before this one too).
    var report: ApplyReport
    /// The folder as it is now, for the scan cache.
    var tree: LocalTree
    /// The entries removed since the last flush of their directories.
    private var removed: Set<String> = []
    /// Directory modes to set last, deepest first: a read-only directory made early would refuse
    /// the files pulled into it.
    private(set) var directoryModes: [(path: String, mode: UInt32)] = []

    /// What the peers hold now, asked for before each batch of deletions.
    typealias Holders = () -> (live: Set<DeviceID>, global: @Sendable (String) -> GlobalEntry?)

    init(
        folder: String, disk: any FolderFileSystem, planned: LocalTree, requirePeers: Int, stop: StopSignal?, report: ApplyReport,
        events: @escaping (ApplyEvent) -> Void
    ) {
        self.folder = folder
        self.disk = disk
        self.planned = planned
        self.tree = planned
        self.requirePeers = requirePeers
        self.stop = stop
        self.report = report
        self.events = events
    }

    var stopping: Bool { stop?.isSet == true }

    func done(_ action: Action, note: String? = nil) {
        report.done += 1
        events(.done(folder: folder, action: action, note: note))
    }

    func failed(_ action: Action, _ reason: String, path: String? = nil) {
        report.failed.append(.init(folder, path ?? action.path, reason))
        events(.failed(folder: folder, action: action, reason: reason))
    }

    /// Leftover temp files of an interrupted run: those of files this plan pulls are resumed
    /// (their verified blocks are kept); the others go.
    func removeTemporaries(_ temporaries: [String], resuming pulls: [Action]) {
        let resumable = Set(pulls.map { SafePath.temporaryName(for: $0.path) })
        for temp in temporaries where !resumable.contains(temp) {
            if disk.removeTemporary(temp) { events(.removedTemporary(folder: folder, path: temp)) }
        }
    }

    /// Writes the allowlist; false when it could not be, and nothing of the folder may go on
    /// (without it in place nothing may be deleted).
    func writeIgnoreFile(_ change: FolderPlan.StIgnoreChange) -> Bool {
        guard change.changed else { return true }
        let action = Action(action: .writeStIgnore, path: ".stignore", reason: "write .stignore", type: .file)
        do {
            try disk.writeIgnoreFile(change.content)
            done(action)
            return true
        } catch {
            failed(action, "\(error)")
            return false
        }
    }

    /// Deletions, in batches: each batch's at once (the kernel's work for an unlink, and a
    /// disk's discard, overlap), each re-checked as it runs, then recorded in plan order; a stop
    /// is honoured between batches. Archiving into .stversions creates directories: one at a time.
    func delete(_ actions: [Action], holders: Holders) async {
        var start = 0
        while start < actions.count && !stopping {
            let batch = Array(actions[start..<min(start + 512, actions.count)])
            start += batch.count
            let (live, global) = holders()
            let archiving = disk.archives && batch.contains { $0.cause == .deletedOnPeers || $0.cause == .replaced }
            let (disk, planned, requirePeers) = (disk, planned, requirePeers)
            let outcomes = await Blocking.map(batch, concurrently: !archiving) { action in
                Self.deleteOne(action, disk: disk, planned: planned[action.path], global: global(action.path), live: live, requirePeers: requirePeers)
            }
            for (action, outcome) in zip(batch, outcomes) {
                switch outcome {
                case .deleted:
                    removed.insert(action.path)
                    tree[action.path] = nil
                    report.freedBytes += action.size
                    done(action)
                case .kept(let reason):
                    report.keptForSafety.append(.init(folder, action.path))
                    events(.kept(folder: folder, action: action, reason: reason))
                case .failed(let hint):
                    failed(action, hint)
                }
            }
        }
    }

    /// One deletion, checked and done. Touches nothing of the phases' state: deletions run on
    /// every core at once.
    static func deleteOne(
        _ action: Action, disk: any FolderFileSystem, planned: LocalFile?, global: GlobalEntry?, live: Set<DeviceID>, requirePeers: Int
    ) -> DeleteOutcome {
        do {
            try SafePath.validate(action.path)
            try disk.checkUnchanged(action.path, planned: planned)
            switch DeletionRecheck.verdict(for: action, global: global, live: live, requirePeers: requirePeers) {
            case .proceed: break
            case .kept(let reason): return .kept(reason)
            case .refused(let reason): return .failed(reason)
            }
            try disk.checkParents(of: action.path)
            // What the peers deleted or replaced is kept as the folder's versioning says; a
            // deselected file (still on the peers) or a moved one (its content pulled under the
            // new name) is not.
            try disk.delete(action.path, archive: disk.archives && (action.cause == .deletedOnPeers || action.cause == .replaced))
            return .deleted
        } catch {
            return .failed(error.hint)
        }
    }

    /// Removes a directory the plan removes: gone already is done; one that still holds files
    /// stays (done, said); one the peers replaced by a file and that cannot go is a failure (the
    /// pull that takes its place cannot happen while it stands).
    func removeDirectory(_ action: Action) {
        guard (try? SafePath.validate(action.path)) != nil, disk.isDirectory(action.path) else {
            done(action, note: "already gone")
            return
        }
        if let error = disk.removeDirectory(action.path) {
            if action.cause == .replaced {
                failed(action, "cannot remove it to make room: \(String(cString: strerror(error)))")
                return
            }
            done(action, note: "left in place: it still holds files")
        } else {
            removed.insert(action.path)
            tree[action.path] = nil
            done(action)
        }
    }

    /// Flushes the directories entries were removed from since the last flush: each once after
    /// its batch, not after every unlink (a deselect of 81,000 files waited for 81,000 directory
    /// flushes). Every per-file check still runs before its unlink.
    func flushRemovals() async {
        let names = removed
        removed = []
        await disk.syncParents(of: names)
    }

    /// Makes the plan's directories (their modes are set last).
    func makeDirectories(_ actions: [Action]) {
        for action in actions {
            do {
                try SafePath.validate(action.path)
                try disk.makeParents(of: action.path + "/x")
                if let mode = action.mode { directoryModes.append((action.path, mode)) }
                tree[action.path] = LocalFile(path: action.path, kind: .directory)
                done(action)
            } catch {
                failed(action, "\(error)")
            }
        }
    }

    /// Sets the modes of files now; those of directories are kept for ``setDirectoryModes(listed:)``.
    func setModes(_ actions: [Action]) {
        for action in actions {
            guard let mode = action.mode else { continue }
            if action.type == .directory {
                directoryModes.append((action.path, mode))
                continue
            }
            do {
                try SafePath.validate(action.path)
                try disk.checkParents(of: action.path)
                try disk.checkUnchanged(action.path, planned: planned[action.path])
                try disk.setMode(action.path, mode)
                tree[action.path]?.permissions = mode
                done(action)
            } catch {
                failed(action, error.hint)
            }
        }
    }

    /// Sets the directory modes kept so far, deepest first. Only those the plan lists as a mode
    /// change count as actions done (a new directory's mode is part of making it).
    func setDirectoryModes(listed planActions: [Action]) {
        let deepestFirst = directoryModes.sorted { WireName.components($0.path).count > WireName.components($1.path).count }
        for (path, mode) in deepestFirst {
            let action = Action(action: .chmod, path: path, reason: "directory permissions", type: .directory, cause: .permissions, mode: mode)
            do {
                try SafePath.validate(path)
                try disk.checkParents(of: path)
                try disk.setMode(path, mode)
                tree[path]?.permissions = mode
                if planActions.contains(where: { $0.action == .chmod && $0.path == path }) { done(action) }
            } catch {
                failed(action, error.hint, path: path)
            }
        }
    }
}
