import KaitenProtocol

/// What every peer announced for one folder, and the global version of each path chosen the
/// way syncthing chooses it.
///
/// Syncthing keeps, per name, a list of versions ordered best first (lib/db/structs.go,
/// VersionList): a new version goes before the first entry it is newer than, or concurrent
/// with and wins against (``FileEntry/winsConflict(over:)``); equal versions share an entry.
/// The global version is the first entry some device holds validly; if every holder has it
/// invalid, the first entry.
public struct GlobalIndex: Sendable {
    /// Per path, each device's announcement.
    public private(set) var paths: [String: [DeviceID: FileEntry]] = [:]

    public init() {}

    /// Records `device`'s announcement of a path, replacing its previous one.
    mutating func set(_ entry: FileEntry, for device: DeviceID) {
        paths[entry.name, default: [:]][device] = entry
    }

    /// Forgets everything `device` announced.
    mutating func removeAll(from device: DeviceID) {
        for name in Array(paths.keys) {
            paths[name]?.removeValue(forKey: device)
            if paths[name]?.isEmpty == true { paths.removeValue(forKey: name) }
        }
    }

    /// The global version of one path.
    public func global(_ path: String) -> GlobalEntry? {
        guard let versions = paths[path] else { return nil }
        return Self.select(path: path, versions)
    }

    /// Every path's global version, sorted by path. Deleted ones are included; callers filter.
    public func allGlobal() -> [GlobalEntry] {
        paths.keys.sorted().compactMap { global($0) }
    }

    /// The number of live (not deleted, not invalid) files, directories and bytes.
    public func totals() -> (files: Int, directories: Int, symlinks: Int, bytes: Int64) {
        var result = (files: 0, directories: 0, symlinks: 0, bytes: Int64(0))
        for path in paths.keys {
            guard let g = global(path), !g.file.isDeleted, !g.file.isInvalid else { continue }
            switch g.file.type {
            case .directory: result.directories += 1
            case .file:
                result.files += 1
                result.bytes += g.file.size
            default: result.symlinks += 1
            }
        }
        return result
    }

    /// syncthing's VersionList insertion, replayed in device order.
    static func select(path: String, _ versions: [DeviceID: FileEntry]) -> GlobalEntry? {
        struct Group {
            var representative: FileEntry
            var valid: [DeviceID] = []
            var invalid: [DeviceID] = []
        }
        var list: [Group] = []
        for (device, entry) in versions.sorted(by: { $0.key < $1.key }) {
            var placed = false
            for i in list.indices {
                switch entry.version.compare(list[i].representative.version) {
                case .equal:
                    if entry.isInvalid {
                        list[i].invalid.append(device)
                    } else {
                        if list[i].valid.isEmpty { list[i].representative = entry }
                        list[i].valid.append(device)
                    }
                    placed = true
                case .greater:
                    list.insert(Group(representative: entry, valid: entry.isInvalid ? [] : [device], invalid: entry.isInvalid ? [device] : []), at: i)
                    placed = true
                case .concurrentGreater, .concurrentLesser:
                    if entry.winsConflict(over: list[i].representative) {
                        list.insert(Group(representative: entry, valid: entry.isInvalid ? [] : [device], invalid: entry.isInvalid ? [device] : []), at: i)
                        placed = true
                    }
                case .lesser:
                    break
                }
                if placed { break }
            }
            if !placed {
                list.append(Group(representative: entry, valid: entry.isInvalid ? [] : [device], invalid: entry.isInvalid ? [device] : []))
            }
        }
        guard let chosen = list.first(where: { !$0.valid.isEmpty }) ?? list.first else { return nil }
        return GlobalEntry(
            path: path, file: chosen.representative, holders: chosen.valid.sorted(), versions: versions)
    }
}

/// The global version of one path.
public struct GlobalEntry: Sendable {
    public let path: String
    /// The winning announcement.
    public let file: FileEntry
    /// The devices that hold the global version validly (the ones to fetch it from).
    public let holders: [DeviceID]
    /// Every device's announcement.
    public let versions: [DeviceID: FileEntry]
}
