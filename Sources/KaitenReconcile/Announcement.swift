import Foundation
import KaitenIndex
import KaitenProtocol
import KaitenScan

/// What this device announces for one folder (its local index), decided from the global
/// index, the local scan and the selection. A pure function, like the plan.
///
/// The rules, from syncthing's need computation (lib/db `Need()` at v1.19.2 and
/// `needSizeRemote` in 2.x; see Docs/protocol.md): a peer counts a file as needed by this
/// device unless this device announced exactly the global version. So:
/// - a file held locally with the global content: announced valid, as the global version
///   (its block list and version vector unchanged), and peers may request it;
/// - a file outside the selection: announced **invalid** at the global version — not needed
///   (completion stays at 100 %) and, being invalid, not a source of blocks for syncthing's
///   block availability (1.19.2 lists only valid holders);
/// - a selected file not here yet: not announced, or, when it was announced before, announced
///   invalid with an empty version — needed, until an apply brings it (an apply announces it
///   at its end: ``DeferredNeeds``);
/// - a deletion: announced deleted at the global version when nothing is here (invalid when
///   a local copy stays, which syncthing must not count on);
/// - a directory: valid when it exists here, else invalid at the global version;
/// - in a folder that sends (``Sending``): a path with a local change the plan proposes to send
///   keeps its announcement until apply sends it, and what this device sent keeps its own
///   (newer) version while the disk still has it and the peers have not caught up.
public enum Announcement {
    /// How a folder that sends (`sendreceive`, `sendonly`) is announced.
    public struct Sending: Sendable {
        public var me: UInt64
        public var rule: ConflictRule
        public init(me: UInt64, rule: ConflictRule) {
            self.me = me
            self.rule = rule
        }
    }

    /// The announcement of every global path, without block lists (a valid file carries its
    /// content hash in `blocks_hash`; ``LocalIndex/update(_:blocks:)`` reads the blocks of
    /// those that changed).
    public static func desired(
        global: GlobalIndex, local: LocalTree, selection: Selection, sending: Sending? = nil, announced: (String) -> FileEntry?
    ) -> [BEPFileInfo] {
        var out: [BEPFileInfo] = []
        forEachDesired(global: global, local: local, selection: selection, sending: sending, announced: announced) { out.append($0) }
        out.sort { $0.name.utf8Precedes($1.name) }
        return out
    }

    /// The same, one entry at a time and in no particular order, so that a caller keeping only
    /// what changed never holds the announcement of a whole big folder at once.
    /// - Parameter deferringNeeds: when given, a path wanted and missing whose announcement is
    ///   already invalid keeps it and is counted there instead of being announced as needed.
    public static func forEachDesired(
        global: GlobalIndex, local: LocalTree, selection: Selection, sending: Sending? = nil, announced: (String) -> FileEntry?,
        only scope: Set<String>? = nil, deferringNeeds deferred: DeferredNeeds? = nil, _ body: (BEPFileInfo) throws -> Void
    ) rethrows {
        // With a scope, only those paths: what a service's round touched (each path's
        // announcement depends on that path alone).
        if let scope {
            for path in scope {
                guard let g = global.global(path) else { continue }
                try desired(g, local: local, selection: selection, sending: sending, announced: announced, deferred: deferred, body)
            }
            return
        }
        try global.forEachGlobal { g in
            try desired(g, local: local, selection: selection, sending: sending, announced: announced, deferred: deferred, body)
        }
    }

    /// The paths whose "needed" announcement a refresh put off. A one-shot apply puts them off:
    /// it pulls them at once and announces each one time, at its end, as held or still needed.
    /// Announced first, a whole selection's worth of entries reaches the peer just before the
    /// apply's first block requests, and syncthing takes in an index before it answers what
    /// came after it on the connection (5,000 entries held back 2.1.3's answers for 0.6 s).
    /// Only a change from one invalid announcement to another waits: neither claims the file,
    /// so no peer counts on a copy this device lacks meanwhile. A withdrawal of a valid
    /// announcement never waits.
    public final class DeferredNeeds {
        public private(set) var count = 0
        public init() {}
        func add() { count += 1 }
    }

    /// The announcement of one global path, if it is to be announced.
    private static func desired(
        _ g: GlobalEntry, local: LocalTree, selection: Selection, sending: Sending?, announced: (String) -> FileEntry?,
        deferred: DeferredNeeds?, _ body: (BEPFileInfo) throws -> Void
    ) rethrows {
        let file = g.file
        let here = local[g.path]
        // Looked up once: a lookup in this device's index is a search of its snapshot, and a
        // refresh makes one for every global path.
        let announcedBefore = announced(g.path)
        if let before = announcedBefore, !before.isInvalid, !before.isDeleted, Self.diskHas(before, here) {
            // This device's valid copy of the global version, still on disk: it stays announced,
            // even when the only other entry of that version in the global index is a peer's
            // "not held" one (this device's own announcements are not in the global index, so
            // that entry alone would make the file look missing here and withdraw it).
            if before.version.compare(file.version) == .equal { return }
            // Deleted on the peers but kept here (a deletion held back, or not applied yet):
            // what is on disk stays announced, so the peers see that this device still needs
            // the deletion rather than holding it.
            if file.isDeleted { return }
        }
        if let sending, let before = announcedBefore {
            // Sent by this device and not yet replaced by the peers: stays as sent while the
            // disk has it.
            if before.version.counters.contains(where: { $0.id == sending.me }), before.version.compare(file.version) != .equal,
                before.version.compare(file.version) != .lesser, Self.diskHas(before, here)
            {
                return
            }
            // A change the plan proposes to send: announced once apply sends it.
            if selection.isSelected(g.path),
                LocalChange.of(global: file, local: here, announced: before, me: sending.me, rule: sending.rule) != nil
            {
                return
            }
        }
        if file.isDeleted {
            try body(entry(file, invalid: here != nil && here?.kind != .directory, deleted: true))
            return
        }
        let holds: Bool
        switch file.type {
        case .directory:
            holds = here?.kind == .directory
        case .file:
            holds = here?.kind == .file && here.map { Reconciler.contentHash(of: $0) } == Reconciler.contentHash(of: file)
        default:
            holds = here?.kind == .symlink && here?.symlinkTarget == file.symlinkTarget
        }
        if holds {
            try body(entry(file, invalid: false, deleted: false))
        } else if file.type != .directory && selection.state(of: g.path) != .no {
            // Wanted and missing: needed. Withdraw an earlier announcement, if any.
            if let before = announcedBefore, !(before.isInvalid && before.version.counters.isEmpty) {
                if let deferred, before.isInvalid {
                    deferred.add()
                    return
                }
                var withdrawn = entry(file, invalid: true, deleted: false)
                withdrawn.version = BEPVector()
                try body(withdrawn)
            }
        } else {
            try body(entry(file, invalid: true, deleted: false))
        }
    }

    /// Whether the disk holds what `entry` announces: a deletion nothing here, a directory a
    /// directory, a file its content, a symlink its target.
    static func diskHas(_ entry: FileEntry, _ here: LocalFile?) -> Bool {
        if entry.isDeleted { return here == nil }
        guard let here else { return false }
        switch entry.type {
        case .directory: return here.kind == .directory
        case .file: return here.kind == .file && here.contentHash == entry.contentHash
        default: return here.kind == .symlink && here.symlinkTarget == entry.symlinkTarget
        }
    }

    /// The global entry as this device announces it: the version vector, times, permissions
    /// and content unchanged; an invalid or deleted entry with no size and no blocks.
    static func entry(_ file: FileEntry, invalid: Bool, deleted: Bool) -> BEPFileInfo {
        var info = BEPFileInfo()
        info.name = file.name
        info.type = file.type
        info.permissions = file.permissions
        info.noPermissions = file.noPermissions
        info.modifiedS = file.modifiedS
        info.modifiedNs = file.modifiedNs
        info.modifiedBy = file.modifiedBy
        info.version = file.version
        info.deleted = deleted
        info.invalid = invalid
        info.symlinkTarget = file.isSymlink ? file.symlinkTarget : ""
        if file.type == .file && !deleted && !invalid {
            info.size = file.size
            info.blockSize = file.blockSize
            info.blocksHash = Data(file.contentHash.bytes)
        }
        return info
    }
}
