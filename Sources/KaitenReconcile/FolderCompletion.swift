import KaitenIndex
import KaitenProtocol
import KaitenScan

/// How much of a folder a device has, as syncthing's folder summary and completion say it, in
/// Kaiten's meaning: this device needs what its selection asks for, not the whole folder; a peer
/// needs every live file whose global version it does not hold.
public struct FolderCompletion: Sendable, Equatable {
    public struct Counts: Sendable, Equatable {
        public var files = 0
        public var directories = 0
        public var symlinks = 0
        public var deleted = 0
        public var bytes: Int64 = 0

        public init() {}

        init(_ totals: IndexTally.Totals) {
            files = totals.files
            directories = totals.directories
            symlinks = totals.symlinks
            bytes = totals.bytes
        }

        public var items: Int { files + directories + symlinks + deleted }

        mutating func add(_ type: BEPFileInfoType, size: Int64) {
            switch type {
            case .directory: directories += 1
            case .file:
                files += 1
                bytes += size
            default: symlinks += 1
            }
        }
    }

    /// Every live path of the global index.
    public var global = Counts()
    /// What is on disk (as the last scan saw it) or what the peer holds of the global versions.
    public var local = Counts()
    /// What is wanted: the selected live paths (this device), every live path (a peer).
    public var wanted = Counts()
    /// What of `wanted` is not had yet; `deleted`: deletions to carry out.
    public var need = Counts()

    public init() {}

    /// The share of the wanted bytes had, 0…100, as syncthing rounds it: a need of only
    /// deletions or empty entries is 95, never 100.
    public var percent: Double {
        guard need.items > 0 else { return 100 }
        let done = wanted.bytes == 0 ? 0 : 100 * Double(wanted.bytes - need.bytes) / Double(wanted.bytes)
        return min(done, 95)
    }

    /// This device: the selection's paths against the local tree (the scan cache's view: no
    /// disk is read). `needed` is given each global entry counted in `need`. The folder's
    /// figures come from the index's tally and only the selection's coverage is walked, unless
    /// a root's name keeps its coverage from being a byte range (then every path is).
    public static func local(
        global: GlobalIndex, selection: Selection, tree: LocalTree, needed: ((GlobalEntry) -> Void)? = nil
    ) -> FolderCompletion {
        var result = FolderCompletion()
        for file in tree.files {
            switch file.kind {
            case .directory: result.local.directories += 1
            case .file:
                result.local.files += 1
                result.local.bytes += file.size
            case .symlink: result.local.symlinks += 1
            }
        }
        func visit(_ summary: GlobalSummary, countingGlobal: Bool) {
            guard !summary.isInvalid else { return }
            let selected = selection.isSelected(summary.path)
            if summary.isDeleted {
                // A selected path the peers deleted that is still here: a deletion to carry out.
                if selected, tree[summary.path] != nil {
                    result.need.deleted += 1
                    hand(summary, in: global, to: needed)
                }
                return
            }
            if countingGlobal { result.global.add(summary.type, size: summary.size) }
            guard selected else { return }
            result.wanted.add(summary.type, size: summary.size)
            if let mine = tree[summary.path] {
                let same: Bool
                if summary.type == .directory {
                    same = mine.kind == .directory
                } else if let entry = summary.entry {
                    same = Reconciler.contentHash(of: mine) == Reconciler.contentHash(of: entry.file)
                } else {
                    same = Reconciler.contentHash(of: mine) == summary.fileHash
                }
                if same { return }
            }
            result.need.add(summary.type, size: summary.size)
            hand(summary, in: global, to: needed)
        }
        let coverage = selection.coverage
        if coverage.everything {
            global.forEachGlobalSummary { visit($0, countingGlobal: true) }
        } else {
            result.global = Counts(global.tally().global)
            global.forEachGlobalSummary(exact: coverage.exact, prefixes: coverage.prefixes) { visit($0, countingGlobal: false) }
        }
        return result
    }

    /// Hands `summary`'s whole global entry to `needed` (read again when it was summarised in place).
    private static func hand(_ summary: GlobalSummary, in global: GlobalIndex, to needed: ((GlobalEntry) -> Void)?) {
        guard let needed else { return }
        if let entry = summary.entry ?? global.global(summary.path) { needed(entry) }
    }

    /// A peer: every live path whose global version it does not hold. Without `needed`, from
    /// the index's tally (no walk).
    public static func remote(global: GlobalIndex, device: DeviceID, needed: ((GlobalEntry) -> Void)? = nil) -> FolderCompletion {
        var result = FolderCompletion()
        if needed == nil {
            let tally = global.tally()
            let figures = tally.figures(of: device)
            result.global = Counts(tally.global)
            result.wanted = result.global
            result.local = Counts(figures.holds)
            result.need.files = result.global.files - result.local.files
            result.need.directories = result.global.directories - result.local.directories
            result.need.symlinks = result.global.symlinks - result.local.symlinks
            result.need.bytes = result.global.bytes - result.local.bytes
            result.need.deleted = figures.liveOnDeleted
            return result
        }
        let device = global.device(device)
        global.forEachGlobalSummary { summary in
            guard !summary.isInvalid else { return }
            if summary.isDeleted {
                if summary.announcesLive(device) {
                    result.need.deleted += 1
                    hand(summary, in: global, to: needed)
                }
                return
            }
            result.global.add(summary.type, size: summary.size)
            result.wanted.add(summary.type, size: summary.size)
            if summary.holds(device) {
                result.local.add(summary.type, size: summary.size)
            } else {
                result.need.add(summary.type, size: summary.size)
                hand(summary, in: global, to: needed)
            }
        }
        return result
    }
}
