/// What `kaiten plan` proposes, and what `kaiten apply` (or a saved plan file) carries.
///
/// Its JSON form is the plan file: keys in snake_case, `format_version` under Terraform's rules
/// (a minor bump only adds fields; a consumer refuses an unknown major version).
public struct Plan: Codable, Sendable, Equatable {
    public static let formatVersion = "1.4"

    public var formatVersion: String
    /// Stamped on every plan a home makes (Terraform's lineage), so a plan from another home
    /// is never applied here.
    public var lineage: String
    /// Unique per plan: an applied plan is recorded as spent.
    public var planID: String
    public var createdAt: String
    public var deviceID: String
    /// The `--require-peers` the plan was made with; apply re-checks deletions against it.
    public var requirePeers: Int?
    public var baseline: Baseline
    public var folders: [FolderPlan]
    public var summary: Summary

    public init(lineage: String, planID: String, createdAt: String, deviceID: String, baseline: Baseline, folders: [FolderPlan]) {
        self.formatVersion = Self.formatVersion
        self.lineage = lineage
        self.planID = planID
        self.createdAt = createdAt
        self.deviceID = deviceID
        self.baseline = baseline
        self.folders = folders
        self.summary = Summary(folders)
    }

    enum CodingKeys: String, CodingKey {
        case formatVersion = "format_version", lineage, planID = "plan_id", createdAt = "created_at"
        case deviceID = "device_id", requirePeers = "require_peers", baseline, folders, summary
    }

    /// What must not have moved between planning and applying.
    public struct Baseline: Codable, Sendable, Equatable {
        public var configSHA256: String
        public var folders: [FolderBaseline]

        public init(configSHA256: String, folders: [FolderBaseline]) {
            self.configSHA256 = configSHA256
            self.folders = folders
        }

        enum CodingKeys: String, CodingKey {
            case configSHA256 = "config_sha256", folders
        }
    }

    public struct FolderBaseline: Codable, Sendable, Equatable {
        public var id: String
        public var peers: [PeerBaseline]
        /// SHA-256 of the selection file's bytes; nil when there is none.
        public var selectionSHA256: String?
        /// SHA-256 of `.stignore`'s bytes; nil when there is none.
        public var stignoreSHA256: String?
        /// SHA-256 over the local state (kind, size, mtime, inode, content) of every path the
        /// plan touches, present or absent.
        public var localDigest: String

        public init(id: String, peers: [PeerBaseline], selectionSHA256: String?, stignoreSHA256: String?, localDigest: String) {
            self.id = id
            self.peers = peers
            self.selectionSHA256 = selectionSHA256
            self.stignoreSHA256 = stignoreSHA256
            self.localDigest = localDigest
        }

        enum CodingKeys: String, CodingKey {
            case id, peers, selectionSHA256 = "selection_sha256", stignoreSHA256 = "stignore_sha256", localDigest = "local_digest"
        }
    }

    public struct PeerBaseline: Codable, Sendable, Equatable {
        public var device: String
        public var indexID: String
        public var sequence: Int64

        public init(device: String, indexID: String, sequence: Int64) {
            self.device = device
            self.indexID = indexID
            self.sequence = sequence
        }

        enum CodingKeys: String, CodingKey {
            case device, indexID = "index_id", sequence
        }
    }

    public struct Summary: Codable, Sendable, Equatable {
        public var pull: Int
        public var pullBytes: Int64
        public var delete: Int
        public var deleteBytes: Int64
        public var mkdir: Int
        public var rmdir: Int
        /// Mode-only changes (format 1.1).
        public var chmod: Int
        /// Local changes announced to the peers, and their bytes (format 1.3).
        public var send: Int
        public var sendBytes: Int64
        /// Local deletions announced to the peers (format 1.3).
        public var sendDelete: Int
        public var conflicts: Int
        public var stignoreChanges: Int
        public var hasChanges: Bool
        /// Folders with a selection that nothing is applied to (their `.stignore` is not
        /// Kaiten's to manage): pending, never "in sync". Added in format 1.1.
        public var notApplied: Int

        public init(_ folders: [FolderPlan]) {
            // One pass, no copies: a plan may hold hundreds of thousands of actions.
            (pull, pullBytes, delete, deleteBytes, mkdir, rmdir, chmod, send, sendBytes, sendDelete) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            var any = false
            for folder in folders {
                for action in folder.actions {
                    any = true
                    switch action.action {
                    case .pull:
                        pull += 1
                        pullBytes += action.size
                    case .delete:
                        delete += 1
                        deleteBytes += action.size
                    case .mkdir: mkdir += 1
                    case .rmdir: rmdir += 1
                    case .chmod: chmod += 1
                    case .send:
                        send += 1
                        sendBytes += action.size
                    case .sendDelete: sendDelete += 1
                    default: break
                    }
                }
            }
            conflicts = folders.reduce(0) { $0 + $1.conflicts.count }
            stignoreChanges = folders.filter(\.stignore.changed).count
            hasChanges = any || stignoreChanges > 0
            notApplied = folders.filter { $0.notApplied != nil }.count
        }

        public init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            pull = try c.decode(Int.self, forKey: .pull)
            pullBytes = try c.decode(Int64.self, forKey: .pullBytes)
            delete = try c.decode(Int.self, forKey: .delete)
            deleteBytes = try c.decode(Int64.self, forKey: .deleteBytes)
            mkdir = try c.decode(Int.self, forKey: .mkdir)
            rmdir = try c.decode(Int.self, forKey: .rmdir)
            chmod = try c.decodeIfPresent(Int.self, forKey: .chmod) ?? 0
            send = try c.decodeIfPresent(Int.self, forKey: .send) ?? 0
            sendBytes = try c.decodeIfPresent(Int64.self, forKey: .sendBytes) ?? 0
            sendDelete = try c.decodeIfPresent(Int.self, forKey: .sendDelete) ?? 0
            conflicts = try c.decode(Int.self, forKey: .conflicts)
            stignoreChanges = try c.decode(Int.self, forKey: .stignoreChanges)
            hasChanges = try c.decode(Bool.self, forKey: .hasChanges)
            notApplied = try c.decodeIfPresent(Int.self, forKey: .notApplied) ?? 0
        }

        /// Something for the user to look at: changes, conflicts, or a folder left unapplied.
        public var isPending: Bool { hasChanges || conflicts > 0 || notApplied > 0 }

        enum CodingKeys: String, CodingKey {
            case pull, pullBytes = "pull_bytes", delete, deleteBytes = "delete_bytes", mkdir, rmdir, chmod, conflicts
            case send, sendBytes = "send_bytes", sendDelete = "send_delete"
            case stignoreChanges = "stignore_changes", hasChanges = "has_changes", notApplied = "not_applied"
        }
    }
}

/// The plan for one folder.
public struct FolderPlan: Codable, Sendable, Equatable {
    public var id: String
    public var path: String
    public var stignore: StIgnoreChange
    /// In the order apply runs them: mkdir (parents first), pull, chmod, delete, rmdir (children
    /// first), send (parents first), send-delete (children first).
    public var actions: [Action]
    public var conflicts: [Conflict]
    /// Local files with junk names (`.DS_Store`, `Thumbs.db`, …) or matching a `(?d)` line:
    /// reported, not conflicts.
    public var junk: [String]
    /// Conflicts the user settled with `kaiten resolve --keep`, while their content is unchanged.
    public var kept: [String]
    public var warnings: [String]
    /// Why nothing is applied to this folder although it has a selection (its `.stignore` is
    /// not in the selective grammar); nil when the plan applies. Added in format 1.1.
    public var notApplied: String?
    /// Selected files deleted on the peers whose very content (blocks hash) is now a global
    /// file under another name that is not selected: most likely renamed or moved there.
    /// `--follow-renames` selects the new name. Added in format 1.2; nil when there are none.
    public var renames: [Rename]?

    /// Whether this plan, made for a scope of paths (``FolderInput/scope``), says all the whole
    /// plan would say of them: it only fetches files and makes or mends directories and modes,
    /// each decided from its own path, and reports nothing. Deletions (renames are found across
    /// paths, emptied directories from their contents), conflicts, sends, replacements and a
    /// new `.stignore` are left to a whole plan.
    public var isPathLocal: Bool {
        guard !stignore.changed, conflicts.isEmpty, notApplied == nil, renames?.isEmpty ?? true else { return false }
        return actions.allSatisfy { action in
            switch action.action {
            case .pull: return action.cause == .selected || action.cause == .changedOnPeers
            case .mkdir: return action.cause == .directory
            case .chmod: return action.cause == .permissions
            case .delete, .rmdir, .writeStIgnore, .send, .sendDelete: return false
            }
        }
    }

    public struct Rename: Codable, Sendable, Equatable {
        public var from: String
        public var to: String
        public init(from: String, to: String) {
            self.from = from
            self.to = to
        }
    }

    public init(id: String, path: String, stignore: StIgnoreChange, actions: [Action] = [], conflicts: [Conflict] = [], junk: [String] = [], kept: [String] = [], warnings: [String] = [], notApplied: String? = nil) {
        self.id = id
        self.path = path
        self.stignore = stignore
        self.actions = actions
        self.conflicts = conflicts
        self.junk = junk
        self.kept = kept
        self.warnings = warnings
        self.notApplied = notApplied
    }

    public struct StIgnoreChange: Codable, Sendable, Equatable {
        public var changed: Bool
        public var content: String
        /// False when the existing `.stignore` is outside Sushitrain's grammar.
        public var managed: Bool

        public init(changed: Bool, content: String, managed: Bool) {
            self.changed = changed
            self.content = content
            self.managed = managed
        }
    }
}

/// One change to the local folder.
public struct Action: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        case pull, delete, mkdir, rmdir
        /// Only the permission bits differ from the global version (format 1.1).
        case chmod
        /// The folder's `.stignore` is written (apply's first step; its own kind in events and
        /// `--json`, never dressed as a mkdir). Added in 1.2.
        case writeStIgnore = "write-stignore"
        /// A change made here (new, edited, a new directory) announced to the peers as a new
        /// version by this device; they pull it from here (format 1.3).
        case send
        /// A deletion made here announced to the peers (format 1.3).
        case sendDelete = "send-delete"
    }

    public var action: Kind
    public var path: String
    /// Bytes pulled or freed (0 for directories).
    public var size: Int64
    public var reason: String
    /// What the global index (or the disk, for deletions) has there.
    public var type: EntryType
    /// For pulls: the global version being fetched, as `SHORTID:counter` strings; for deletions
    /// of files the local content's version when Kaiten knows it.
    public var version: [String]
    /// Peers holding the global version in full.
    public var peers: [String]
    /// Why the action is there, as apply reads it (`reason` is for people). Added in format 1.1.
    public var cause: Cause?

    /// The decision behind an action: apply re-checks each kind differently.
    /// `file`, `directory` or `symlink` in the plan's JSON.
    public enum EntryType: String, Codable, Sendable, CustomStringConvertible {
        case file, directory, symlink
        public var description: String { rawValue }
    }

    public enum Cause: String, Codable, Sendable {
        /// Pulled: selected and absent here.
        case selected
        /// Pulled: a newer global version replaces the unchanged local copy.
        case changedOnPeers = "changed-on-peers"
        /// Deleted: deselected, and enough connected peers hold it.
        case deselected
        /// Deleted: the global version is a deletion that replaces the local copy.
        case deletedOnPeers = "deleted-on-peers"
        /// Deleted: deleted on the peers, its content now at a selected global file elsewhere
        /// (renamed or moved there; pulled in the same apply from this copy). Added in 1.2.
        case movedOnPeers = "moved-on-peers"
        /// mkdir: a selected directory, or the parent of selected files.
        case directory
        /// rmdir: left empty by deletions, or deleted on peers.
        case emptied
        /// chmod: the global version's permissions changed (or never matched).
        case permissions
        /// delete or rmdir before the pulls: the peers replaced a file by a directory, or a
        /// directory by a file, and the local one is what Kaiten synced.
        case replaced
        /// send / send-delete: changed here inside a selected path of a folder that sends (1.3).
        case localChange = "local-change"
        /// send: changed here and on the peers at once, and this edit wins syncthing's rule
        /// (the newer modification); the peers keep theirs as a conflict copy (1.3).
        case conflictWon = "conflict-won"
        /// pull: changed here and on the peers at once, and theirs wins; the local copy is
        /// first moved aside as `NAME.sync-conflict-DATE-TIME-ID.EXT` (1.3).
        case conflictLost = "conflict-lost"
        /// send: sent earlier (announced, and on disk as announced) while no peer took it, and
        /// no connected peer holds it yet: nothing new is announced, and apply waits for the
        /// peers to take it, serving its blocks.
        case notYetHeld = "not-yet-held"
    }
    /// For chmod (and mkdir): the permission bits to set, from the global version.
    public var mode: UInt32?

    public init(
        action: Kind, path: String, size: Int64 = 0, reason: String, type: EntryType = .file, version: [String] = [], peers: [String] = [],
        cause: Cause? = nil, mode: UInt32? = nil
    ) {
        self.mode = mode
        self.action = action
        self.path = path
        self.size = size
        self.reason = reason
        self.type = type
        self.version = version
        self.peers = peers
        self.cause = cause
    }
}

/// Something only the user can decide; never resolved silently.
public struct Conflict: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        /// A local file, absent from the global index (a local rename or new file).
        case extraneous
        /// A local file Kaiten never synced, where the global index has a different file.
        case shadowed
        /// A file Kaiten synced was edited locally while the global version changed, it was
        /// deselected, or it was deleted globally.
        case localEdit = "local-edit"
        /// Deselected, but fewer than K peers hold it in full: kept.
        case lastCopy = "last-copy"
        /// Deselected, and peers last seen holding it would be enough, but fewer than K of them
        /// are connected now: kept until they are (apply exits 4, a safety brake).
        case holdersOffline = "holders-offline"
        /// A `NAME.sync-conflict-DATE-TIME-ID.EXT` copy (made by `resolve --use-global`, or by
        /// syncthing): local only by design, listed as what it is.
        case conflictCopy = "conflict-copy"
        /// The local copy is the version Kaiten synced, and it is concurrent with the global
        /// version (neither replaces the other): never overwritten silently.
        case concurrent
    }

    public var kind: Kind
    public var path: String
    public var reason: String
    /// How `kaiten resolve` can settle it: `select`, `delete-local`, `use-global`, `keep`.
    public var choices: [Choice]

    /// A way `kaiten resolve` settles a conflict (`--select`, `--delete-local`, ...); the plan's
    /// JSON keeps the flag's words.
    public enum Choice: String, Codable, Sendable, CaseIterable, CustomStringConvertible {
        case select
        case deleteLocal = "delete-local"
        case useGlobal = "use-global"
        case keep
        public var description: String { rawValue }
    }

    public init(kind: Kind, path: String, reason: String, choices: [Choice]) {
        self.kind = kind
        self.path = path
        self.reason = reason
        self.choices = choices
    }
}
