import Foundation
import KaitenFiles
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSelection

/// Gathers what a plan needs from disk — index logs, selection files, `.stignore`, a scan of
/// each folder — and hands it to the pure ``Reconciler``.
public enum Planner {
    /// Everything read for one folder, kept so `ls` and `apply` can reuse it.
    public struct FolderState {
        public var input: FolderInput
        public var log: IndexLog
        public var scanStatistics: FolderScanner.Statistics
    }

    /// Reads one folder's selection, `.stignore`, index log and local scan. The scan cache (and
    /// the synced record, with any new confirmations) is saved.
    /// - Parameter openLog: the folder's global log already open and current (a service's);
    ///   nil: it is opened and read.
    public static func loadFolder(
        _ folder: FolderConfiguration, home: KaitenHome, requirePeers: Int = 1, log openLog: IndexLog? = nil,
        warn: (String) -> Void = { _ in }
    ) throws -> FolderState {
        let log = try openLog ?? PeerGenerations.openLog(home: home, folder: folder.id, readOnly: true, warn: warn)
        let selectionPath = home.home.selectionPath(folderID: folder.id)
        let (selection, selectionBytes) = try readSelection(selectionPath)
        let stignore = readStIgnore(folder)

        let cachePath = home.home.scanCachePath(folderID: folder.id)
        let previous = ScanCache.load(path: cachePath, warn: warn)
        let global = log.index
        let scanner = scanner(for: folder)
        var (tree, statistics) = try scanner.scan(previous: previous, blockSizeHint: blockSizeHint(global), warn: warn)
        let storesCiphertext = folder.type == .receiveencrypted
        // Versions an apply wrote after the cache was last saved (it may have been cut off). A
        // folder held as ciphertext has them in each file's trailer.
        let journaled = storesCiphertext ? 0 : SyncedJournal.merge(
            path: SyncedJournal.path(forCache: cachePath), into: &tree, contentHash: Reconciler.contentHash(of:))
        let confirmed = storesCiphertext ? 0 : Reconciler.confirmSynced(&tree, global: global)
        if statistics.hashedFiles > 0 || confirmed > 0 || journaled > 0 || tree.count != previous.count || statistics.changedEntries > 0 {
            // A cache: a home that cannot be written (read-only, full) still gets its plan,
            // and the next one scans again.
            do {
                try ScanCache.save(tree, path: cachePath)
            } catch {
                warn("\(folder.id): the scan cache was not saved (\(error)); the next plan reads the changed files again")
            }
        }
        // The callers say these are warnings, each in its own way (the service's log has a kind).
        for warning in IndexCompleteness.warnings(home, folder: folder.id, log: log) { warn(warning) }
        if storesCiphertext { StoredFolder.prepare(&tree, global: global) }
        let input = try input(
            folder, home: home, log: log, selection: selection, selectionBytes: selectionBytes, stignore: stignore, local: tree,
            requirePeers: requirePeers, announced: { try ownAnnouncements(home: home, folder: folder.id, warn: warn) })
        return FolderState(input: input, log: log, scanStatistics: statistics)
    }

    /// The local state of one directory of a folder (`kaiten ls`): its entries, or everything
    /// below it when `recursive`, scanned with the scan cache's hashes and synced records.
    /// Reads only; the cache is not written.
    public static func loadLocal(
        _ folder: FolderConfiguration, home: KaitenHome, under directory: String, recursive: Bool, global: GlobalIndex,
        warn: (String) -> Void = { _ in }
    ) throws -> LocalTree {
        let cachePath = home.home.scanCachePath(folderID: folder.id)
        let previous = ScanCache.load(path: cachePath, warn: warn, under: directory)
        var (tree, _) = try scanner(for: folder).scan(
            previous: previous, blockSizeHint: blockSizeHint(global), warn: warn, under: directory, recursive: recursive)
        if folder.type == .receiveencrypted {
            StoredFolder.prepare(&tree, global: global)
        } else {
            SyncedJournal.merge(path: SyncedJournal.path(forCache: cachePath), into: &tree, contentHash: Reconciler.contentHash(of:))
        }
        return tree
    }

    /// How much of what the selection asks for is here (``FolderCompletion/local(global:selection:tree:)``),
    /// from the scan cache and the journal of what applies wrote: no disk is scanned.
    /// - Parameter tree: the folder's last scan when the caller has read it already.
    public static func completion(
        _ folder: FolderConfiguration, home: KaitenHome, log: IndexLog, tree: LocalTree? = nil, needed: ((GlobalEntry) -> Void)? = nil
    ) throws -> FolderCompletion {
        let (file, _) = try readSelection(home.home.selectionPath(folderID: folder.id))
        let selection = folder.type == .receiveencrypted ? Selection(everythingIn: log.index) : Selection(file, global: log.index)
        return FolderCompletion.local(global: log.index, selection: selection, tree: tree ?? lastScan(folder.id, home: home), needed: needed)
    }

    /// The files ``completion(_:home:log:tree:needed:)`` and a peer's completion are computed
    /// from: while none of them changed (same inode, size and modification time), neither did
    /// the completion.
    public static func completionInputs(_ folder: FolderConfiguration, home: KaitenHome) -> [String] {
        let logPath = home.home.indexLogPath(folderID: folder.id)
        let cachePath = home.home.scanCachePath(folderID: folder.id)
        return [
            logPath, IndexLog.snapshotPath(of: logPath), home.home.selectionPath(folderID: folder.id), cachePath,
            SyncedJournal.path(forCache: cachePath), PeerGenerations.path(home.home),
        ]
    }

    /// A folder's tree as its last scan saw it, with what was synced since: the scan cache's
    /// view, no disk read (empty when the folder was never scanned).
    public static func lastScan(_ folderID: String, home: KaitenHome) -> LocalTree {
        let cachePath = home.home.scanCachePath(folderID: folderID)
        var tree = ScanCache.load(path: cachePath)
        SyncedJournal.merge(path: SyncedJournal.path(forCache: cachePath), into: &tree, contentHash: Reconciler.contentHash(of:))
        return tree
    }

    /// The scanner of a folder: one held as ciphertext reads each file's trailer instead of
    /// hashing it (``StoredFolder``).
    public static func scanner(for folder: FolderConfiguration) -> FolderScanner {
        var scanner = FolderScanner(root: folder.path)
        if folder.type == .receiveencrypted { scanner.storedFileReader = StoredFolder.read }
        return scanner
    }

    /// What the reconciler is given for a folder, from what was read of it.
    /// - Parameter announced: this device's announcements, asked only of a folder that sends.
    static func input(
        _ folder: FolderConfiguration, home: KaitenHome, log: IndexLog, selection: SelectionFile, selectionBytes: [UInt8]?,
        stignore: String?, local: LocalTree, requirePeers: Int, announced: () throws -> [String: FileEntry]
    ) throws -> FolderInput {
        let checkpoints = log.checkpoints.map { (device: $0.key, indexID: $0.value.indexID, sequence: $0.value.maxSequence) }
        var input = FolderInput(
            id: folder.id, path: folder.path, selection: selection, selectionBytes: selectionBytes, stignore: stignore,
            global: log.index, checkpoints: checkpoints, local: local, requirePeers: requirePeers)
        input.kept = KeptFiles.load(home.home, folderID: folder.id)
        input.ignorePermissions = folder.ignorePerms || folder.type == .receiveencrypted
        input.storesCiphertext = folder.type == .receiveencrypted
        if folder.type == .sendreceive || folder.type == .sendonly {
            input.sends = true
            input.receives = folder.type == .sendreceive
            input.me = home.identity.deviceID.shortID
            input.announced = try announced()
        }
        return input
    }

    /// The plan of `states` (folders already read), stamped with this home's lineage, a new
    /// plan ID and the config's digest.
    public static func stamp(_ states: [FolderState], home: KaitenHome, requirePeers: Int) throws -> Plan {
        let configBytes = FileManager.default.contents(atPath: home.home.configPath).map { [UInt8]($0) } ?? []
        let formatter = ISO8601DateFormatter()
        var plan = Reconciler.plan(
            states.map(\.input), lineage: try lineage(home.home), planID: UUID().uuidString.lowercased(),
            createdAt: formatter.string(from: Date()), deviceID: home.identity.deviceID.description, configBytes: configBytes)
        plan.requirePeers = requirePeers
        return plan
    }

    /// What this device announces for a folder (its local index), by path: valid entries and
    /// deletions (an invalid one claims nothing).
    static func ownAnnouncements(home: KaitenHome, folder: String, warn: (String) -> Void) throws -> [String: FileEntry] {
        let path = home.home.localIndexPath(folderID: folder)
        guard FileManager.default.fileExists(atPath: path) else { return [:] }
        let log = try IndexLog.open(path: path, folderID: folder, readOnly: true, warn: warn)
        defer { log.close() }
        let me = home.identity.deviceID
        var announced: [String: FileEntry] = [:]
        log.index.forEachValidEntry(from: me) { name, entry in announced[name] = entry }
        return announced
    }

    /// A file is hashed with its global version's block size, so that equal content gives an
    /// equal content hash; nil (syncthing's rule) where there is no such version.
    static func blockSizeHint(_ global: GlobalIndex) -> (String, Int64) -> Int32? {
        { path, size in
            guard let g = global.global(path), g.file.type == .file, g.file.size == size, g.file.blockSize > 0 else { return nil }
            return g.file.blockSize
        }
    }

    /// The folder's `.stignore` as text; nil when there is none.
    static func readStIgnore(_ folder: FolderConfiguration) -> String? {
        FileManager.default.contents(atPath: (folder.path as NSString).appendingPathComponent(".stignore"))
            .map { String(decoding: $0, as: UTF8.self) }
    }

    /// The selection file of a folder; a missing one selects nothing.
    public static func readSelection(_ path: String) throws -> (SelectionFile, [UInt8]?) {
        guard let data = FileManager.default.contents(atPath: path) else { return (SelectionFile(), nil) }
        guard let text = String(data: data, encoding: .utf8) else {
            throw SelectionError(.badPattern, file: path, line: TextFacts.lineOfFirstInvalidUTF8(data), "this line is not UTF-8 text")
        }
        return (try SelectionFile.parse(text, file: path), [UInt8](data))
    }

    /// Writes a folder's selection file: the one writer (the directory made, the file replaced
    /// crash-safely), for `select`, `resolve`, renames followed and import.
    public static func writeSelection(_ selection: SelectionFile, to path: String) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try AtomicFile.write(Array(selection.render().utf8), to: path)
    }

    /// Makes a plan for the given folders (all when empty).
    /// - Parameter connected: per folder, the peers reached just now (``IndexSync/refreshedPeers(_:)``);
    ///   only they count as holders of a file to delete. Nil for an offline plan.
    /// - Parameter pendingSends: plan what this device sent that no connected peer holds yet
    ///   (``ReconcileInput/pendingSends``): one-shot verbs, whose connections end with them.
    public static func plan(
        home: KaitenHome, folders requested: [String], requirePeers: Int = 1, connected: [String: Set<DeviceID>]? = nil,
        pendingSends: Bool = false, refreshFailed: Set<String> = [], warn: (String) -> Void = { _ in }
    ) throws -> (plan: Plan, states: [FolderState]) {
        let (plan, states, _) = try plan(
            home: home, folders: requested, requirePeers: requirePeers, connected: connected, pendingSends: pendingSends,
            refreshFailed: refreshFailed, skipUnscannable: false, warn: warn)
        return (plan, states)
    }

    /// With `skipUnscannable`, a folder that cannot be scanned (its `.stfolder` marker missing,
    /// the disk not mounted) is left out of the plan and reported in `skipped`, and the others
    /// go on; without it, that folder's error is thrown.
    /// - Parameter logs: folders' global logs already open and current, by folder (a service's).
    public static func plan(
        home: KaitenHome, folders requested: [String], requirePeers: Int = 1, connected: [String: Set<DeviceID>]? = nil,
        pendingSends: Bool = false, refreshFailed: Set<String> = [], skipUnscannable: Bool, logs: [String: IndexLog] = [:],
        warn: (String) -> Void = { _ in }
    ) throws -> (plan: Plan, states: [FolderState], skipped: [(folder: String, reason: String)]) {
        let folders = try home.config.folders(named: requested)
        var states: [FolderState] = []
        var skipped: [(folder: String, reason: String)] = []
        for folder in folders {
            do {
                var state = try loadFolder(folder, home: home, requirePeers: requirePeers, log: logs[folder.id], warn: warn)
                state.input.connectedPeers = connected.map { $0[folder.id] ?? [] }
                state.input.pendingSends = pendingSends
                state.input.indexRefreshFailed = refreshFailed.contains(folder.id)
                states.append(state)
            } catch let error as ScanError where skipUnscannable {
                skipped.append((folder.id, error.description))
            }
        }
        var plan = try stamp(states, home: home, requirePeers: requirePeers)
        for i in plan.folders.indices {
            guard let folder = folders.first(where: { $0.id == plan.folders[i].id }) else { continue }
            if let warning = spaceWarning(plan.folders[i], folder: folder) { plan.folders[i].warnings.append(warning) }
        }
        return (plan, states, skipped)
    }

    /// Follows each rename the plan found: the new name is selected and the old name's own
    /// line (if it had one) removed, in the folder's selection file, written atomically.
    /// Returns what was followed, per folder; plan again afterwards.
    public static func followRenames(_ plan: Plan, home: KaitenHome) throws -> [(folder: String, rename: FolderPlan.Rename)] {
        var followed: [(folder: String, rename: FolderPlan.Rename)] = []
        for folder in plan.folders {
            guard let renames = folder.renames, !renames.isEmpty else { continue }
            let path = home.home.selectionPath(folderID: folder.id)
            var (selection, _) = try readSelection(path)
            for rename in renames {
                _ = try selection.deselect(PathRules.escapeGlobCharacters(rename.from))
                _ = try selection.select(PathRules.escapeGlobCharacters(rename.to))
                followed.append((folder.id, rename))
            }
            try writeSelection(selection, to: path)
        }
        return followed
    }

    /// A warning when the pulls need more than the free space above the folder's minDiskFree.
    static func spaceWarning(_ plan: FolderPlan, folder: FolderConfiguration) -> String? {
        let needed = plan.actions.filter { $0.action == .pull }.reduce(Int64(0)) { $0 + $1.size }
        guard needed > 0, let space = DiskSpace.of(folder.path) else { return nil }
        let minimum = folder.minDiskFree.bytes(ofTotal: space.total)
        let usable = space.available - minimum
        guard needed > usable else { return nil }
        let human = { (bytes: Int64) in TextFacts.human(max(0, bytes)) }
        return "the pulls need \(human(needed)) but \(human(usable)) is free above minDiskFree \(folder.minDiskFree.description) "
            + "(\(human(minimum))): apply will pull what fits and fail the rest; free \(human(needed - usable)) or select less"
    }

    /// The home's lineage, made on first use.
    public static func lineage(_ home: Home) throws -> String {
        if let data = FileManager.default.contents(atPath: home.lineagePath),
            let text = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines), !text.isEmpty
        {
            return text
        }
        try FileManager.default.createDirectory(atPath: home.stateDirectory, withIntermediateDirectories: true)
        let fresh = UUID().uuidString.lowercased()
        try AtomicFile.write(Array((fresh + "\n").utf8), to: home.lineagePath)
        return fresh
    }
}

/// `state/kept/<folder>.txt`: paths the user chose to keep as they are (`kaiten resolve --keep`),
/// one per line as `SHA256-HEX PATH`.
public enum KeptFiles {
    static func path(_ home: Home, folderID: String) -> String {
        (home.stateDirectory as NSString).appendingPathComponent("kept/\(folderID.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? folderID).txt")
    }

    public static func load(_ home: Home, folderID: String) -> [String: ContentHash] {
        guard let text = try? String(contentsOfFile: path(home, folderID: folderID), encoding: .utf8) else { return [:] }
        var kept: [String: ContentHash] = [:]
        for line in TextLines.nonEmpty(text) {
            guard let space = line.firstIndex(of: " ") else { continue }
            let hex = line[..<space]
            var bytes: [UInt8] = []
            var index = hex.startIndex
            while index < hex.endIndex, let next = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex), let byte = UInt8(hex[index..<next], radix: 16) {
                bytes.append(byte)
                index = next
            }
            if let hash = ContentHash(bytes: bytes) { kept[String(line[line.index(after: space)...])] = hash }
        }
        return kept
    }

    public static func add(_ home: Home, folderID: String, path entry: String, hash: ContentHash) throws {
        var kept = load(home, folderID: folderID)
        kept[entry] = hash
        let file = path(home, folderID: folderID)
        try FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let text = kept.keys.sorted().map { "\(kept[$0]!.hex) \($0)\n" }.joined()
        try AtomicFile.write(Array(text.utf8), to: file)
    }
}
