import KaitenIndex
import KaitenProtocol
import KaitenScan

/// What a folder that sends (`sendreceive`, `sendonly`) does with a change made on this
/// machine inside a selected path. One rule, read by the plan (which proposes the send) and by
/// the announcement (which leaves the path's announcement alone until apply sends it).
///
/// Syncthing's rules (lib/scanner and lib/model at v1.19.2): a new, edited or deleted file is
/// announced with the version it replaces, updated by this device (`Vector.Update`); a change
/// the peers' version does not replace, and that does not replace theirs, is a conflict whose
/// winner is the newer modification (``FileEntry/winsConflict(over:rule:)``), the loser kept as
/// `NAME.sync-conflict-DATE-TIME-MODIFIEDBY.EXT` on the device that held it.
public enum LocalChange: Sendable, Equatable {
    /// Announce the local file, directory or symlink as a new version of `base`.
    case send(base: BEPVector)
    /// Announce the path as deleted, a new version of `base` (what this device announced).
    case sendDelete(base: BEPVector)
    /// Edited here while the peers changed it too, and this edit wins: sent as a new version of
    /// `base` (the peers move theirs aside as a conflict copy).
    case sendWinningConflict(base: BEPVector)
    /// Edited here while the peers changed it too, and theirs wins: the local copy is moved
    /// aside as a conflict copy and the global version pulled.
    case losesConflict

    /// The local change at one selected path of a folder that sends, or nil when there is none
    /// (in sync, unchanged since Kaiten synced it, or a case the plan treats as before).
    /// - Parameters:
    ///   - global: the global entry (nil when no peer announces the path).
    ///   - local: what the scan found (nil when absent).
    ///   - announced: this device's own announcement of the path (its local index).
    ///   - me: this device's short ID; `rule`: the peers' conflict rule.
    public static func of(
        global: FileEntry?, local: LocalFile?, announced: FileEntry?, me: UInt64, rule: ConflictRule
    ) -> LocalChange? {
        let liveGlobal = global.flatMap { $0.isDeleted ? nil : $0 }
        guard let local else {
            // Gone from disk: a deletion to send when this device announced it as held, and
            // no peer changed it since (a modification beats a deletion: it is pulled instead).
            guard let announced, !announced.isInvalid, !announced.isDeleted else { return nil }
            // The peers deleted it (its global version is the deletion, which apply carried
            // out here): nothing this device has to say about it.
            if let global, global.isDeleted { return nil }
            if let liveGlobal {
                let order = liveGlobal.version.compare(announced.version)
                guard order == .equal || order == .lesser else { return nil }
            } else if global == nil && announced.version.counters.isEmpty {
                return nil
            }
            return .sendDelete(base: announced.version)
        }
        if local.kind == .directory {
            // A new directory: the global one is deleted or absent. Directories carry no content
            // to conflict over.
            guard liveGlobal == nil else { return nil }
            if let announced, !announced.isInvalid, !announced.isDeleted, announced.type == .directory,
                global.map({ announced.version.compare($0.version) != .lesser }) ?? true
            {
                return nil  // already sent
            }
            return .send(base: global?.version ?? BEPVector())
        }
        let localHash = Reconciler.contentHash(of: local)
        let synced = local.synced
        let unchanged = synced.map { $0.contentHash == localHash } ?? false
        guard let liveGlobal else {
            // Absent or deleted on the peers: a new file, one recreated after a deletion, or one
            // edited while the peers deleted it (the modification wins). Sent unless what is here
            // is what this device already announced.
            if unchanged, let synced, let announced, !announced.isInvalid, !announced.isDeleted,
                announced.version == synced.version
            {
                return nil
            }
            if unchanged, let global, let synced, global.version.compare(synced.version) == .greater {
                return nil  // deleted on the peers after Kaiten synced it: the plan deletes it
            }
            var base = synced?.version ?? BEPVector()
            if let global { base = base.merged(with: global.version) }
            return .send(base: base)
        }
        let sameKind = (local.kind == .symlink) == liveGlobal.isSymlink && liveGlobal.type != .directory
        if sameKind && localHash == Reconciler.contentHash(of: liveGlobal) { return nil }
        guard let synced, !unchanged else { return nil }  // never synced (shadowed), or unchanged: as before
        switch liveGlobal.version.compare(synced.version) {
        case .equal, .lesser:
            return .send(base: synced.version)
        case .greater, .concurrentGreater, .concurrentLesser:
            guard sameKind else { return nil }
            var mine = liveGlobal
            mine.version = synced.version.updated(by: me, now: 0)
            mine.modifiedS = local.modifiedNs / 1_000_000_000
            mine.modifiedNs = Int32(local.modifiedNs % 1_000_000_000)
            mine.isDeleted = false
            mine.isInvalid = false
            // Concurrent now: the version sent would be; syncthing's winner decides.
            return mine.winsConflict(over: liveGlobal, rule: rule) ? .sendWinningConflict(base: synced.version) : .losesConflict
        }
    }

    /// The name syncthing gives the losing copy (`conflictName` in lib/model at v1.19.2):
    /// `NAME.sync-conflict-YYYYMMDD-HHMMSS-ID.EXT`, the local time of the move, ID the short ID
    /// of the device that made the winning version, EXT from the last dot of the base name on
    /// (all of `.bashrc`, as Go's `filepath.Ext` has it).
    public static func conflictCopyName(_ path: String, year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, winner: UInt64) -> String {
        let slash = path.lastIndex(of: "/")
        let dir = slash.map { String(path[...$0]) } ?? ""
        let base = slash.map { String(path[path.index(after: $0)...]) } ?? path
        var name = base
        var ext = ""
        if let dot = base.lastIndex(of: ".") {
            name = String(base[..<dot])
            ext = String(base[dot...])
        }
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let stamp = "\(year)\(two(month))\(two(day))-\(two(hour))\(two(minute))\(two(second))"
        return "\(dir)\(name).sync-conflict-\(stamp)-\(DeviceID.shortIDString(winner))\(ext)"
    }
}
