import Foundation
import KaitenFiles
import KaitenTransfer
import KaitenConfig
import KaitenEncryption
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSync
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Applies plans: the lock, the stale check, the safety brakes, then `.stignore`, mkdir, pulls,
/// deletions (each re-checked as it runs), rmdir, and the record of what was applied.
public enum Applier {
    /// A plan made fresh (after an index sync whose connections stay open for the pulls).
    public struct Prepared {
        public var plan: Plan
        public var states: [Planner.FolderState]
        public var session: PeerSession
        public var warnings: [String]
        /// Folders left out because they cannot be scanned (`.stfolder` missing), and why.
        public var skipped: [(folder: String, reason: String)]

        public init(
            plan: Plan, states: [Planner.FolderState], session: PeerSession, warnings: [String], skipped: [(folder: String, reason: String)]
        ) {
            self.plan = plan
            self.states = states
            self.session = session
            self.warnings = warnings
            self.skipped = skipped
        }

        /// The folders whose announcement the apply's end brings in line: the plan's, and
        /// those left out of it.
        public var folders: [String] { plan.folders.map(\.id) + skipped.map(\.folder) }
    }

    /// Holds `state/apply.lock` for the life of the value: one apply per home at a time.
    public final class Lock {
        let fd: Int32
        init(fd: Int32) { self.fd = fd }
        deinit { close(fd) }
    }

    /// Runs the plan's actions in order. Every failure is reported and the rest continues.
    /// - Parameter stop: SIGINT/SIGTERM: no new file or block is started once it is set; files
    ///   cut short keep their temp file (resumed by the next apply); nothing after the pulls runs.
    /// - Parameter sendTimeout: how long, after announcing what was sent, to wait for
    ///   `requirePeers` connected peers to hold each sent change (0: do not wait).
    /// - Parameter progressInterval: how often, while files are pulled, progress is reported by
    ///   bytes (a big file does not look stuck until it completes).
    public static func execute(
        _ plan: Plan, prepared: Prepared, home: KaitenHome, requirePeers: Int, sendTimeout: Double = 0, stop: StopSignal? = nil,
        progressInterval: Duration = .milliseconds(250), events: @escaping (ApplyEvent) -> Void
    ) async -> ApplyReport {
        var report = ApplyReport()
        let pulls = plan.folders.flatMap { $0.actions.filter { $0.action == .pull } }
        let totalBytes = pulls.reduce(Int64(0)) { $0 + $1.size }
        // A local copy that loses a conflict is moved aside and sent as a new file: one more
        // action than the plan lists, counted here so that the start and the summary agree.
        let conflictCopySends = plan.folders.reduce(0) { count, folder in
            let sends = prepared.states.first { $0.input.id == folder.id }?.input.sends ?? false
            return count + (sends ? folder.actions.count { $0.action == .pull && $0.cause == .conflictLost } : 0)
        }
        events(.start(actions: plan.folders.reduce(0) { $0 + $1.actions.count } + conflictCopySends, pullBytes: totalBytes))
        var filesDone = 0
        let bytesMoved = ByteCounter()
        let watcher = UpdateWatcher(updates: prepared.session.updates())
        defer { watcher.stop() }
        for folderPlan in plan.folders {
            guard let state = prepared.states.first(where: { $0.input.id == folderPlan.id }),
                let config = home.config.folders.first(where: { $0.id == folderPlan.id })
            else { continue }
            report.conflicts += folderPlan.conflicts.count
            let root = config.path
            let log = state.log
            let rule = log.conflictRule
            let planned = state.input.local
            if stop?.isSet == true {
                report.notDone += folderPlan.actions.count
                continue
            }
            let disk = FolderDisk(root: root, versioner: Versioner(folder: config))
            // A pull, like a deletion, only goes ahead while the path is what the plan saw.
            let check: FilePuller.LocalCheck = { name throws(ApplyError) in
                try disk.checkUnchanged(name, planned: planned[name])
            }
            let phases = FolderPhases(
                folder: folderPlan.id, disk: disk, planned: planned, requirePeers: requirePeers,
                stop: stop, report: report, events: events)
            defer { report = phases.report }
            phases.removeTemporaries(state.scanStatistics.temporaries, resuming: folderPlan.actions.filter { $0.action == .pull })
            guard phases.writeIgnoreFile(folderPlan.stignore) else { continue }
            // A plan of named paths only (a service's round after a peer's update) copies blocks
            // from those paths' own local files, which an edit mostly keeps; indexing every block
            // of a big folder would cost more than such a pull. A whole plan indexes them all.
            let blockTree = state.input.scope.map { scope in
                LocalTree(entries: Dictionary(uniqueKeysWithValues: scope.compactMap { path in planned[path].map { (path, $0) } }))
            } ?? planned
            // Held as the untrusted device: blocks are ciphertext, each file keeps its sealed
            // FileInfo as its trailer (its record of what it holds; no journal).
            let storesCiphertext = config.type == .receiveencrypted
            let source = BlockSource(
                folderID: folderPlan.id, root: root, connections: prepared.session.connections, tree: blockTree,
                verifiesContent: !storesCiphertext)
            let cachePath = home.home.scanCachePath(folderID: folderPlan.id)
            let journal = storesCiphertext ? nil : try? SyncedJournal(path: SyncedJournal.path(forCache: cachePath))
            let puller = {
                var puller = FilePuller(root: root, ignorePermissions: config.ignorePerms, source: source, syncsDirectories: false)
                puller.versioner = disk.versioner
                puller.journal = journal
                puller.groupSync = GroupSync(root: root)
                puller.budget = AsyncBudget(FilePuller.applyBudget)
                puller.copyOwnershipFromParent = config.copyOwnershipFromParent
                puller.stop = stop
                puller.progress = bytesMoved
                return puller
            }()
            var renamedInto: Set<String> = []
            let folderID = folderPlan.id
            let holders: FolderPhases.Holders = {
                let live = prepared.session.live(folder: folderID)
                let index = log.index
                return (live, { index.global($0) })
            }

            // Deletions and rmdirs that make room for a path the peers turned from a file into a
            // directory (or back) run before the pulls.
            let replacedRoots = folderPlan.actions.filter { $0.cause == .replaced }.map(\.path)
            let isMakingRoom: (Action) -> Bool = { action in
                action.cause == .replaced || replacedRoots.contains { action.path.utf8.starts(with: ($0 + "/").utf8) }
            }
            await phases.delete(folderPlan.actions.filter { $0.action == .delete && isMakingRoom($0) }, holders: holders)
            for action in folderPlan.actions where action.action == .rmdir && action.cause == .replaced { phases.removeDirectory(action) }
            await phases.flushRemovals()
            phases.makeDirectories(folderPlan.actions.filter { $0.action == .mkdir })

            // Pulls, several files at once (one request per small file would wait a round trip each).
            let pullActions = Self.interleavedByDirectory(folderPlan.actions.filter { $0.action == .pull })
            // minDiskFree, as syncthing honours it: a file starts only while the space it needs
            // leaves that much free. One that does not fit waits for the files in flight (their
            // space is counted as taken), and fails with the shortfall named only when it does not
            // fit with nothing in flight; smaller files still land.
            let minimumFree = DiskSpace.of(root).map { config.minDiskFree.bytes(ofTotal: $0.total) } ?? 0
            // nil is a tick: a few times a second the progress is reported by bytes, so a big
            // file does not look stuck until it completes.
            await withTaskGroup(of: (Action, Result<LocalFile, ApplyError>, String?)?.self) { group in
                var next = 0
                var deferred: [Action] = []
                var inFlight: [String: Int64] = [:]
                enum Room { case fits, later, never(String) }
                func room(for size: Int64) -> Room {
                    guard size > 0, let now = DiskSpace.of(root) else { return .fits }
                    let reserved = inFlight.values.reduce(0, +)
                    if now.available - reserved - size >= minimumFree { return .fits }
                    if !inFlight.isEmpty { return .later }
                    let above = max(0, now.available - minimumFree)
                    return .never(
                        "not enough free space: it needs \(TextFacts.human(size)), \(TextFacts.human(above)) is free above minDiskFree "
                            + "\(config.minDiskFree.description) (\(TextFacts.human(minimumFree))); free \(TextFacts.human(size - above)) and apply again")
                }
                /// Starts the next file that fits (waiting ones first); false when none can start now.
                func launchNext() -> Bool {
                    if let i = deferred.firstIndex(where: { if case .fits = room(for: $0.size) { true } else { false } }) {
                        launch(deferred.remove(at: i))
                        return true
                    }
                    if inFlight.isEmpty, let waiting = deferred.first, case .never(let why) = room(for: waiting.size) {
                        deferred.removeFirst()
                        group.addTask { (waiting, .failure(ApplyError(.noSpace, path: waiting.path, why)), nil) }
                        return true
                    }
                    while next < pullActions.count {
                        let action = pullActions[next]
                        next += 1
                        switch room(for: action.size) {
                        case .fits:
                            launch(action)
                            return true
                        case .later:
                            deferred.append(action)
                        case .never(let why):
                            group.addTask { (action, .failure(ApplyError(.noSpace, path: action.path, why)), nil) }
                            return true
                        }
                    }
                    return false
                }
                func launch(_ action: Action) {
                    inFlight[action.path] = action.size
                    guard let global = log.index.global(action.path), !global.file.isDeleted, !global.holders.isEmpty else {
                        group.addTask { (action, .failure(ApplyError(.changedGlobally, path: action.path, "no longer available from any peer")), nil) }
                        return
                    }
                    if action.cause == .conflictLost {
                        // The local copy lost the conflict: moved aside first (never overwritten), so
                        // that whatever happens to the pull its content stays here.
                        do {
                            let copy = try moveAsideForConflict(root: root, name: action.path, planned: planned[action.path], winner: global.file.modifiedBy)
                            if var moved = phases.tree[action.path] {
                                moved.path = copy
                                moved.synced = nil
                                phases.tree[copy] = moved
                            }
                            phases.tree[action.path] = nil
                            phases.report.conflictCopies.append(.init(folderPlan.id, copy))
                            events(.conflictCopy(folder: folderPlan.id, path: action.path, copy: copy))
                        } catch {
                            group.addTask { (action, .failure(error), nil) }
                            return
                        }
                    }
                    var blocks: [BEPBlockInfo] = []
                    var sealed: BEPFileInfo?
                    if global.file.type == .file {
                        do {
                            if storesCiphertext {
                                sealed = try log.fileInfo(of: global.file)
                                blocks = sealed!.blocks
                            } else {
                                blocks = try log.blocks(of: global.file)
                            }
                        } catch {
                            group.addTask { (action, .failure(ApplyError(.io, path: action.path, "\(error)")), nil) }
                            return
                        }
                    }
                    let folderID = folderPlan.id
                    group.addTask {
                        // A version that moves on the peers while it is pulled is redone with the
                        // new one (the peers announce it on the open connections).
                        var entry = global.file
                        var blocks = blocks
                        var sealed = sealed
                        var holders = global.holders
                        var note: String?
                        for _ in 0..<3 {
                            let current = entry
                            let currentHolders = holders
                            let stillGlobal: FilePuller.LocalCheck = { name throws(ApplyError) in
                                try check(name)
                                if watcher.newer(than: current, holders: currentHolders, folder: folderID, rule: rule) != nil {
                                    throw ApplyError(.changedGlobally, path: name, "changed on the peers while it was pulled")
                                }
                            }
                            do {
                                let file = try await puller.pull(current, blocks: blocks, holders: currentHolders, sealed: sealed, check: stillGlobal)
                                return (action, .success(file), note)
                            } catch let error as ApplyError {
                                // Stopped before the rename, or refused by peers that no longer
                                // have the old blocks: either way the new version is what to write.
                                guard error.code == .changedGlobally || error.code == .peerFailed,
                                    let newer = watcher.newer(than: current, holders: currentHolders, folder: folderID, rule: rule)
                                else { return (action, .failure(error), nil) }
                                let announced = watcher.announcements(folder: folderID, name: current.name)
                                guard !newer.file.isDeleted, let holder = newer.holders.first, let file = announced[holder] ?? nil else {
                                    return (action, .failure(ApplyError(.changedGlobally, path: action.path, "deleted on the peers while it was pulled; not written")), nil)
                                }
                                entry = newer.file
                                blocks = file.blocks
                                if storesCiphertext { sealed = file }
                                holders = newer.holders
                                note = "redone: it changed on the peers while it was pulled"
                            } catch {
                                return (action, .failure(ApplyError(.io, path: action.path, "\(error)")), nil)
                            }
                        }
                        return (action, .failure(ApplyError(.changedGlobally, path: action.path, "kept changing on the peers; the next apply tries again")), nil)
                    }
                }
                var running = 0
                var recent = ""
                while running < 64 && stop?.isSet != true && launchNext() { running += 1 }
                func tick() {
                    group.addTask {
                        try? await Task.sleep(for: progressInterval)
                        return nil
                    }
                }
                if running > 0 { tick() }
                while let outcome = await group.next() {
                    guard let (action, result, note) = outcome else {
                        if running > 0 {
                            // A file being pulled now (the largest: the one a slow line is about),
                            // not the last one that finished.
                            let pulling = inFlight.max { ($0.value, $1.key) < ($1.value, $0.key) }?.key ?? recent
                            events(.progress(filesDone: filesDone, filesTotal: pulls.count, bytesDone: bytesMoved.value, bytesTotal: totalBytes, current: pulling))
                            tick()
                        }
                        continue
                    }
                    recent = action.path
                    running -= 1
                    inFlight[action.path] = nil
                    filesDone += 1
                    switch result {
                    case .success(let file):
                        phases.tree[file.path] = file
                        renamedInto.insert((root + "/" + file.path as NSString).deletingLastPathComponent)
                        phases.report.pulledBytes += action.size
                        phases.report.done += 1
                        events(.done(folder: folderPlan.id, action: action, note: note))
                    case .failure(let error) where error.code == .interrupted:
                        phases.report.notDone += 1
                    case .failure(let error):
                        phases.report.failed.append(.init(folderPlan.id, action.path, error.hint))
                        events(.failed(folder: folderPlan.id, action: action, reason: error.hint))
                    }
                    events(.progress(filesDone: filesDone, filesTotal: pulls.count, bytesDone: bytesMoved.value, bytesTotal: totalBytes, current: action.path))
                    while running < 64 && stop?.isSet != true && launchNext() { running += 1 }
                    // The last pull is done: the progress tick still asleep is all the group
                    // holds, and waiting it out would add up to its whole interval to the apply.
                    if running == 0 { group.cancelAll() }
                }
                phases.report.notDone += pullActions.count - next + deferred.count
            }
            // Interrupted: what was renamed stays recorded; nothing else is started.
            let stopping = stop?.isSet == true
            if stopping {
                phases.report.interruptedBy = stop?.signal
                phases.report.notDone += folderPlan.actions.filter { $0.action != .pull && $0.action != .mkdir }.count
            }
            // Each directory that received files is fsynced once, before anything is deleted; the
            // synced journal is made durable first, so no rename outlives its record.
            journal?.sync()
            // A directory that cannot be flushed may lose the renames into it in a crash: its
            // files are not called durable, and nothing of this folder is deleted on their word.
            let unflushed = await SafePath.syncDirectories(renamedInto)
            for (directory, error) in unflushed.sorted(by: { $0.key < $1.key }) {
                let name = directory == root ? "." : String(directory.dropFirst(root.count + 1))
                phases.report.failed.append(
                    .init(folderPlan.id, name, "cannot flush the directory to disk (\(String(cString: strerror(error)))): the files put into it "
                        + "may not survive a crash; nothing in this folder is deleted until an apply flushes it"))
            }
            let holdDeletions = !unflushed.isEmpty
            let stats = source.statistics
            phases.report.blocksCopiedLocally += stats.copied
            phases.report.blocksFetched += stats.fetched
            phases.report.blocksRejected += stats.rejected
            phases.report.blocksRefused += stats.refused
            phases.report.blocksLost += stats.lost

            phases.setModes(stopping ? [] : folderPlan.actions.filter { $0.action == .chmod })
            let deletions = folderPlan.actions.filter { $0.action == .delete && !isMakingRoom($0) }
            let rmdirs = folderPlan.actions.filter { $0.action == .rmdir && $0.cause != .replaced && !stopping }
            if holdDeletions {
                if !stopping { phases.report.notDone += deletions.count + rmdirs.count }
            } else {
                await phases.delete(deletions, holders: holders)
                for action in rmdirs { phases.removeDirectory(action) }
            }
            await phases.flushRemovals()
            if storesCiphertext && !holdDeletions && !stopping {
                Self.removeEmptyEncryptedParents(of: deletions.map(\.path), root: root)
            }
            if !stopping { phases.setDirectoryModes(listed: folderPlan.actions) }
            var sendActions = folderPlan.actions.filter { $0.action == .send || $0.action == .sendDelete }
            // A copy moved aside after losing a conflict is a new file here: sent with the rest,
            // as syncthing's scanner picks it up and announces it.
            var local = state.input.local
            for item in phases.report.conflictCopies where item.folder == folderPlan.id {
                let copy = item.path
                guard let moved = phases.tree[copy] else { continue }
                local[copy] = moved
                sendActions.append(
                    Action(
                        action: .send, path: copy, size: moved.kind == .file ? moved.size : 0, reason: "the local copy that lost a conflict",
                        type: moved.kind == .symlink ? .symlink : .file, cause: .localChange))
            }
            if !sendActions.isEmpty && !stopping {
                var sendState = state
                sendState.input.local = local
                let sent = recordSends(
                    sendActions, folder: folderPlan.id, state: sendState, config: config, home: home, tree: &phases.tree, journal: journal,
                    report: &phases.report, events: events)
                phases.report.sent += sent
            }
            if (try? ScanCache.save(phases.tree, path: cachePath)) != nil { SyncedJournal.clear(path: SyncedJournal.path(forCache: cachePath)) }
        }
        // The peers learn what this device holds now (their completion of it moves), and what
        // it sends.
        await prepared.session.announceChanges(home: home, folders: prepared.folders)
        if !report.sent.isEmpty && sendTimeout > 0 {
            report.notHeld = await awaitPeers(
                holding: report.sent, watcher: watcher, session: prepared.session, requirePeers: requirePeers, timeout: sendTimeout,
                stop: stop, events: events)
        }
        return report
    }
}

/// What became of one deletion.
enum DeleteOutcome: Sendable {
    case deleted
    /// Not deleted: a brake held it back (the reason).
    case kept(String)
    case failed(String)
}

extension Applier {
    /// The directories syncthing's layout makes only to hold encrypted names
    /// (`A.syncthing-enc/BC/…`) that deletions left empty: removed, as syncthing's untrusted
    /// device removes them. One that is not empty stays (rmdir refuses).
    static func removeEmptyEncryptedParents(of paths: [String], root: String) {
        var parents: Set<String> = []
        for path in paths {
            var parent = (path as NSString).deletingLastPathComponent
            while !parent.isEmpty && EncryptedPath.isParent(parent) {
                parents.insert(parent)
                parent = (parent as NSString).deletingLastPathComponent
            }
        }
        // Deepest first, so that a parent emptied by its child's removal goes too.
        for parent in parents.sorted(by: { $0.utf8.count > $1.utf8.count }) { _ = rmdir(root + "/" + parent) }
    }
}
