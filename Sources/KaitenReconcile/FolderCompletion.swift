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
    /// disk is read). `needed` is given each global entry counted in `need`.
    public static func local(
        global: GlobalIndex, selection: Selection, tree: LocalTree, needed: (GlobalEntry) -> Void = { _ in }
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
        global.forEachGlobal { entry in
            guard !entry.file.isInvalid else { return }
            let selected = selection.isSelected(entry.path)
            if entry.file.isDeleted {
                // A selected path the peers deleted that is still here: a deletion to carry out.
                if selected, tree[entry.path] != nil {
                    result.need.deleted += 1
                    needed(entry)
                }
                return
            }
            result.global.add(entry.file.type, size: entry.file.size)
            guard selected else { return }
            result.wanted.add(entry.file.type, size: entry.file.size)
            if let mine = tree[entry.path] {
                let same = entry.file.type == .directory
                    ? mine.kind == .directory : Reconciler.contentHash(of: mine) == Reconciler.contentHash(of: entry.file)
                if same { return }
            }
            result.need.add(entry.file.type, size: entry.file.size)
            needed(entry)
        }
        return result
    }

    /// A peer: every live path whose global version it does not hold.
    public static func remote(global: GlobalIndex, device: DeviceID, needed: (GlobalEntry) -> Void = { _ in }) -> FolderCompletion {
        var result = FolderCompletion()
        global.forEachGlobal { entry in
            guard !entry.file.isInvalid else { return }
            let holds = entry.holders.contains(device)
            if entry.file.isDeleted {
                if let theirs = entry.versions[device], !theirs.isDeleted, !theirs.isInvalid {
                    result.need.deleted += 1
                    needed(entry)
                }
                return
            }
            result.global.add(entry.file.type, size: entry.file.size)
            result.wanted.add(entry.file.type, size: entry.file.size)
            if holds {
                result.local.add(entry.file.type, size: entry.file.size)
            } else {
                result.need.add(entry.file.type, size: entry.file.size)
                needed(entry)
            }
        }
        return result
    }
}
