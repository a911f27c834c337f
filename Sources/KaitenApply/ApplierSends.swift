import Foundation
import KaitenTransfer
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSync
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Sending what changed here: recording it in the local index and the synced record, and
/// waiting for the peers to hold it.
extension Applier {
    /// Records the folder's sends in this device's local index (announced on the open
    /// connections right after) and, for files, in the synced record: each re-checked against
    /// the disk and the plan first.
    static func recordSends(
        _ actions: [Action], folder: String, state: Planner.FolderState, config: FolderConfiguration, home: KaitenHome,
        tree: inout LocalTree, journal: SyncedJournal?, report: inout ApplyReport, events: (ApplyEvent) -> Void
    ) -> [SentChange] {
        let me = home.identity.deviceID.shortID
        let now = UInt64(max(0, time(nil)))
        let log = state.log
        var files: [BEPFileInfo] = []
        var pending: [(Action, BEPFileInfo)] = []
        // Sent before, not yet taken by the peers: announced already, so only waited on.
        var announcedBefore: [SentChange] = []
        for action in actions {
            do {
                try SafePath.validate(action.path)
                if action.cause == .notYetHeld {
                    try checkUnchanged(root: config.path, name: action.path, planned: state.input.local[action.path])
                    guard let mine = state.input.announced[action.path], mine.version.descriptions == action.version else {
                        throw ApplyError(.changedGlobally, path: action.path, "its announcement moved since the plan; the next plan says what to do")
                    }
                    report.done += 1
                    events(.done(folder: folder, action: action, note: "announced before as version \(action.version.joined(separator: ",")); the peers take it now"))
                    announcedBefore.append(SentChange(folder: folder, path: action.path, version: mine.version, deleted: false))
                    continue
                }
                let planned = state.input.local[action.path]
                if let planned, planned.kind == .directory {
                    // A directory's size and mtime move with what is inside: still a directory is enough.
                    var info = stat()
                    guard lstat(config.path + "/" + action.path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                        throw ApplyError(.changedLocally, path: action.path, "no longer a directory since the plan; left untouched")
                    }
                } else {
                    try checkUnchanged(root: config.path, name: action.path, planned: planned)
                    // checkUnchanged lets a vanished file pass (a pull writes it anyway); a send
                    // of it would announce blocks nobody has.
                    var info = stat()
                    if action.action == .send, planned != nil, lstat(config.path + "/" + action.path, &info) != 0 {
                        throw ApplyError(.changedLocally, path: action.path, "gone since the plan; the next plan sends its deletion")
                    }
                }
                let change = LocalChange.of(
                    global: log.index.global(action.path)?.file, local: planned, announced: state.input.announced[action.path], me: me,
                    rule: log.conflictRule)
                let base: BEPVector
                switch change {
                case .send(let b)? where action.action == .send: base = b
                case .sendWinningConflict(let b)? where action.action == .send: base = b
                case .sendDelete(let b)? where action.action == .sendDelete: base = b
                default: throw ApplyError(.changedGlobally, path: action.path, "no longer a change to send (the peers' index moved); the next plan says what to do")
                }
                guard base.descriptions == action.version else {
                    throw ApplyError(.changedGlobally, path: action.path, "the version it replaces moved since the plan; the next plan says what to do")
                }
                let info = sentEntry(
                    action: action, local: planned, announced: state.input.announced[action.path], version: base.updated(by: me, now: now),
                    me: me, now: now, ignorePermissions: config.ignorePerms)
                pending.append((action, info))
                files.append(info)
            } catch let error as ApplyError {
                report.failed.append(.init(folder, action.path, error.hint))
                events(.failed(folder: folder, action: action, reason: error.hint))
            } catch {
                report.failed.append(.init(folder, action.path, "\(error)"))
                events(.failed(folder: folder, action: action, reason: "\(error)"))
            }
        }
        guard !files.isEmpty else { return announcedBefore }
        do {
            // The local index first, then the synced record. The other order, interrupted in
            // between, would leave a copy recorded as the new version that nobody was told of,
            // and no later plan would send it; this one leaves an announced version the synced
            // record does not know yet, which the next plan takes as the record
            // (Reconciler.restoreSyncedRecords): one version per local change.
            let announcer = try LocalAnnouncer(home: home, folders: [folder])
            defer { announcer.close() }
            try announcer.recordLocalChanges(folder: folder, files)
            for info in files where !info.deleted && info.type != .directory {
                let hash = info.type == .symlink ? Reconciler.symlinkHash(info.symlinkTarget) : info.contentHash
                try journal?.record(info.name, SyncedVersion(version: info.version, contentHash: hash))
                tree[info.name]?.synced = SyncedVersion(version: info.version, contentHash: hash)
            }
            journal?.sync()
        } catch {
            for (action, _) in pending {
                report.failed.append(.init(folder, action.path, "cannot record it in the local index: \(error)"))
                events(.failed(folder: folder, action: action, reason: "cannot record it in the local index: \(error)"))
            }
            return announcedBefore
        }
        var sent = announcedBefore
        for (action, info) in pending {
            report.done += 1
            events(.done(folder: folder, action: action, note: "announced as version \(info.version.descriptions.joined(separator: ","))"))
            sent.append(SentChange(folder: folder, path: info.name, version: info.version, deleted: info.deleted))
        }
        return sent
    }

    /// The index entry that announces a local change, as syncthing's scanner makes it: the
    /// file's blocks, size, mode and modification time; this device as the modifier.
    static func sentEntry(
        action: Action, local: LocalFile?, announced: FileEntry?, version: BEPVector, me: UInt64, now: UInt64, ignorePermissions: Bool
    ) -> BEPFileInfo {
        var info = BEPFileInfo()
        info.name = action.path
        info.version = version
        info.modifiedBy = me
        guard action.action == .send, let local else {
            info.deleted = true
            info.type = announced?.type ?? .file
            info.modifiedS = Int64(now)
            info.noPermissions = announced?.noPermissions ?? false
            info.permissions = announced?.permissions ?? 0
            return info
        }
        info.modifiedS = local.modifiedNs / 1_000_000_000
        info.modifiedNs = Int32(local.modifiedNs % 1_000_000_000)
        switch local.kind {
        case .directory:
            info.type = .directory
            info.permissions = ignorePermissions ? 0o777 : local.permissions & 0o777
            info.noPermissions = ignorePermissions
        case .symlink:
            info.type = .symlink
            info.symlinkTarget = local.symlinkTarget
            info.permissions = 0o777
            info.noPermissions = true
        case .file:
            info.type = .file
            info.permissions = ignorePermissions ? 0o666 : local.permissions & 0o777
            info.noPermissions = ignorePermissions
            info.size = local.size
            info.blockSize = local.blockSize
            var offset: Int64 = 0
            info.blocks = local.blocks.map { block in
                var b = BEPBlockInfo()
                b.offset = offset
                b.size = block.size
                b.hash = Data(block.hash.bytes)
                b.weakHash = block.weakHash
                offset += Int64(block.size)
                return b
            }
            info.blocksHash = Data(local.contentHash.bytes)
        }
        return info
    }

    /// Waits until `requirePeers` connected peers announce each sent change at its version (or
    /// a newer one), the connections are gone, or `timeout` passes. Returns what is not held.
    static func awaitPeers(
        holding sent: [SentChange], watcher: UpdateWatcher, session: PeerSession, requirePeers: Int, timeout: Double,
        stop: StopSignal?, events: (ApplyEvent) -> Void
    ) async -> [ApplyReport.Item] {
        let deadline = Date().addingTimeInterval(timeout)
        var held: [Int: [DeviceID]] = [:]
        var lastCount = -1
        while true {
            for (i, change) in sent.enumerated() where held[i] == nil {
                let holders = watcher.announcements(folder: change.folder, name: change.path).filter { _, file in
                    guard !file.invalid, file.deleted == change.deleted else { return false }
                    let order = file.version.compare(change.version)
                    return order == .equal || order == .greater
                }.map(\.key)
                if holders.count >= requirePeers {
                    held[i] = holders
                    events(.sendHeld(folder: change.folder, path: change.path, peers: holders.map(\.description).sorted()))
                }
            }
            if held.count != lastCount {
                lastCount = held.count
                events(.awaitingPeers(held: held.count, total: sent.count))
            }
            let open = session.openConnections.count
            if held.count == sent.count || Date() >= deadline || open < requirePeers || stop?.isSet == true { break }
            try? await Task.sleep(for: .milliseconds(100))
        }
        var missing: [ApplyReport.Item] = []
        let why = session.openConnections.count < requirePeers
            ? "fewer than \(requirePeers) peer\(requirePeers == 1 ? " is" : "s are") connected"
            : "not held by \(requirePeers) peer\(requirePeers == 1 ? "" : "s") within --send-timeout \(Int(timeout))s"
        for (i, change) in sent.enumerated() where held[i] == nil {
            missing.append(.init(change.folder, change.path))
            events(.sendNotHeld(folder: change.folder, path: change.path, reason: why + "; it stays announced, and the peers take it when they next connect"))
        }
        return missing
    }
}
