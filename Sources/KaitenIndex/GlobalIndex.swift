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
    private var lastNumbered: (device: DeviceID, number: UInt16)?
    /// The state a snapshot held (``IndexSnapshot``), read in place, sorted by name; nil
    /// without one (then `overlay` holds everything).
    private var base: IndexSnapshot?
    /// Devices whose announcements in `base` no longer count (they sent a full index since).
    private var voidedInBase: Set<UInt16> = []
    /// Base paths the overlay has announcements for, one bit per base path.
    private var touchedInBase: [UInt64] = []

    /// A path's announcements made after the snapshot (every announcement, without one), by
    /// device: each replaces that device's announcement in the snapshot, if any.
    private struct Changes {
        /// Where the path is in the snapshot, or -1.
        var baseIndex: Int
        var entries: [(device: UInt16, entry: FileEntry)]

        /// Puts device `n`'s announcement in; searches the snapshot for the path at its first
        /// change, or marks the search deferred to place `deferredCount` when one is given.
        mutating func put(
            _ entry: consuming FileEntry, from n: UInt16, base: IndexSnapshot?, voided: Set<UInt16>, deferredCount: Int?
        ) -> PutOutcome {
            var newlyFound = -1
            var searchLater = false
            if baseIndex == GlobalIndex.unsearched {
                if let deferredCount {
                    baseIndex = GlobalIndex.firstDeferred + deferredCount
                    searchLater = true
                } else {
                    // First change of this path: one search of the snapshot, nothing decoded.
                    baseIndex = base?.find(entry.name) ?? -1
                    newlyFound = baseIndex
                }
            }
            if let j = entries.firstIndex(where: { $0.device == n }) {
                let old = entries[j].entry.recordLength
                entries[j].entry = entry
                return .replaced(old)
            }
            entries.append((n, entry))
            // A deferred path's snapshot announcements are weighed when it is searched: this
            // device's with the path's name when it is the first, else noted for then.
            if GlobalIndex.isDeferred(baseIndex) {
                return searchLater ? .searchDeferred : .weighLater(place: baseIndex - GlobalIndex.firstDeferred)
            }
            return .searched(newlyFound: newlyFound, GlobalIndex.baseRecordLength(base, voided, baseIndex, n))
        }
    }

    /// Only what changed since the snapshot: a log's tail costs memory for its own entries,
    /// not for the other devices' announcements of the same paths.
    private var overlay: [String: Changes] = [:]

    /// While a log's tail is replayed, the paths it changes first are searched for in the
    /// snapshot together, in name order, at the end (``resolveDeferredSearches()``): one by one
    /// in the order they came, each search was a binary search through cold pages of the
    /// snapshot, the largest cost of the replay. nil when searches are made at once.
    private var deferredSearches: DeferredSearches?

    /// The names still to search for, their bytes side by side (copied as they come: sorting
    /// `String`s retained and released both at every comparison), each with the device that
    /// changed it first, whose snapshot announcement it replaced.
    private struct DeferredSearches {
        var arena: [UInt8] = []
        var spans: [(start: Int, count: Int)] = []
        var firstDevices: [UInt16] = []
        var count: Int { spans.count }

        init(expected: Int) {
            arena.reserveCapacity(expected * 32)
            spans.reserveCapacity(expected)
            firstDevices.reserveCapacity(expected)
        }

        mutating func add(_ name: String, device: UInt16) {
            let start = arena.count
            if name.utf8.withContiguousStorageIfAvailable({ arena.append(contentsOf: $0) }) == nil {
                arena.append(contentsOf: name.utf8)
            }
            spans.append((start, arena.count - start))
            firstDevices.append(device)
        }
    }
    /// The other devices that changed a deferred path (its first one is with its name), by the
    /// path's place among the deferred names: their snapshot announcements are weighed with it.
    private var deferredOtherDevices: [(place: Int, device: UInt16)] = []

    /// The conflict rule of the peers' generation (Kaiten picks it from their Hello).
    public var conflictRule: ConflictRule = .syncthing1

    public init() {}

    /// The view a snapshot holds, to which later records are added.
    init(snapshot: IndexSnapshot) {
        base = snapshot
        devices = snapshot.devices
        for (n, device) in devices.enumerated() { deviceNumbers[device] = UInt16(n) }
        touchedInBase = [UInt64](repeating: 0, count: (snapshot.pathCount + 63) / 64)
    }

    /// Makes room for about `count` more changed paths (a log tail about to be replayed):
    /// growing the table step by step was a tenth of the replay.
    mutating func reserveChanges(_ count: Int) {
        overlay.reserveCapacity(overlay.count + count)
    }

    /// Whether part of this view is read in place from a snapshot.
    public var hasSnapshot: Bool { base != nil }

    /// How many paths changed since the snapshot (all of them without one).
    public var pathsOutsideSnapshot: Int { overlay.count }

    /// Gives the snapshot's pages read so far back to the system (a service between rounds).
    public func releaseSnapshotPages() { base?.releasePages() }

    /// How many paths any device announced (counted: tests, benchmarks and `status` ask).
    public var pathCount: Int {
        var count = 0
        if let base {
            for i in 0..<base.pathCount where !isTouched(i) {
                if voidedInBase.isEmpty {
                    count += 1
                } else {
                    var live = false
                    base.devicesAndLengths(i) { device, _ in if !voidedInBase.contains(device) { live = true } }
                    if live { count += 1 }
                }
            }
        }
        // A changed path always has an announcement of its own (an emptied one is removed).
        return count + overlay.count
    }

    /// The devices by number (a snapshot's device table).
    var deviceTable: [DeviceID] { devices }

    // MARK: - One path's announcements

    private func isTouched(_ i: Int) -> Bool { touchedInBase[i >> 6] & (1 << UInt64(i & 63)) != 0 }

    /// Base path `i`'s announcements that still count, with `changes` (the overlay's) replacing
    /// their devices' ones.
    private func merged(_ i: Int, _ name: String, _ changes: Changes?) -> [(device: UInt16, entry: FileEntry)] {
        // (set() searched every changed path; -1: not in the snapshot.)
        guard i >= 0, let base else { return changes?.entries ?? [] }
        var list = base.announcements(i, name: name, skipping: voidedInBase)
        guard let changes, !changes.entries.isEmpty else { return list }
        list.removeAll { item in changes.entries.contains { $0.device == item.device } }
        list += changes.entries
        return list
    }

    private func list(_ path: String) -> [(device: UInt16, entry: FileEntry)]? {
        let list: [(device: UInt16, entry: FileEntry)]
        if let changes = overlay[path] {
            list = merged(changes.baseIndex, path, changes)
        } else if let base, let i = base.find(path) {
            list = merged(i, path, nil)
        } else {
            return nil
        }
        return list.isEmpty ? nil : list
    }

    /// Every path and its announcements (none empty), in no particular order.
    private func forEachList(_ body: (String, [(device: UInt16, entry: FileEntry)]) throws -> Void) rethrows {
        if let base {
            for i in 0..<base.pathCount {
                let name = base.name(i)
                let list = merged(i, name, isTouched(i) ? overlay[name] : nil)
                if !list.isEmpty { try body(name, list) }
            }
        }
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.entries.isEmpty { try body(path, changes.entries) }
    }

    /// Base path `i`, if it has announcements that count.
    private func visitBase(_ i: Int, _ body: (String, [(device: UInt16, entry: FileEntry)]) throws -> Void) rethrows {
        let name = base!.name(i)
        let list = merged(i, name, isTouched(i) ? overlay[name] : nil)
        if !list.isEmpty { try body(name, list) }
    }

    /// The paths named in `exact` and those under the byte prefixes in `prefixes` (each
    /// ending in "/"), with their announcements; the caller keeps the two disjoint.
    private func forEachList(
        exact: [String], prefixes: [String], _ body: (String, [(device: UInt16, entry: FileEntry)]) throws -> Void
    ) rethrows {
        if let base {
            for path in exact {
                if let i = base.find(path) { try visitBase(i, body) }
            }
            for prefix in prefixes {
                var i = base.lowerBound(prefix)
                let key = Array(prefix.utf8)
                while i < base.pathCount {
                    let name = base.nameBytes(i)
                    guard name.count >= key.count, memcmp(name.baseAddress!, key, key.count) == 0 else { break }
                    try visitBase(i, body)
                    i += 1
                }
            }
        }
        let wanted = Set(exact)
        let prefixSet = Set(prefixes)
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.entries.isEmpty {
            if wanted.contains(path) || Self.hasPrefix(path, in: prefixSet) { try body(path, changes.entries) }
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
        forEachList { all.append(($0, $1)) }
        all.sort { $0.0.utf8Precedes($1.0) }
        return all
    }

    private mutating func number(of device: DeviceID) -> UInt16 {
        // A log's records come in batches of one device: the same one as last time is compared
        // (the same bytes, usually the very same array), not hashed.
        if let last = lastNumbered, last.device == device { return last.number }
        if let n = deviceNumbers[device] {
            lastNumbered = (device, n)
            return n
        }
        let n = UInt16(devices.count)
        devices.append(device)
        deviceNumbers[device] = n
        return n
    }

    /// The record length of device `n`'s announcement of base path `i`, if it counts.
    private static func baseRecordLength(_ base: IndexSnapshot?, _ voided: Set<UInt16>, _ i: Int, _ n: UInt16) -> Int32? {
        // A device the snapshot does not know (numbered after its devices) announced nothing in it.
        guard i >= 0, let base, Int(n) < base.devices.count, !voided.contains(n) else { return nil }
        var found: Int32?
        base.devicesAndLengths(i) { device, length in if device == n { found = length } }
        return found
    }

    /// A path not yet searched for in the snapshot.
    private static let unsearched = Int.min
    /// A path whose search is deferred (``deferSnapshotSearches()``) is marked with its place
    /// among the deferred names, counted from here.
    private static let firstDeferred = Int.min + 1
    private static func isDeferred(_ baseIndex: Int) -> Bool { baseIndex != unsearched && baseIndex < -1 }

    /// From now until ``resolveDeferredSearches()``, defers the search of each newly changed
    /// path in the snapshot (a log's tail is about to be replayed); nothing may read the view
    /// in between.
    mutating func deferSnapshotSearches() {
        guard base != nil, deferredSearches == nil else { return }
        // As many as the changes reserved room for (``reserveChanges(_:)``).
        deferredSearches = DeferredSearches(expected: overlay.capacity - overlay.count)
    }

    /// Makes the deferred searches, in name order, each starting where the previous one ended;
    /// returns the record bytes of the snapshot's announcements the changes replaced (what
    /// ``set(_:for:)`` would have returned for each, had it searched at once).
    mutating func resolveDeferredSearches() -> Int64 {
        guard let deferred = deferredSearches else { return 0 }
        let otherDevices = deferredOtherDevices
        deferredSearches = nil
        deferredOtherDevices = []
        guard let base, deferred.count > 0 else { return 0 }
        let (arena, spans, firstDevices) = (deferred.arena, deferred.spans, deferred.firstDevices)
        var order = [Int32](0..<Int32(deferred.count))
        // Where each deferred name is in the snapshot (-1: not there), by its place.
        var found = [Int](repeating: -1, count: deferred.count)
        let voided = voidedInBase
        // The record bytes of the snapshot announcements the first devices replaced, per part.
        var replacedByPart: [Int64] = [0, 0]
        arena.withUnsafeBytes { arena in
            spans.withUnsafeBufferPointer { spans in
                func key(_ k: Int32) -> UnsafeRawBufferPointer {
                    let span = spans[Int(k)]
                    return UnsafeRawBufferPointer(rebasing: arena[span.start..<(span.start + span.count)])
                }
                // Sorted by their first 16 bytes as two numbers, the rest compared only on a tie
                // (most names differ early: the comparisons stay out of the arena).
                var sortable = (0..<Int32(spans.count)).map { k in
                    let name = key(k)
                    return (first: Self.bigEndianPrefix(name, 0), second: Self.bigEndianPrefix(name, 8), k: k)
                }
                sortable.sort { a, b in
                    if a.first != b.first { return a.first < b.first }
                    if a.second != b.second { return a.second < b.second }
                    return ByteOrder.compare(key(a.k), key(b.k)) < 0
                }
                for (place, item) in sortable.enumerated() { order[place] = item.k }
                // The searches read only the snapshot: two halves of the sorted names on two
                // cores, each search starting where the previous one of its half ended.
                order.withUnsafeBufferPointer { order in
                    found.withUnsafeMutableBufferPointer { found in
                        replacedByPart.withUnsafeMutableBufferPointer { replacedByPart in
                            // Each part writes only its own names' places and its own sum; all
                            // is read after both end.
                            nonisolated(unsafe) let (arena, spans, order, found, sums) = (arena, spans, order, found, replacedByPart)
                            let parts = order.count >= 4096 ? 2 : 1
                            DispatchQueue.concurrentPerform(iterations: parts) { part in
                                var from = 0
                                var sum: Int64 = 0
                                for k in order[(order.count * part / parts)..<(order.count * (part + 1) / parts)] {
                                    let span = spans[Int(k)]
                                    let key = UnsafeRawBufferPointer(rebasing: arena[span.start..<(span.start + span.count)])
                                    let i = base.lowerBound(key, from: from)
                                    from = i
                                    guard i < base.pathCount && ByteOrder.compare(base.nameBytes(i), key) == 0 else { continue }
                                    found[Int(k)] = i
                                    // The change replaced the first device's snapshot announcement, if
                                    // it had one (read here, in name order, where the search just was).
                                    sum += Int64(Self.baseRecordLength(base, voided, i, firstDevices[Int(k)]) ?? 0)
                                }
                                sums[part] = sum
                            }
                        }
                    }
                }
            }
        }
        var replaced = replacedByPart[0] + replacedByPart[1]
        for (place, device) in otherDevices {
            replaced += Int64(Self.baseRecordLength(base, voided, found[place], device) ?? 0)
        }
        // Each deferred path takes its result in the table's own order (memory read in
        // sequence, no name hashed again).
        var position = overlay.values.startIndex
        while position != overlay.values.endIndex {
            let marked = overlay.values[position].baseIndex
            if Self.isDeferred(marked) {
                let i = found[marked - Self.firstDeferred]
                overlay.values[position].baseIndex = i
                if i >= 0 { touchedInBase[i >> 6] |= 1 << UInt64(i & 63) }
            }
            overlay.values.formIndex(after: &position)
        }
        return replaced
    }

    /// Eight bytes of `name` from `offset`, big-endian, zeros past its end: ordering these as
    /// numbers never contradicts the names' byte order (a tie says nothing).
    private static func bigEndianPrefix(_ name: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
        if name.count >= offset + 8 { return UInt64(bigEndian: name.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
        var value: UInt64 = 0
        for i in offset..<(offset + 8) { value = value << 8 | (i < name.count ? UInt64(name[i]) : 0) }
        return value
    }

    /// Records `device`'s announcement of a path, replacing its previous one; returns the
    /// record length of the one it replaced (the log's live bytes drop by it).
    @discardableResult
    mutating func set(_ entry: consuming FileEntry, for device: DeviceID) -> Int32? {
        let n = number(of: device)
        let name = entry.name
        // One hash lookup, the path's changes modified in place and the entry moved into them.
        let outcome = overlay[name, default: Changes(baseIndex: Self.unsearched, entries: [])].put(
            entry, from: n, base: base, voided: voidedInBase, deferredCount: deferredSearches?.count)
        switch outcome {
        case .replaced(let length): return length
        case .searched(let i, let length):
            if i >= 0 { touchedInBase[i >> 6] |= 1 << UInt64(i & 63) }
            return length
        case .searchDeferred:
            deferredSearches!.add(name, device: n)
            return nil
        case .weighLater(let place):
            deferredOtherDevices.append((place, n))
            return nil
        }
    }

    /// What ``Changes/put(_:from:base:voided:deferredCount:)`` did, for ``set(_:for:)`` to finish.
    private enum PutOutcome {
        /// The device's earlier change was replaced; its record length.
        case replaced(Int32?)
        /// Added; the path's place in the snapshot when this was its first change and it was
        /// searched for now (else -1), and the record length of the snapshot announcement this
        /// replaced.
        case searched(newlyFound: Int, Int32?)
        /// The path's first change, its search deferred.
        case searchDeferred
        /// Added to a path whose search is deferred, at this place among the deferred names.
        case weighLater(place: Int)
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
        if overlay.values.contains(where: { $0.entries.contains { $0.device == n } }) { return true }
        guard let base, !voidedInBase.contains(n) else { return false }
        for i in 0..<base.pathCount {
            var found = false
            base.devicesAndLengths(i) { device, _ in if device == n { found = true } }
            if found { return true }
        }
        return false
    }

    /// Forgets everything `device` announced; returns the record bytes that backed it.
    mutating func removeAll(from device: DeviceID) -> Int64 {
        // What the snapshot holds of each changed path must be known first; the searches
        // resume deferred after (``deferSnapshotSearches()``).
        let deferring = deferredSearches != nil
        var freed = resolveDeferredSearches()
        defer { if deferring { deferSnapshotSearches() } }
        guard let n = deviceNumbers[device] else { return freed }
        if let base, !voidedInBase.contains(n) {
            // The snapshot's announcements of the device stop counting, weighed without
            // decoding; one the overlay replaced was already taken off when it was.
            for i in 0..<base.pathCount {
                base.devicesAndLengths(i) { device, length in
                    guard device == n else { return }
                    if isTouched(i), overlay[base.name(i)]?.entries.contains(where: { $0.device == n }) == true { return }
                    freed += Int64(length)
                }
            }
            voidedInBase.insert(n)
        }
        for name in Array(overlay.keys) {
            guard let j = overlay[name]!.entries.firstIndex(where: { $0.device == n }) else { continue }
            freed += Int64(overlay[name]!.entries[j].entry.recordLength)
            overlay[name]!.entries.remove(at: j)
            if overlay[name]!.entries.isEmpty {
                let i = overlay[name]!.baseIndex
                if i >= 0 { touchedInBase[i >> 6] &= ~(1 << UInt64(i & 63)) }
                overlay.removeValue(forKey: name)
            }
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
                try visitBase(i) { path, list in
                    if let entry = select(path: path, list) { try body(entry) }
                }
                i += 1
            }
        }
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.entries.isEmpty && isWanted(path) {
            if let entry = select(path: path, changes.entries) { try body(entry) }
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
