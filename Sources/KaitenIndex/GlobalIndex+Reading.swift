import Foundation
import KaitenProtocol

// MARK: - Reading

extension GlobalIndex {
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

    /// Records of a snapshot of this view, in path order: runs of paths nothing changed since
    /// the snapshot the view reads (their records' bytes, as they are), or one path's name and
    /// announcements to encode.
    enum SnapshotRecord {
        case unchanged(IndexSnapshot.RecordRun)
        case encoded(String, [(device: UInt16, entry: FileEntry)])
        /// A path the snapshot does not hold: its name and changes, encoded as the record wants them.
        case added(String, Changes)
    }

    /// The paths the snapshot does not hold and their changes, in UTF-8 byte order.
    struct AddedPaths {
        var names: [String]
        var changes: [Changes]
    }

    /// The paths the snapshot does not hold, sorted by UTF-8 bytes, with their changes: what
    /// ``forEachSnapshotRecord(added:_:)`` merges in (sorted once for both of a writer's walks,
    /// each name's changes beside it rather than looked up again).
    func addedPathsInOrder() -> AddedPaths {
        var names: [String] = []
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.isEmpty { names.append(path) }
        names = ByteOrder.order(of: names).map { names[$0] }
        // Looked up once the sort's buffers are gone: they and a second array beside the
        // names were the peak of a big intake's snapshot.
        return AddedPaths(names: names, changes: names.map { overlay[$0]! })
    }

    /// At most this many bytes of records in one ``SnapshotRecord/unchanged(_:)`` run: a writer
    /// copies a run whole into its buffer.
    static let snapshotRunBytes = 256 << 10

    /// Every path with announcements, sorted by UTF-8 bytes, as a snapshot of this view holds
    /// it. A walk that merges the snapshot's paths with the names added since (`added`, from
    /// ``addedPathsInOrder()``), not an array of every path decoded: that array was most of an
    /// intake's peak memory (a kilobyte per path, ten gigabytes at ten million). The paths
    /// nothing changed since the snapshot, between one change and the next, are a run of their
    /// records' bytes, neither decoded nor looked at one by one: a growing log is snapshotted
    /// again and again, and each time most of it is such runs.
    func forEachSnapshotRecord<E: Error>(added: AddedPaths, _ body: (SnapshotRecord) throws(E) -> Void) throws(E) {
        var next = 0
        if let base {
            var passed = PassedPages(base)
            defer { passed.finish() }
            let count = base.pathCount
            let last = count > 0 ? base.nameBytes(count - 1) : UnsafeRawBufferPointer(start: nil, count: 0)
            // Base path before which the next added name goes (names are added in order, so the
            // search starts where the previous one ended). A name after the last path is
            // answered without a search: an index received in name order (syncthing 1.x sends
            // one) adds nothing but such names, and a search's probes would map pages across the
            // whole snapshot for the rest of the walk.
            func insertion(from i: Int) -> Int {
                guard next < added.names.count else { return count }
                var name = added.names[next]
                return name.withUTF8 { key in
                    let key = UnsafeRawBufferPointer(key)
                    return count == 0 || ByteOrder.compare(last, key) < 0 ? count : base.lowerBound(key, from: i)
                }
            }
            var insertAt = insertion(from: 0)
            var i = 0
            while i < count {
                while insertAt == i, next < added.names.count {
                    try body(.added(added.names[next], added.changes[next]))
                    next += 1
                    insertAt = insertion(from: i)
                }
                let first = i
                if voidedInBase.isEmpty && !isTouched(i) {
                    let runStart = base.recordOffset(i)
                    repeat { i += 1 } while i < insertAt && !isTouched(i) && base.recordOffset(i) - runStart < Self.snapshotRunBytes
                    if let run = base.run(first..<i) {
                        try body(.unchanged(run))
                        // Passed once read: pages given back before it would be mapped again.
                        for k in first..<i { passed.reached(k) }
                        continue
                    }
                    for k in first..<i { passed.reached(k) }
                } else {
                    passed.reached(i)
                    i += 1
                }
                // Changed since the snapshot (or a run the snapshot's table does not lay out).
                for k in first..<i {
                    let name = base.name(k)
                    let list = merged(k, name, isTouched(k) ? overlay[name] : nil)
                    if !list.isEmpty { try body(.encoded(name, list)) }
                }
            }
        }
        while next < added.names.count {
            try body(.added(added.names[next], added.changes[next]))
            next += 1
        }
    }

    mutating func number(of device: DeviceID) -> UInt16 {
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
    static func baseRecordLength(_ base: IndexSnapshot?, _ voided: Set<UInt16>, _ i: Int, _ n: UInt16) -> Int32? {
        // A device the snapshot does not know (numbered after its devices) announced nothing in it.
        guard i >= 0, let base, Int(n) < base.devices.count, !voided.contains(n) else { return nil }
        var found: Int32?
        base.devicesAndLengths(i) { device, length in if device == n { found = length } }
        return found
    }

    /// A path not yet searched for in the snapshot.
    static let unsearched = Int.min
    /// A path whose search is deferred (``deferSnapshotSearches()``) is marked with its place
    /// among the deferred names, counted from here.
    static let firstDeferred = Int.min + 1
    static func isDeferred(_ baseIndex: Int) -> Bool { baseIndex != unsearched && baseIndex < -1 }

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
    static func bigEndianPrefix(_ name: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
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
        let outcome = overlay[name, default: Changes(baseIndex: Self.unsearched)].put(
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
    enum PutOutcome {
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

    /// Every entry `device` announced (one per path), in no particular order. A walk, never an
    /// array: at ten million paths the array of this device's entries was 6 GiB.
    public func forEachEntry(from device: DeviceID, _ body: (FileEntry) throws -> Void) rethrows {
        guard let n = deviceNumbers[device] else { return }
        try forEachList { _, list in
            if let item = list.first(where: { $0.device == n }) { try body(item.entry) }
        }
    }

    /// `device`'s entries with a sequence above `sequence`. When the snapshot holds none of
    /// them (its checkpoint of the device is at or below `sequence`: a device's sequences only
    /// grow), only the paths changed since the snapshot are read: a service says what its own
    /// index gained after each round, and a walk of every entry took seconds at ten million paths.
    public func forEachEntry(from device: DeviceID, after sequence: Int64, _ body: (FileEntry) throws -> Void) rethrows {
        guard let n = deviceNumbers[device] else { return }
        if let base, !voidedInBase.contains(n),
            (base.checkpoints.first { $0.device == device }?.checkpoint.maxSequence ?? 0) > sequence
        {
            try forEachEntry(from: device) { entry in if entry.sequence > sequence { try body(entry) } }
            return
        }
        for (path, changes) in overlay {
            if let announced = changes.sequence(from: n), announced > sequence, let entry = changes.entry(from: n, named: path) { try body(entry) }
        }
    }

    /// Whether `device` announced anything still held.
    func hasEntries(from device: DeviceID) -> Bool {
        guard let n = deviceNumbers[device] else { return false }
        if overlay.values.contains(where: { $0.contains(n) }) { return true }
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
                    if isTouched(i), overlay[base.name(i)]?.contains(n) == true { return }
                    freed += Int64(length)
                }
            }
            voidedInBase.insert(n)
        }
        for name in Array(overlay.keys) {
            guard let length = overlay[name]!.remove(n) else { continue }
            freed += Int64(length)
            if overlay[name]!.isEmpty {
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
    /// - Parameter named: when given, only paths whose name (UTF-8) it accepts are read past
    ///   their name: a search by name at ten million paths decoded every announcement first.
    public func forEachGlobal(
        below directory: String, recursive: Bool, named: ((UnsafeRawBufferPointer) -> Bool)? = nil,
        _ body: (GlobalEntry) throws -> Void
    ) rethrows {
        let prefix = directory.isEmpty ? "" : directory + "/"
        let prefixLength = prefix.utf8.count
        func isWanted(_ path: String) -> Bool {
            guard path.utf8.count > prefixLength, path.utf8.starts(with: prefix.utf8) else { return false }
            return recursive || !path.utf8.dropFirst(prefixLength).contains(UInt8(ascii: "/"))
        }
        if let base {
            let key = Array(prefix.utf8)
            var i = base.lowerBound(prefix)
            var passed = PassedPages(base)
            passed.start(at: i)
            defer { passed.finish() }
            while i < base.pathCount {
                passed.reached(i)
                let name = base.nameBytes(i)
                guard name.count >= key.count, key.isEmpty || memcmp(name.baseAddress!, key, key.count) == 0 else { break }
                if !recursive, let slash = name[key.count...].firstIndex(of: UInt8(ascii: "/")) {
                    // A grandchild: skip the rest of that subdirectory ("/" + 1 is "0").
                    var next = Array(name[..<slash])
                    next.append(UInt8(ascii: "0"))
                    i = next.withUnsafeBytes { base.lowerBound($0) }
                    continue
                }
                if let named, !named(name) {
                    i += 1
                    continue
                }
                try visitBase(i) { path, list in
                    if let entry = select(path: path, list) { try body(entry) }
                }
                i += 1
            }
        }
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.isEmpty && isWanted(path) {
            var path = path
            if let named, !path.withUTF8({ named(UnsafeRawBufferPointer($0)) }) { continue }
            if let entry = select(path: path, changes.entries(named: path)) { try body(entry) }
        }
    }

    func select(path: String, _ list: [(device: UInt16, entry: FileEntry)]) -> GlobalEntry? {
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
        let global = tally().global
        return (global.files, global.directories, global.symlinks, global.bytes)
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
