import Crypto
import Foundation
import KaitenFiles
import KaitenConfig
import KaitenIndex
import KaitenPeer
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSelection

/// Keeps this device's local index of each folder current and sends peers what they miss of
/// it. One job: the deciding is ``Announcement``, the storing ``LocalIndex``.
public final class LocalAnnouncer {
    let home: KaitenHome
    private var indexes: [String: LocalIndex] = [:]

    /// Opens the local index of each folder (a fresh one gets a fresh index ID).
    public init(home: KaitenHome, folders: [String], warn: (String) -> Void = { _ in }) throws {
        self.home = home
        let ids = LocalIndexIDs(home: home.home)
        let stored = try ids.ids(for: folders)
        try FileManager.default.createDirectory(atPath: home.home.indexDirectory, withIntermediateDirectories: true)
        for folder in folders {
            indexes[folder] = try LocalIndex.open(
                path: home.home.localIndexPath(folderID: folder), folderID: folder, me: home.identity.deviceID,
                indexID: stored[folder] ?? 0, renewIndexID: { try ids.renew(folder) }, warn: warn)
        }
    }

    /// The local index of `folder`, when this announcer holds it.
    func index(_ folder: String) -> LocalIndex? { indexes[folder] }

    public func close() {
        for index in indexes.values { index.close() }
        indexes = [:]
    }

    /// Lets go of what each local index kept for sending (``send(to:folders:theirView:)`` reads
    /// the log instead from then on).
    public func forgetRecent() {
        for index in indexes.values { index.forgetRecent() }
    }

    /// Ends a one-shot run: what was kept for sending is let go first (a fresh home's entry
    /// per path), then each local index gets its snapshot when enough was recorded since the
    /// last one, so that `plan` and `kaiten run` read it in place instead of replaying every
    /// entry into memory.
    public func close(maintaining warn: (String) -> Void) {
        for index in indexes.values {
            index.forgetRecent()
            index.log.maintain(warn: warn)
        }
        close()
    }

    /// A service between rounds: each local index gets its snapshot when enough was recorded
    /// since the last one, and the pages read of the snapshots go back to the system.
    public func betweenRounds(warn: (String) -> Void) {
        for index in indexes.values {
            index.log.maintain(warn: warn)
            index.log.index.releaseSnapshotPages()
            index.forgetRecent()
        }
    }

    /// Brings every folder's local index in line with its global log (`logs` by folder).
    /// - Parameter deferringNeeds: puts off announcing paths as needed
    ///   (``Announcement/DeferredNeeds``): for an apply, which announces them at its end.
    public func refresh(logs: [String: IndexLog], deferringNeeds: Bool = false, warn: (String) -> Void = { _ in }) throws {
        for (folder, log) in logs where indexes[folder] != nil {
            try refresh(folder: folder, log: log, deferringNeeds: deferringNeeds, warn: warn)
        }
    }

    /// The local index ID of each of `folders` for a ClusterConfig: this announcer's for the
    /// folders it holds, the stored one for the others.
    public func indexIDs(for folders: [String]) throws -> [String: UInt64] {
        var ids = try LocalIndexIDs(home: home.home).ids(for: folders)
        for (folder, index) in indexes { ids[folder] = index.indexID }
        return ids
    }

    /// Per folder: the index ID and highest sequence, for the ClusterConfig.
    public var state: [String: RemoteIndexState] {
        indexes.mapValues { RemoteIndexState(indexID: $0.indexID, maxSequence: $0.maxSequence) }
    }

    /// Brings a folder's local index in line with the global index (`log`), the scan cache and
    /// the selection file, durably. Returns how many entries changed.
    /// - Parameter warn: told about a snapshot of the local index that could not be written.
    /// - Parameter deferringNeeds: puts off announcing paths as needed
    ///   (``Announcement/DeferredNeeds``).
    @discardableResult
    public func refresh(folder: String, log: IndexLog, deferringNeeds: Bool = false, warn: (String) -> Void = { _ in }) throws -> Int {
        guard let index = indexes[folder] else { return 0 }
        // Nothing it depends on moved since the last refresh: nothing to compare (a big folder
        // costs a walk of its whole global index otherwise, on every sync).
        let basisPath = (home.home.stateDirectory as NSString).appendingPathComponent("announced-basis/\(Home.fileSafeName(folder))")
        let basis = Self.basis(home: home.home, folder: folder, type: home.config.folder(id: folder)?.type.rawValue ?? "", log: log, index: index)
        let recorded = FileManager.default.contents(atPath: basisPath)
        if let recorded, recorded == Data(basis.utf8) { return 0 }
        let local = ScanCache.load(path: home.home.scanCachePath(folderID: folder))
        let selectionBytes = FileManager.default.contents(atPath: home.home.selectionPath(folderID: folder)) ?? Data()
        let changed: Int
        let deferred = deferringNeeds ? Announcement.DeferredNeeds() : nil
        if home.config.folder(id: folder)?.type == .receiveencrypted {
            changed = try index.update(
                each: { body in try StoredFolder.forEachAnnounced(log: log, local: local, body) }, blocks: { _ in [] }, warn: warn)
        } else if let recorded, let paths = Self.pathsAnEditedSelectionMoves(
            recordedBasis: recorded, basis: basis, recordedSelection: FileManager.default.contents(atPath: basisPath + ".selection"),
            log: log, local: local, home: home, folder: folder)
        {
            changed = try announceHeld(folder: folder, log: log, local: local, index: index, only: paths, deferred: deferred, warn: warn)
        } else {
            changed = try announceHeld(folder: folder, log: log, local: local, index: index, deferred: deferred, warn: warn)
        }
        // Not in line yet: the next refresh compares again.
        if let deferred, deferred.count > 0 { return changed }
        // Recorded only once the update is on disk: a failed refresh is redone next time. The
        // selection is kept with it: the next refresh after an edit of it alone compares only
        // the paths either version reaches.
        try? FileManager.default.createDirectory(
            atPath: (basisPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try? AtomicFile.write(Array(selectionBytes), to: basisPath + ".selection", mode: 0o600)
        try? AtomicFile.write(Array(Self.basis(home: home.home, folder: folder, type: home.config.folder(id: folder)?.type.rawValue ?? "", log: log, index: index).utf8), to: basisPath, mode: 0o600)
        return changed
    }

    /// When only the selection file changed since the last refresh (the global log, the local
    /// index and the scan cache as they were) and the selection it was made with is at hand:
    /// the paths either selection reaches (its coverage, in the global index and on disk), the
    /// only ones whose announcement can differ. Nil otherwise (every path is compared): a
    /// selection edit at ten million paths cost a walk of all of them.
    static func pathsAnEditedSelectionMoves(
        recordedBasis: Data, basis: String, recordedSelection: Data?, log: IndexLog, local: LocalTree, home: KaitenHome, folder: String
    ) -> Set<String>? {
        let marker = "; selection "
        guard let recordedSelection, let recordedBasis = String(data: recordedBasis, encoding: .utf8),
            let cut = recordedBasis.range(of: marker), let now = basis.range(of: marker),
            recordedBasis[..<cut.lowerBound] == basis[..<now.lowerBound],
            recordedBasis[cut.upperBound...].trimmingCharacters(in: .whitespacesAndNewlines)
                == Hex.encode(SHA256.hash(data: recordedSelection)),
            let recordedText = String(data: recordedSelection, encoding: .utf8),
            let before = try? SelectionFile.parse(recordedText, file: "recorded selection"),
            let (after, _) = try? Planner.readSelection(home.home.selectionPath(folderID: folder))
        else { return nil }
        let sends = sending(home: home, folder: folder, rule: log.conflictRule) != nil
        var paths: Set<String> = []
        for file in [before, after] {
            let coverage = Selection(file, global: log.index, local: sends ? local : nil).coverage
            guard !coverage.everything else { return nil }
            log.index.forEachGlobal(exact: coverage.exact, prefixes: coverage.prefixes) { paths.insert($0.path) }
            for here in local.files where coverage.covers(here.path) { paths.insert(here.path) }
        }
        return paths
    }

    /// The announcements of a folder held in plain text, by its selection file (``Announcement``):
    /// of every path, or of `paths` only.
    private func announceHeld(
        folder: String, log: IndexLog, local: LocalTree, index: LocalIndex, only paths: Set<String>? = nil,
        deferred: Announcement.DeferredNeeds? = nil, warn: (String) -> Void
    ) throws -> Int {
        let (file, _) = try Planner.readSelection(home.home.selectionPath(folderID: folder))
        let sending = Self.sending(home: home, folder: folder, rule: log.conflictRule)
        let selection = Selection(file, global: log.index, local: sending == nil ? nil : local)
        return try announce(
            index: index, log: log, local: local, selection: selection, sending: sending, only: paths, deferred: deferred, warn: warn)
    }

    /// Records in `index` what is to be announced of every path (or of `paths`) that differs.
    private func announce(
        index: LocalIndex, log: IndexLog, local: LocalTree, selection: Selection, sending: Announcement.Sending?, only paths: Set<String>?,
        deferred: Announcement.DeferredNeeds? = nil, warn: (String) -> Void
    ) throws -> Int {
        try index.update(
            each: { body in
                try Announcement.forEachDesired(
                    global: log.index, local: local, selection: selection, sending: sending, announced: index.announced, only: paths,
                    deferringNeeds: deferred, body)
            },
            blocks: { name in
                guard let global = log.index.global(name) else { return [] }
                return try log.blocks(of: global.file)
            }, warn: warn)
    }

    /// Brings the announcements of `paths` only in line with `log`, `local` and `selection`: a
    /// long-running service's round, which knows the paths it touched and holds the rest in
    /// memory. The recorded basis stays as it was, so the next whole refresh compares every
    /// path again. Returns how many entries changed.
    @discardableResult
    public func refresh(
        folder: String, log: IndexLog, local: LocalTree, selection: Selection, only paths: Set<String>, warn: (String) -> Void = { _ in }
    ) throws -> Int {
        guard let index = indexes[folder], !paths.isEmpty else { return 0 }
        if home.config.folder(id: folder)?.type == .receiveencrypted {
            return try index.update(
                each: { body in try StoredFolder.forEachAnnounced(log: log, local: local, only: paths, body) }, blocks: { _ in [] }, warn: warn)
        }
        let sending = Self.sending(home: home, folder: folder, rule: log.conflictRule)
        return try announce(index: index, log: log, local: local, selection: selection, sending: sending, only: paths, warn: warn)
    }

    /// How a folder that sends is announced; nil for `receiveonly`.
    static func sending(home: KaitenHome, folder: String, rule: ConflictRule) -> Announcement.Sending? {
        guard let type = home.config.folder(id: folder)?.type, type == .sendreceive || type == .sendonly else { return nil }
        return Announcement.Sending(me: home.identity.deviceID.shortID, rule: rule)
    }

    /// Records changes made on this machine (apply's sends: each entry complete, with its
    /// blocks and a version this device made) in a folder's local index, durably; the next
    /// ``send(to:folders:theirView:)`` announces them. Returns the recorded entries.
    @discardableResult
    public func recordLocalChanges(folder: String, _ files: [BEPFileInfo]) throws -> [BEPFileInfo] {
        guard let index = indexes[folder], !files.isEmpty else { return [] }
        return try index.update(files) { _ in [] }
    }

    /// Brings the view of a folder's local index up to what other writers (an exchange's own
    /// announcer, a one-shot verb) recorded since.
    public func catchUp(folder: String) throws {
        try indexes[folder]?.log.catchUp()
    }

    /// What this device announces for `path` of `folder` now.
    public func announced(folder: String, path: String) -> FileEntry? {
        indexes[folder]?.announced(path)
    }

    /// What a refresh depends on, in one line: the rules' version and the folder type, the sizes of the global log
    /// and the local index, the scan cache's size and mtime, the selection file's bytes.
    static func basis(home: Home, folder: String, type: String, log: IndexLog, index: LocalIndex) -> String {
        func stamp(_ path: String) -> String {
            var info = stat()
            guard stat(path, &info) == 0 else { return "-" }
            return "\(info.st_size)@\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        }
        let selection = FileManager.default.contents(atPath: home.selectionPath(folderID: folder)) ?? Data()
        let digest = Hex.encode(SHA256.hash(data: selection))
        return "rules 2 \(type); global \(log.fileSize); local \(index.log.fileSize) \(index.indexID); scan \(stamp(home.scanCachePath(folderID: folder))); selection \(digest)\n"
    }

    /// Sends `connection` what it does not hold of each folder's local index, given what its
    /// ClusterConfig said it holds: everything (an Index) when it knows another index ID or
    /// more than there is, else the entries above its sequence (IndexUpdates).
    public func send(to connection: PeerConnection, folders: [String], theirView: [String: RemoteIndexState]) async throws {
        // 1.x computes blocks_hash over the weak hashes too (bep-compat §6): it gets none,
        // and compares block lists.
        let clearBlocksHash = connection.hello.clientName == "syncthing" && !connection.hello.clientVersion.hasPrefix("v2")
        for folder in folders {
            guard let index = indexes[folder] else { continue }
            let view = theirView[folder]
            let full = view == nil || view!.indexID != index.indexID || view!.maxSequence > index.maxSequence
            let after = full ? 0 : view!.maxSequence
            var pending = index.pending(after: after)
            if !full && pending.isEmpty { continue }
            var first = full
            // Batches of at most 1000 entries or about 2 MB, as syncthing sends its own; a full
            // index with no entry is one empty Index message.
            while var batch = try pending.next(maxCount: 1000, maxBytes: 2 << 20) ?? (first ? [] : nil) {
                // Only where there is one: setting a field copies the entry's storage.
                if clearBlocksHash { for i in batch.indices where !batch[i].blocksHash.isEmpty { batch[i].blocksHash = Data() } }
                if first {
                    var message = BEPIndex()
                    message.folder = folder
                    message.files = batch
                    try await connection.send(.index(message))
                    first = false
                } else {
                    var message = BEPIndexUpdate()
                    message.folder = folder
                    message.files = batch
                    try await connection.send(.indexUpdate(message))
                }
                if batch.isEmpty { break }
            }
        }
    }
}
