import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSelection

/// What a long-running service keeps of one folder between its rounds, so that a round after a
/// peer's index update looks only at the paths the update names instead of replaying the whole
/// log and scanning the whole folder: the global log (a reader brought up to its tail), the last
/// scan of the folder, and this device's local index (to announce what a round changed).
///
/// One job: holding that state current. What to do with it is the planner's (pure) and the
/// service's (scheduling). Used by one task at a time (the service's rounds run in turn).
public final class LiveFolder {
    public let config: FolderConfiguration
    let home: KaitenHome
    /// The folder's global log, read once and then only what writers append.
    public let log: IndexLog
    /// The last scan, with what the service wrote since.
    public private(set) var tree: LocalTree
    let announcer: LocalAnnouncer

    /// Opens the folder's log and local index and takes the last saved scan.
    public init(_ config: FolderConfiguration, home: KaitenHome, warn: (String) -> Void = { _ in }) throws {
        self.config = config
        self.home = home
        log = try PeerGenerations.openLog(home: home, folder: config.id, readOnly: true, warn: warn)
        tree = ScanCache.load(path: home.home.scanCachePath(folderID: config.id), warn: warn)
        announcer = try LocalAnnouncer(home: home, folders: [config.id], warn: warn)
    }

    public func close() {
        log.close()
        announcer.close()
    }

    /// Brings the log up to what the peer sessions (or a one-shot verb) appended.
    public func refresh() throws {
        try log.refresh()
    }

    /// Between rounds: the pages of the index snapshots and of the saved scan read this round go
    /// back to the system (they stay in the page cache; the next round maps what it reads
    /// again), the local index is snapshotted when it grew, and a scan held in memory (a whole
    /// round's, or many changes) is saved and read in place from then on.
    public func betweenRounds(warn: (String) -> Void) {
        // A newer snapshot (the intake's, just written) replaces what this view holds in memory.
        // One that cannot be read is the next round's error (it refreshes first).
        _ = try? log.refresh()
        log.index.releaseSnapshotPages()
        announcer.betweenRounds(warn: warn)
        if tree.entriesInMemory >= Self.entriesKeptInMemory {
            do {
                tree = try ScanCache.saveAndReadInPlace(tree, path: home.home.scanCachePath(folderID: config.id))
            } catch {
                warn("warning: \(error); the folder's scan stays in memory")
            }
        }
        tree.releasePages()
    }

    /// Below this many changed entries the scan is not saved between rounds: a few paths in memory
    /// cost less than writing the whole cache again.
    static let entriesKeptInMemory = 1_024

    /// Takes a whole round's scan (it read everything): the base for the next scoped round.
    public func adopt(_ state: Planner.FolderState) {
        tree = state.input.local
    }

    /// Whether the disk at `path` is what the last scan (or the service's own write) left:
    /// a change the watcher reports there is then the echo of the service's own work.
    public func unchanged(at path: String) -> Bool {
        FolderScanner(root: config.path).isUnchanged(path, recorded: tree[path])
    }

    /// Scans `paths` again (after an apply wrote them, or before planning them) and records,
    /// for each that now holds its global version, that it is synced.
    public func rescan(_ paths: Set<String>, warn: (String) -> Void = { _ in }) throws {
        _ = try Planner.scanner(for: config).rescan(paths, in: &tree, blockSizeHint: Planner.blockSizeHint(log.index), warn: warn)
        // A folder held as ciphertext has its synced versions in the files' trailers.
        if config.type != .receiveencrypted { Reconciler.confirmSynced(&tree, global: log.index, only: paths) }
    }

    /// What the reconciler needs to plan `scope` (the log refreshed and the paths scanned
    /// again first): the whole global index and scan, the plan limited to those paths.
    public func scopedState(_ scope: Set<String>, requirePeers: Int, connected: Set<DeviceID>?, warn: (String) -> Void) throws
        -> Planner.FolderState
    {
        try refresh()
        try announcer.catchUp(folder: config.id)
        try rescan(scope, warn: warn)
        let selectionPath = home.home.selectionPath(folderID: config.id)
        let (selection, selectionBytes) = try Planner.readSelection(selectionPath)
        let stignore = Planner.readStIgnore(config)
        var local = tree
        if config.type == .receiveencrypted { StoredFolder.prepare(&local, global: log.index) }
        var input = try Planner.input(
            config, home: home, log: log, selection: selection, selectionBytes: selectionBytes, stignore: stignore, local: local,
            requirePeers: requirePeers,
            announced: {
                var mine: [String: FileEntry] = [:]
                for path in scope {
                    if let entry = announcer.announced(folder: config.id, path: path), !entry.isInvalid { mine[path] = entry }
                }
                return mine
            })
        input.scope = scope
        input.connectedPeers = connected
        return Planner.FolderState(input: input, log: log, scanStatistics: FolderScanner.Statistics())
    }

    /// Brings this device's announcements of `paths` in line with the log and the disk, and
    /// sends the peers what they lack of them.
    public func announce(_ paths: Set<String>, sessions: PeerSessions, warn: @escaping @Sendable (String) -> Void) async {
        do {
            try log.refresh()
            let (file, _) = try Planner.readSelection(home.home.selectionPath(folderID: config.id))
            let sends = config.type == .sendreceive || config.type == .sendonly
            let selection = config.type == .receiveencrypted ? Selection(everythingIn: log.index) : Selection(file, global: log.index, local: sends ? tree : nil)
            guard try announcer.refresh(folder: config.id, log: log, local: tree, selection: selection, only: paths, warn: warn) > 0 else { return }
        } catch {
            warn("could not announce this device's index of \(config.id): \(error)")
            return
        }
        await sessions.send(from: announcer, folders: [config.id], warn: warn)
    }
}
