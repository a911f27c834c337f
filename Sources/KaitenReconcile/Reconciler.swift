import Crypto
import Foundation
import KaitenIndex
import KaitenProtocol
import KaitenScan
import KaitenSelection

/// Everything a folder's plan depends on. Built by the caller from disk and peers; the
/// reconciler itself does no I/O.
public struct FolderInput: Sendable {
    public var id: String
    public var path: String
    public var selection: SelectionFile
    /// The selection file's bytes (nil when it does not exist), for the baseline.
    public var selectionBytes: [UInt8]?
    /// The `.stignore` on disk; nil when there is none.
    public var stignore: String?
    public var global: GlobalIndex
    /// Per peer: the index ID and highest sequence the log holds.
    public var checkpoints: [(device: DeviceID, indexID: UInt64, sequence: Int64)]
    public var local: LocalTree
    /// Deselected files are deleted only when at least this many peers hold the global version.
    public var requirePeers: Int
    /// Paths kept as they are by the user's choice, with the content they had then.
    public var kept: [String: ContentHash] = [:]
    /// The peers reachable now, whose index was just refreshed: only they count as holders of
    /// a file about to be deleted. Nil for an offline plan (every peer's last known index
    /// counts; apply re-checks against the peers it reaches before it deletes anything).
    public var connectedPeers: Set<DeviceID>?
    /// The folder's `ignorePerms`: permission bits are then neither compared nor set.
    public var ignorePermissions = false
    /// `sendreceive` and `sendonly`: changes made here inside selected paths are sent
    /// (``LocalChange``). False for `receiveonly`: they are conflicts.
    public var sends = false
    /// Plan what this device announced that no connected peer holds yet (sent while they were
    /// away) as sends apply waits on (``Action/Cause/notYetHeld``): for one-shot verbs, whose
    /// connections end with them. A service stays connected and serves, and leaves it out.
    public var pendingSends = false
    /// The peers' indexes were just asked for and some could not be had (said above the plan).
    public var indexRefreshFailed = false
    /// False for `sendonly`: nothing the peers change is pulled or deleted here.
    public var receives = true
    /// This device's short ID (the counter a send bumps).
    public var me: UInt64 = 0
    /// This device's own announcements (its local index), by path: what it told the peers it
    /// holds. Read only where ``sends`` is set (a local deletion is a path announced as held
    /// and gone from disk).
    public var announced: [String: FileEntry] = [:]
    /// A folder this device holds as the untrusted device (`receiveencrypted`): it takes every
    /// path of the global index (a selection means nothing on ciphertext) and writes no
    /// `.stignore` (syncthing reads none there); the local files are what their trailers say.
    public var storesCiphertext = false
    /// The paths to plan, when not every path: a long-running service's round after a peer's
    /// update or a change on disk that named them. Each rule of the plan looks at one path at
    /// a time, so the plan of a scope is what the whole plan says of those paths — except what
    /// reaches across paths (the `.stignore` rendering, renames, directories emptied by
    /// deletions), which a caller must not take from a scoped plan (``FolderPlan/isPathLocal``).
    public var scope: Set<String>?

    public init(
        id: String, path: String, selection: SelectionFile, selectionBytes: [UInt8]?, stignore: String?, global: GlobalIndex,
        checkpoints: [(device: DeviceID, indexID: UInt64, sequence: Int64)], local: LocalTree, requirePeers: Int = 1
    ) {
        self.id = id
        self.path = path
        self.selection = selection
        self.selectionBytes = selectionBytes
        self.stignore = stignore
        self.global = global
        self.checkpoints = checkpoints
        self.local = local
        self.requirePeers = requirePeers
    }
}

/// Selection x global index x local disk → plan. A pure function.
public enum Reconciler {
    /// Names that are noise from other systems: listed apart, never conflicts (Sushitrain's list).
    public static let junkNames: Set<String> = [
        ".DS_Store", "Thumbs.db", "desktop.ini", ".Trashes", ".Spotlight-V100", ".DocumentRevisions-V100",
        ".TemporaryItems", "$RECYCLE.BIN", "@eaDir",
    ]

    /// The whole plan.
    public static func plan(
        _ folders: [FolderInput], lineage: String, planID: String, createdAt: String, deviceID: String, configBytes: [UInt8]
    ) -> Plan {
        var plans: [FolderPlan] = []
        var baselines: [Plan.FolderBaseline] = []
        for folder in folders {
            let (plan, baseline) = planFolder(folder)
            plans.append(plan)
            baselines.append(baseline)
        }
        return Plan(
            lineage: lineage, planID: planID, createdAt: createdAt, deviceID: deviceID,
            baseline: Plan.Baseline(configSHA256: sha256Hex(configBytes), folders: baselines), folders: plans)
    }

    /// One folder's plan and baseline.
    public static func planFolder(_ given: FolderInput) -> (FolderPlan, Plan.FolderBaseline) {
        var input = given
        if input.sends { restoreSyncedRecords(&input) }
        var warnings: [String] = []
        let selection =
            input.storesCiphertext
            ? Selection(everythingIn: input.global)
            : Selection(input.selection, global: input.global, local: input.sends ? input.local : nil, warnings: &warnings)
        let content =
            input.storesCiphertext
            ? input.stignore ?? "" : StIgnore.render(globalIgnores: input.selection.globalIgnores, selected: Array(selection.roots))

        var managed = true
        var notApplied: String?
        if !input.storesCiphertext, let existing = input.stignore, case .unmanaged(let lines) = StIgnore.parse(existing) {
            managed = false
            let quoted = lines.prefix(3).map { "\"\($0)\"" }.joined(separator: ", ")
            let reason = ".stignore is not in Sushitrain's selective grammar (\(quoted)); nothing is planned for this folder "
                + "until `kaiten adopt \(input.id)` imports it (or you remove it)"
            warnings.append(reason)
            if !input.selection.paths.isEmpty || !input.selection.patterns.isEmpty { notApplied = reason }
        }
        if input.checkpoints.isEmpty {
            // After a refresh that failed, suggesting that refresh again helps nobody.
            warnings.append(
                input.indexRefreshFailed
                    ? "no peer's index is known yet: nothing can be pulled or deleted until the problem above is fixed"
                    : "no peer's index is known yet (run `kaiten index sync \(input.id)`): nothing can be pulled or deleted")
        }

        var builder = Builder(input: input, selection: selection)
        builder.classify()
        var plan = FolderPlan(
            id: input.id, path: input.path,
            stignore: .init(changed: managed && !input.storesCiphertext && input.stignore != content, content: managed ? content : input.stignore ?? "", managed: managed),
            actions: managed ? builder.orderedActions() : [],
            conflicts: Builder.sortedByPath(builder.conflicts, \.path),
            junk: builder.junk.sorted(), kept: builder.kept.sorted(), warnings: warnings + builder.warnings.sorted(),
            notApplied: notApplied)
        if !managed { plan.stignore.changed = false }
        let renames = Self.renames(plan, input: input, selection: selection)
        if !renames.isEmpty {
            plan.renames = renames
            for rename in renames {
                plan.warnings.append(
                    "\(PathRules.quoted(rename.from)) is deleted on the peers, and its content is now at \(PathRules.quoted(rename.to)) "
                        + "(renamed or moved?), which is not selected: `kaiten select \(input.id) \(PathRules.quoted(PathRules.escapeGlobCharacters(rename.to)))` "
                        + "follows it, or plan/apply with --follow-renames")
            }
        }
        let baseline = Plan.FolderBaseline(
            id: input.id,
            peers: input.checkpoints.sorted { $0.device < $1.device }.map {
                Plan.PeerBaseline(device: $0.device.description, indexID: String($0.indexID, radix: 16), sequence: $0.sequence)
            },
            selectionSHA256: input.selectionBytes.map(sha256Hex), stignoreSHA256: input.stignore.map { sha256Hex(Array($0.utf8)) },
            localDigest: localDigest(plan, input.local))
        return (plan, baseline)
    }

    /// Records, for every local file whose content equals its path's global version, that Kaiten
    /// holds that version: the synced record a later plan uses to tell a local edit from a
    /// remote change. Returns how many records changed.
    /// - Parameter paths: only these (a service's round that scanned only them again).
    @discardableResult
    public static func confirmSynced(_ local: inout LocalTree, global: GlobalIndex, only paths: Set<String>? = nil) -> Int {
        var updates: [(String, SyncedVersion)] = []
        func look(_ path: String, _ file: LocalFile) {
            guard file.kind != .directory, let g = global.global(path), !g.file.isDeleted, !g.file.isInvalid,
                let hash = contentHash(of: file), hash == contentHash(of: g.file)
            else { return }
            let synced = SyncedVersion(version: g.file.version, contentHash: hash)
            // Never step a record back to an older version with the same content.
            if let current = file.synced, current.contentHash == hash, current.version.compare(g.file.version) != .lesser { return }
            if file.synced != synced { updates.append((path, synced)) }
        }
        if let paths {
            for path in paths { if let file = local[path] { look(path, file) } }
        } else {
            // Straight over the tree: no copy of its hundred thousand entries first.
            for file in local.files { look(file.path, file) }
        }
        for (path, synced) in updates { local[path]?.synced = synced }
        return updates.count
    }

    /// Content identity on both sides: a file's blocks hash, a symlink's target.
    /// Deletions of local files because the peers deleted them, whose content the global
    /// index now has under exactly one other, unselected name.
    static func renames(_ plan: FolderPlan, input: FolderInput, selection: Selection) -> [FolderPlan.Rename] {
        var gone: [ContentHash: [String]] = [:]
        for action in plan.actions where action.action == .delete && action.cause == .deletedOnPeers {
            guard let local = input.local[action.path], local.kind == .file, let hash = contentHash(of: local) else { continue }
            gone[hash, default: []].append(action.path)
        }
        guard !gone.isEmpty else { return [] }
        var arrivals: [ContentHash: [String]] = [:]
        input.global.forEachGlobal { entry in
            guard !entry.file.isDeleted, entry.file.type == .file, let hash = contentHash(of: entry.file), gone[hash] != nil,
                selection.state(of: entry.path) == .no
            else { return }
            arrivals[hash, default: []].append(entry.path)
        }
        var renames: [FolderPlan.Rename] = []
        for (hash, olds) in gone where olds.count == 1 {
            guard let news = arrivals[hash], news.count == 1 else { continue }
            renames.append(.init(from: olds[0], to: news[0]))
        }
        return renames.sorted { $0.from.utf8Precedes($1.from) }
    }

    /// A file whose synced record is lost or behind (a crash between writing this device's
    /// local index and the record), while the disk holds exactly what this device announced:
    /// the announcement is the record. Without it the plan would send the file again under a
    /// new version (a false conflict on a peer that edits it meanwhile), or call a file that
    /// was sent "edited locally since Kaiten synced it".
    static func restoreSyncedRecords(_ input: inout FolderInput) {
        for (path, entry) in input.announced where !entry.isInvalid && !entry.isDeleted && entry.type != .directory {
            guard let local = input.local[path], local.kind != .directory, Announcement.diskHas(entry, local),
                let hash = contentHash(of: local)
            else { continue }
            if let synced = local.synced, synced.contentHash == hash, synced.version == entry.version { continue }
            var restored = local
            restored.synced = SyncedVersion(version: entry.version, contentHash: hash)
            input.local[path] = restored
        }
    }

    public static func contentHash(of file: LocalFile) -> ContentHash? {
        switch file.kind {
        case .file: return file.contentHash
        case .symlink: return symlinkHash(file.symlinkTarget)
        case .directory: return nil
        }
    }

    public static func contentHash(of entry: FileEntry) -> ContentHash? {
        if entry.isSymlink { return symlinkHash(entry.symlinkTarget) }
        return entry.type == .file ? entry.contentHash : nil
    }

    public static func symlinkHash(_ target: String) -> ContentHash {
        ContentHash(SHA256.hash(data: Array(("symlink\0" + target).utf8)))
    }

    /// A digest of the local state of every path the plan acts on or reports.
    public static func localDigest(_ plan: FolderPlan, _ local: LocalTree) -> String {
        var paths = Set<String>(minimumCapacity: plan.actions.count + plan.conflicts.count)
        for action in plan.actions { paths.insert(action.path) }
        for conflict in plan.conflicts { paths.insert(conflict.path) }
        var hasher = SHA256()
        // The same bytes as one update per path, in 32 KiB updates.
        var pending: [UInt8] = []
        pending.reserveCapacity(1 << 16)
        for path in paths.sorted(by: { $0.utf8Precedes($1) }) {
            pending += path.utf8
            pending.append(0)
            if let file = local[path] {
                // "KIND SIZE MTIME INODE HASH TARGET\n", written byte by byte (no string per path).
                pending.appendDecimal(Int64(file.kind.rawValue))
                pending.append(0x20)
                pending.appendDecimal(file.size)
                pending.append(0x20)
                pending.appendDecimal(file.modifiedNs)
                pending.append(0x20)
                pending.appendDecimal(file.inode)
                pending.append(0x20)
                pending.appendHex(file.contentHash)
                pending.append(0x20)
                pending += file.symlinkTarget.utf8
                pending.append(0x0A)
            } else {
                pending += "absent\n".utf8
            }
            if pending.count >= 1 << 15 {
                hasher.update(data: pending)
                pending.removeAll(keepingCapacity: true)
            }
        }
        hasher.update(data: pending)
        return ContentHash(hasher.finalize()).hex
    }

    public static func sha256Hex(_ bytes: [UInt8]) -> String {
        ContentHash(SHA256.hash(data: bytes)).hex
    }
}

/// The selection of one folder, resolved against the global index.
public struct Selection: Sendable {
    /// Selected paths: literal lines and the paths glob lines matched.
    public private(set) var roots: Set<String>
    let ignores: [Glob]
    /// The roots as a table over their bytes, when all are ASCII: ``isSelected(_:)``'s fast path.
    private var asciiRoots: ASCIIRootTable?

    /// Resolves a selection file's lines against the global index and, in a folder that sends,
    /// against the files on disk (`local`): a pattern selects a new local file there as
    /// syncthing would send it under the same `.stignore`.
    public init(_ file: SelectionFile, global: GlobalIndex, local: LocalTree? = nil) {
        var ignored: [String] = []
        self.init(file, global: global, local: local, warnings: &ignored)
    }

    /// How a path is selected: its own line (or a glob match), through a parent, or not at all.
    public enum State: String, Sendable {
        case explicit, parent, no
    }

    public func state(of path: String) -> State {
        guard isSelected(path) else { return .no }
        return roots.contains(path) ? .explicit : .parent
    }

    /// Every path of the global index: what a folder held as ciphertext takes.
    public init(everythingIn global: GlobalIndex) {
        var roots: Set<String> = []
        global.forEachGlobal { entry in
            let path = entry.path
            roots.insert(path.utf8.firstIndex(of: UInt8(ascii: "/")).map { String(path[..<$0]) } ?? path)
        }
        self.roots = roots
        ignores = []
        asciiRoots = ASCIIRootTable(roots)
    }

    init(_ file: SelectionFile, global: GlobalIndex, local: LocalTree? = nil, warnings: inout [String]) {
        roots = Set(file.paths)
        ignores = file.globalIgnores.compactMap { try? Glob($0) }
        let place = local == nil ? "the global index" : "the global index or on disk"
        for path in file.paths {
            if let g = global.global(path), !g.file.isDeleted { continue }
            if local?.contains(path) == true { continue }
            warnings.append("selection line \"\(path)\" matches nothing in \(place)")
        }
        let patterns = file.patterns
        if !patterns.isEmpty {
            var matched = [Bool](repeating: false, count: patterns.count)
            var found: [String] = []
            func match(_ path: String) {
                for (i, pattern) in patterns.enumerated() where pattern.matches(path) {
                    matched[i] = true
                    if let problem = PathRules.unrepresentableReason(path) {
                        warnings.append("selection pattern \"\(pattern.pattern)\" matches \(PathRules.quoted(path)), which is left out: \(problem)")
                    } else {
                        found.append(path)
                    }
                    break
                }
            }
            global.forEachGlobal { entry in
                guard !entry.file.isDeleted else { return }
                match(entry.path)
            }
            if let local {
                for file in local.files {
                    // Paths the global index has were matched above.
                    if let g = global.global(file.path), !g.file.isDeleted { continue }
                    match(file.path)
                }
            }
            roots.formUnion(found)
            for (pattern, hit) in zip(patterns, matched) where !hit {
                warnings.append("selection pattern \"\(pattern.pattern)\" matches nothing in \(place)")
            }
        }
        asciiRoots = ASCIIRootTable(roots)
    }

    /// Whether a `(?d)` line names this path or one of its parents (syncthing matches an
    /// unrooted pattern against every path component).
    public func isGloballyIgnored(_ path: String) -> Bool {
        guard !ignores.isEmpty else { return false }
        for component in WireName.components(path) {
            let name = String(component)
            if ignores.contains(where: { $0.matches(name) }) { return true }
        }
        return false
    }

    /// Which part of the index a plan of this selection must read: the selected roots and
    /// everything below them. The rest (paths neither selected nor on disk here) plans to
    /// nothing, so a plan reads it only where the local tree names a path.
    public struct Coverage: Sendable {
        /// Roots, by name.
        public var exact: [String]
        /// "dir/" byte prefixes, none below another.
        public var prefixes: [String]
        /// A root whose first component is not ASCII: no byte range holds every name
        /// equivalent to it (NFC/NFD), so the whole index is read.
        public var everything: Bool
        private let exactSet: Set<String>
        private let prefixSet: Set<String>

        init(exact: Set<String>, prefixes: Set<String>, everything: Bool) {
            // Drop what a shorter prefix already covers.
            let kept = prefixes.filter { !GlobalIndex.hasPrefix(String($0.dropLast()), in: prefixes) }
            self.prefixes = kept.sorted()
            self.prefixSet = Set(kept)
            self.exact = exact.filter { !GlobalIndex.hasPrefix($0, in: Set(kept)) }.sorted()
            self.exactSet = Set(self.exact)
            self.everything = everything
        }

        /// Whether `path` is one the plan reads through the coverage.
        public func covers(_ path: String) -> Bool {
            everything || exactSet.contains(path) || GlobalIndex.hasPrefix(path, in: prefixSet)
        }
    }

    /// The coverage of the selected roots. An ASCII root covers itself and "root/"; any other
    /// root covers its longest ASCII directory prefix (names equal under Unicode equivalence
    /// may differ in bytes only past it).
    public var coverage: Coverage {
        var exact: Set<String> = []
        var prefixes: Set<String> = []
        for root in roots {
            let bytes = Array(root.utf8)
            guard let firstWide = bytes.firstIndex(where: { $0 >= 0x80 }) else {
                exact.insert(root)
                prefixes.insert(root + "/")
                continue
            }
            guard let slash = bytes[..<firstWide].lastIndex(of: UInt8(ascii: "/")) else {
                return Coverage(exact: [], prefixes: [], everything: true)
            }
            prefixes.insert(String(decoding: bytes[...slash], as: UTF8.self))
        }
        return Coverage(exact: exact, prefixes: prefixes, everything: false)
    }

    /// Selected itself or through a selected parent, and not globally ignored.
    public func isSelected(_ path: String) -> Bool {
        guard !roots.isEmpty else { return false }
        if let asciiRoots {
            var bytes = path
            if let found = bytes.withUTF8({ asciiRoots.selects($0) }) { return found && !isGloballyIgnored(path) }
        }
        var found = roots.contains(path)
        if !found {
            // Byte-wise: '/' is ASCII, so every match is a character boundary.
            let utf8 = path.utf8
            var end = utf8.endIndex
            while let slash = utf8[..<end].lastIndex(of: UInt8(ascii: "/")) {
                if roots.contains(String(path[..<slash])) {
                    found = true
                    break
                }
                end = slash
            }
        }
        return found && !isGloballyIgnored(path)
    }
}

extension Array where Element == UInt8 {
    /// The decimal digits of `value`, as `"\(value)"` writes them.
    mutating func appendDecimal<T: BinaryInteger>(_ value: T) {
        if value < 0 { append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        let start = count
        repeat {
            append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        } while magnitude > 0
        self[start...].reverse()
    }

    /// Lower-case hex of a hash, as ``ContentHash/hex`` writes it.
    mutating func appendHex(_ hash: ContentHash) {
        let digits: StaticString = "0123456789abcdef"
        for word in [hash.a, hash.b, hash.c, hash.d] {
            for shift in stride(from: 60, through: 0, by: -4) {
                append(digits.utf8Start[Int(word >> UInt64(shift) & 0xF)])
            }
        }
    }
}
