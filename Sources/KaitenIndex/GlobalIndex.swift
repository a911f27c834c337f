import Foundation
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
    /// A snapshot's devices come first, with the snapshot's numbers.
    private var devices: [DeviceID] = []
    private var deviceNumbers: [DeviceID: UInt16] = [:]
    /// The state a snapshot held (``IndexSnapshot``), read in place, sorted by name; nil
    /// without one (then `overlay` holds everything).
    private var base: IndexSnapshot?
    /// Devices whose announcements in `base` no longer count (they sent a full index since).
    private var voidedInBase: Set<UInt16> = []
    /// Base paths whose list `overlay` holds now, one bit per base path.
    private var replacedInBase: [UInt64] = []
    /// Per path changed since the snapshot (or every path, without one), each device's
    /// announcement (usually one or two), as a small array. An empty list hides a base path.
    private var overlay: [String: [(device: UInt16, entry: FileEntry)]] = [:]
    private var livePaths = 0

    /// The conflict rule of the peers' generation (Kaiten picks it from their Hello).
    public var conflictRule: ConflictRule = .syncthing1

    public init() {}

    /// The view a snapshot holds, to which later records are added.
    init(snapshot: IndexSnapshot) {
        base = snapshot
        devices = snapshot.devices
        for (n, device) in devices.enumerated() { deviceNumbers[device] = UInt16(n) }
        replacedInBase = [UInt64](repeating: 0, count: (snapshot.pathCount + 63) / 64)
        livePaths = snapshot.pathCount
    }

    /// Whether part of this view is read in place from a snapshot.
    public var hasSnapshot: Bool { base != nil }

    /// How many paths changed since the snapshot (all of them without one).
    public var pathsOutsideSnapshot: Int { overlay.count }

    /// Gives the snapshot's pages read so far back to the system (a service between rounds).
    public func releaseSnapshotPages() { base?.releasePages() }

    /// How many paths any device announced.
    public var pathCount: Int { livePaths }

    /// The devices by number (a snapshot's device table).
    var deviceTable: [DeviceID] { devices }

    // MARK: - One path's announcements

    private func isReplaced(_ i: Int) -> Bool { replacedInBase[i >> 6] & (1 << UInt64(i & 63)) != 0 }

    /// Base path `i`'s list, unless the overlay replaced it.
    private func baseList(_ i: Int, name: String) -> [(device: UInt16, entry: FileEntry)] {
        base!.announcements(i, name: name, skipping: voidedInBase)
    }

    private func list(_ path: String) -> [(device: UInt16, entry: FileEntry)]? {
        if let list = overlay[path] { return list.isEmpty ? nil : list }
        guard let base, let i = base.find(path) else { return nil }
        let list = baseList(i, name: path)
        return list.isEmpty ? nil : list
    }

    /// Replaces a path's list (empty: no device announces it).
    private mutating func store(_ list: [(device: UInt16, entry: FileEntry)], for path: String, had: Bool) {
        if had && list.isEmpty { livePaths -= 1 }
        if !had && !list.isEmpty { livePaths += 1 }
        if let base, let i = base.find(path) {
            replacedInBase[i >> 6] |= 1 << UInt64(i & 63)
            overlay[path] = list
        } else if list.isEmpty {
            overlay.removeValue(forKey: path)
        } else {
            overlay[path] = list
        }
    }

    /// Every path and its announcements (none empty), in no particular order.
    private func forEachList(_ body: (String, [(device: UInt16, entry: FileEntry)]) throws -> Void) rethrows {
        if let base {
            for i in 0..<base.pathCount where !isReplaced(i) {
                let name = base.name(i)
                let list = baseList(i, name: name)
                if !list.isEmpty { try body(name, list) }
            }
        }
        for (path, list) in overlay where !list.isEmpty { try body(path, list) }
    }

    /// The paths named in `exact` and those under the byte prefixes in `prefixes` (each
    /// ending in "/"), with their announcements; the caller keeps the two disjoint.
    private func forEachList(
        exact: [String], prefixes: [String], _ body: (String, [(device: UInt16, entry: FileEntry)]) throws -> Void
    ) rethrows {
        if let base {
            for path in exact {
                if let i = base.find(path), !isReplaced(i) {
                    let list = baseList(i, name: path)
                    if !list.isEmpty { try body(path, list) }
                }
            }
            for prefix in prefixes {
                var i = base.lowerBound(prefix)
                let key = Array(prefix.utf8)
                while i < base.pathCount {
                    let name = base.nameBytes(i)
                    guard name.count >= key.count, memcmp(name.baseAddress!, key, key.count) == 0 else { break }
                    if !isReplaced(i) {
                        let path = base.name(i)
                        let list = baseList(i, name: path)
                        if !list.isEmpty { try body(path, list) }
                    }
                    i += 1
                }
            }
        }
        let wanted = Set(exact)
        let prefixSet = Set(prefixes)
        for (path, list) in overlay where !list.isEmpty {
            if wanted.contains(path) || Self.hasPrefix(path, in: prefixSet) { try body(path, list) }
        }
    }

    /// Whether some ancestor of `path`, as "dir/", is in `prefixes`.
    public static func hasPrefix(_ path: String, in prefixes: Set<String>) -> Bool {
        guard !prefixes.isEmpty else { return false }
        let utf8 = path.utf8
        var at = utf8.startIndex
        while let slash = utf8[at...].firstIndex(of: UInt8(ascii: "/")) {
            if prefixes.contains(String(path[...slash])) { return true }
            at = utf8.index(after: slash)
        }
        return false
    }

    // MARK: - Reading

    /// Every path, unsorted.
    public var allPaths: [String] {
        var paths: [String] = []
        paths.reserveCapacity(livePaths)
        forEachList { path, _ in paths.append(path) }
        return paths
    }

    /// Each device's announcement of one path.
    public func versions(of path: String) -> [DeviceID: FileEntry] {
        guard let list = list(path) else { return [:] }
        return Dictionary(list.map { (devices[Int($0.device)], $0.entry) }, uniquingKeysWith: { a, _ in a })
    }

    /// One device's announcement of one path.
    public func entry(_ path: String, from device: DeviceID) -> FileEntry? {
        guard let number = deviceNumbers[device] else { return nil }
        return list(path)?.first { $0.device == number }?.entry
    }

    /// Every (path, device, entry), for compaction.
    public func forEachEntry(_ body: (String, DeviceID, FileEntry) throws -> Void) rethrows {
        try forEachList { path, list in
            for item in list { try body(path, devices[Int(item.device)], item.entry) }
        }
    }

    /// Every path with its announcements, sorted by UTF-8 bytes: what a snapshot holds.
    func sortedLists() -> [(String, [(device: UInt16, entry: FileEntry)])] {
        var all: [(String, [(device: UInt16, entry: FileEntry)])] = []
        all.reserveCapacity(livePaths)
        forEachList { all.append(($0, $1)) }
        all.sort { $0.0.utf8Precedes($1.0) }
        return all
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
        if base == nil {
            // No snapshot: the overlay is the whole view; change it in place.
            if let i = overlay[entry.name]?.firstIndex(where: { $0.device == n }) {
                let old = overlay[entry.name]![i].entry
                overlay[entry.name]![i].entry = entry
                return old
            }
            if overlay[entry.name] == nil { livePaths += 1 }
            overlay[entry.name, default: []].append((n, entry))
            return nil
        }
        var list = self.list(entry.name) ?? []
        let had = !list.isEmpty
        var old: FileEntry?
        if let i = list.firstIndex(where: { $0.device == n }) {
            old = list[i].entry
            list[i].entry = entry
        } else {
            list.append((n, entry))
        }
        store(list, for: entry.name, had: had)
        return old
    }

    /// Records an announcement that lives in no log: synthetic indexes for tests and benchmarks.
    public mutating func announce(_ file: BEPFileInfo, by device: DeviceID) {
        set(FileEntry(file, recordOffset: 0, recordLength: 0), for: device)
    }

    /// Every entry `device` announced (one per path).
    public func entries(from device: DeviceID) -> [FileEntry] {
        guard let n = deviceNumbers[device] else { return [] }
        var found: [FileEntry] = []
        forEachList { _, list in
            if let item = list.first(where: { $0.device == n }) { found.append(item.entry) }
        }
        return found
    }

    /// Whether `device` announced anything still held.
    func hasEntries(from device: DeviceID) -> Bool {
        guard let n = deviceNumbers[device] else { return false }
        if overlay.values.contains(where: { $0.contains { $0.device == n } }) { return true }
        guard let base, !voidedInBase.contains(n) else { return false }
        for i in 0..<base.pathCount where !isReplaced(i) {
            var found = false
            base.devicesAndLengths(i) { device, _ in if device == n { found = true } }
            if found { return true }
        }
        return false
    }

    /// Forgets everything `device` announced; returns the record bytes that backed it.
    mutating func removeAll(from device: DeviceID) -> Int64 {
        guard let n = deviceNumbers[device] else { return 0 }
        var freed: Int64 = 0
        for name in Array(overlay.keys) {
            guard let list = overlay[name], list.contains(where: { $0.device == n }) else { continue }
            freed += list.filter { $0.device == n }.reduce(0) { $0 + Int64($1.entry.recordLength) }
            store(list.filter { $0.device != n }, for: name, had: true)
        }
        if let base, !voidedInBase.contains(n) {
            // Weighed without decoding: the device numbers and record lengths of each path.
            for i in 0..<base.pathCount where !isReplaced(i) {
                var others = 0
                var mine = false
                base.devicesAndLengths(i) { device, length in
                    if device == n {
                        mine = true
                        freed += Int64(length)
                    } else if !voidedInBase.contains(device) {
                        others += 1
                    }
                }
                if mine && others == 0 { livePaths -= 1 }
            }
            voidedInBase.insert(n)
        }
        return freed
    }

    /// The global version of one path.
    public func global(_ path: String) -> GlobalEntry? {
        guard let list = list(path) else { return nil }
        return select(path: path, list)
    }

    /// Every path's global version, sorted by path. Deleted ones are included; callers filter.
    public func allGlobal() -> [GlobalEntry] {
        var all: [GlobalEntry] = []
        forEachGlobal { all.append($0) }
        return all.sorted { $0.path < $1.path }
    }

    /// Every path's global version, in no particular order: the plan's hot path, with no sorting
    /// and no per-path dictionaries.
    public func forEachGlobal(_ body: (GlobalEntry) throws -> Void) rethrows {
        try forEachList { path, list in
            if let entry = select(path: path, list) { try body(entry) }
        }
    }

    /// The global versions of the paths in `exact` and of every path under a prefix of
    /// `prefixes` (each ending in "/", byte-wise), in no particular order; the caller keeps
    /// the two disjoint. With a snapshot this reads only those paths (binary search, then the
    /// range), not the whole index.
    public func forEachGlobal(exact: [String], prefixes: [String], _ body: (GlobalEntry) throws -> Void) rethrows {
        try forEachList(exact: exact, prefixes: prefixes) { path, list in
            if let entry = select(path: path, list) { try body(entry) }
        }
    }

    /// The global versions below `directory` (everything when empty): its direct children,
    /// or every descendant when `recursive`. With a snapshot, only those paths are read (a
    /// direct listing skips each subdirectory's contents by binary search).
    public func forEachGlobal(below directory: String, recursive: Bool, _ body: (GlobalEntry) throws -> Void) rethrows {
        let prefix = directory.isEmpty ? "" : directory + "/"
        let prefixLength = prefix.utf8.count
        func isWanted(_ path: String) -> Bool {
            guard path.utf8.count > prefixLength, path.hasPrefix(prefix) else { return false }
            return recursive || !path.utf8.dropFirst(prefixLength).contains(UInt8(ascii: "/"))
        }
        if let base {
            let key = Array(prefix.utf8)
            var i = base.lowerBound(prefix)
            while i < base.pathCount {
                let name = base.nameBytes(i)
                guard name.count >= key.count, key.isEmpty || memcmp(name.baseAddress!, key, key.count) == 0 else { break }
                if !recursive, let slash = name[key.count...].firstIndex(of: UInt8(ascii: "/")) {
                    // A grandchild: skip the rest of that subdirectory ("/" + 1 is "0").
                    var next = Array(name[..<slash])
                    next.append(UInt8(ascii: "0"))
                    i = next.withUnsafeBytes { base.lowerBound($0) }
                    continue
                }
                if !isReplaced(i) {
                    let path = base.name(i)
                    let list = baseList(i, name: path)
                    if !list.isEmpty, let entry = select(path: path, list) { try body(entry) }
                }
                i += 1
            }
        }
        for (path, list) in overlay where !list.isEmpty && isWanted(path) {
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
        forEachGlobal { g in
            guard !g.file.isDeleted, !g.file.isInvalid else { return }
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
