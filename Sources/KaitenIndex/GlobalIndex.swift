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
    /// Devices are interned: a path's versions name them by a small number, not by 32 bytes.
    private var devices: [DeviceID] = []
    private var deviceNumbers: [DeviceID: UInt16] = [:]
    /// Per path, each device's announcement (usually one or two), as a small array.
    private var storage: [String: [(device: UInt16, entry: FileEntry)]] = [:]

    /// The conflict rule of the peers' generation (Kaiten picks it from their Hello).
    public var conflictRule: ConflictRule = .syncthing1

    public init() {}

    /// How many paths any device announced.
    public var pathCount: Int { storage.count }

    /// Every path, unsorted.
    public var allPaths: Dictionary<String, [(device: UInt16, entry: FileEntry)]>.Keys { storage.keys }

    /// Each device's announcement of one path.
    public func versions(of path: String) -> [DeviceID: FileEntry] {
        guard let list = storage[path] else { return [:] }
        return Dictionary(list.map { (devices[Int($0.device)], $0.entry) }, uniquingKeysWith: { a, _ in a })
    }

    /// One device's announcement of one path.
    public func entry(_ path: String, from device: DeviceID) -> FileEntry? {
        guard let number = deviceNumbers[device] else { return nil }
        return storage[path]?.first { $0.device == number }?.entry
    }

    /// Every (path, device, entry), for compaction.
    public func forEachEntry(_ body: (String, DeviceID, FileEntry) throws -> Void) rethrows {
        for (path, list) in storage {
            for item in list { try body(path, devices[Int(item.device)], item.entry) }
        }
    }

    private mutating func number(of device: DeviceID) -> UInt16 {
        if let n = deviceNumbers[device] { return n }
        let n = UInt16(devices.count)
        devices.append(device)
        deviceNumbers[device] = n
        return n
    }

    /// Records `device`'s announcement of a path, replacing its previous one; returns the old one.
    @discardableResult
    mutating func set(_ entry: FileEntry, for device: DeviceID) -> FileEntry? {
        let n = number(of: device)
        if let i = storage[entry.name]?.firstIndex(where: { $0.device == n }) {
            let old = storage[entry.name]![i].entry
            storage[entry.name]![i].entry = entry
            return old
        }
        storage[entry.name, default: []].append((n, entry))
        return nil
    }

    /// Records an announcement that lives in no log: synthetic indexes for tests and benchmarks.
    public mutating func announce(_ file: BEPFileInfo, by device: DeviceID) {
        set(FileEntry(file, recordOffset: 0, recordLength: 0), for: device)
    }

    /// Forgets everything `device` announced; returns the record bytes that backed it.
    @discardableResult
    /// Every entry `device` announced (one per path).
    public func entries(from device: DeviceID) -> [FileEntry] {
        guard let n = deviceNumbers[device] else { return [] }
        return storage.values.compactMap { list in list.first { $0.device == n }?.entry }
    }

    /// Whether `device` announced anything still held.
    func hasEntries(from device: DeviceID) -> Bool {
        guard let n = deviceNumbers[device] else { return false }
        return storage.values.contains { $0.contains { $0.device == n } }
    }

    mutating func removeAll(from device: DeviceID) -> Int64 {
        guard let n = deviceNumbers[device] else { return 0 }
        var freed: Int64 = 0
        for name in Array(storage.keys) {
            guard let list = storage[name], list.contains(where: { $0.device == n }) else { continue }
            freed += list.filter { $0.device == n }.reduce(0) { $0 + Int64($1.entry.recordLength) }
            let kept = list.filter { $0.device != n }
            if kept.isEmpty { storage.removeValue(forKey: name) } else { storage[name] = kept }
        }
        return freed
    }

    /// The global version of one path.
    public func global(_ path: String) -> GlobalEntry? {
        guard let list = storage[path] else { return nil }
        return select(path: path, list)
    }

    /// Every path's global version, sorted by path. Deleted ones are included; callers filter.
    public func allGlobal() -> [GlobalEntry] {
        storage.keys.sorted().compactMap { global($0) }
    }

    /// Every path's global version, in no particular order: the plan's hot path, with no sorting
    /// and no per-path dictionaries.
    public func forEachGlobal(_ body: (GlobalEntry) throws -> Void) rethrows {
        for (path, list) in storage {
            if let entry = select(path: path, list) { try body(entry) }
        }
    }

    private func select(path: String, _ list: [(device: UInt16, entry: FileEntry)]) -> GlobalEntry? {
        if list.count == 1 {
            // The common case: one announcement is the global version.
            let device = devices[Int(list[0].device)]
            let entry = list[0].entry
            return GlobalEntry(
                path: path, file: entry, holders: entry.isInvalid ? [] : [device], announcements: [(device, entry)])
        }
        let named = list.map { (devices[Int($0.device)], $0.entry) }
        return Self.select(path: path, list.count == 1 ? named : named.sorted { $0.0 < $1.0 }, rule: conflictRule)
    }

    /// The number of live (not deleted, not invalid) files, directories and bytes.
    public func totals() -> (files: Int, directories: Int, symlinks: Int, bytes: Int64) {
        var result = (files: 0, directories: 0, symlinks: 0, bytes: Int64(0))
        for path in storage.keys {
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

    /// The global version among some announcements of one path, by syncthing's rule.
    public static func winner(_ path: String, _ versions: [DeviceID: FileEntry], rule: ConflictRule = .syncthing1) -> GlobalEntry? {
        select(path: path, versions, rule: rule)
    }

    /// syncthing's VersionList insertion, replayed in device order.
    static func select(path: String, _ versions: [DeviceID: FileEntry], rule: ConflictRule) -> GlobalEntry? {
        select(path: path, versions.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }, rule: rule)
    }

    /// `versions` sorted by device.
    static func select(path: String, _ versions: [(DeviceID, FileEntry)], rule: ConflictRule) -> GlobalEntry? {
        struct Group {
            var representative: FileEntry
            var valid: [DeviceID] = []
            var invalid: [DeviceID] = []
        }
        var list: [Group] = []
        for (device, entry) in versions {
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
                    if entry.winsConflict(over: list[i].representative, rule: rule) {
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
            path: path, file: chosen.representative, holders: chosen.valid.sorted(), announcements: versions)
    }
}

/// The global version of one path.
public struct GlobalEntry: Sendable {
    public let path: String
    /// The winning announcement.
    public let file: FileEntry
    /// The devices that hold the global version validly (the ones to fetch it from).
    public let holders: [DeviceID]
    /// Every device's announcement, sorted by device.
    public let announcements: [(device: DeviceID, entry: FileEntry)]

    /// Every device's announcement.
    public var versions: [DeviceID: FileEntry] {
        Dictionary(announcements.map { ($0.device, $0.entry) }, uniquingKeysWith: { a, _ in a })
    }
}
