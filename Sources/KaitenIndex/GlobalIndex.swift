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
    var devices: [DeviceID] = []
    var deviceNumbers: [DeviceID: UInt16] = [:]
    var lastNumbered: (device: DeviceID, number: UInt16)?
    /// The state a snapshot held (``IndexSnapshot``), read in place, sorted by name; nil
    /// without one (then `overlay` holds everything).
    var base: IndexSnapshot?
    /// Devices whose announcements in `base` no longer count (they sent a full index since).
    var voidedInBase: Set<UInt16> = []
    /// Base paths the overlay has announcements for, one bit per base path.
    var touchedInBase: [UInt64] = []

    /// A path's announcements made after the snapshot (every announcement, without one), by
    /// device: each replaces that device's announcement in the snapshot, if any.
    ///
    /// Kept encoded as a snapshot's record keeps them (``IndexSnapshot``), one after the other
    /// in the order the devices first came, and decoded when read: up to a fifth of a
    /// growing index's paths wait here for the next snapshot, and as decoded entries in arrays
    /// they cost about 350 bytes a path, most of an intake's peak memory; encoded, about 160.
    struct Changes {
        /// Where the path is in the snapshot, or -1.
        var baseIndex: Int
        /// The announcements' bytes (empty: none).
        private(set) var announcements: [UInt8] = []

        init(baseIndex: Int) { self.baseIndex = baseIndex }

        var isEmpty: Bool { announcements.isEmpty }

        /// How many devices announced the path.
        var count: Int {
            announcements.withUnsafeBytes { bytes in
                var (at, count) = (0, 0)
                while at < bytes.count {
                    at += IndexSnapshot.announcementLength(bytes, at: at)
                    count += 1
                }
                return count
            }
        }

        /// Calls `body` with each announcement's device and where it starts, until it returns false.
        private func walk(_ body: (UnsafeRawBufferPointer, UInt16, Int) -> Bool) {
            announcements.withUnsafeBytes { bytes in
                var at = 0
                while at < bytes.count {
                    guard body(bytes, bytes.u16(at), at) else { return }
                    at += IndexSnapshot.announcementLength(bytes, at: at)
                }
            }
        }

        /// Where device `n`'s announcement starts and its length, if it made one.
        private func span(of n: UInt16) -> (start: Int, length: Int)? {
            var found: (Int, Int)?
            walk { bytes, device, at in
                guard device == n else { return true }
                found = (at, IndexSnapshot.announcementLength(bytes, at: at))
                return false
            }
            return found
        }

        /// Every announcement, decoded, named `name` (the path's).
        func entries(named name: String) -> [(device: UInt16, entry: FileEntry)] {
            guard !isEmpty else { return [] }
            return announcements.withUnsafeBytes { bytes in
                IndexSnapshot.decodeAnnouncements(bytes, from: 0, count: count, name: name, skipping: [])
            }
        }

        /// Whether device `n` announced the path.
        func contains(_ n: UInt16) -> Bool { span(of: n) != nil }

        /// Device `n`'s announcement, named `name`, if it made one.
        func entry(from n: UInt16, named name: String) -> FileEntry? {
            guard let (start, _) = span(of: n) else { return nil }
            return announcements.withUnsafeBytes { IndexSnapshot.decodeAnnouncement($0, at: start, name: name) }
        }

        /// Device `n`'s announcement's sequence, read without decoding it, if it made one.
        func sequence(from n: UInt16) -> Int64? {
            guard let (start, _) = span(of: n) else { return nil }
            return announcements.withUnsafeBytes { IndexSnapshot.announcedSequence($0, at: start) }
        }

        /// Takes device `n`'s announcement out; the record length it named, if it made one.
        mutating func remove(_ n: UInt16) -> Int32? {
            guard let (start, length) = span(of: n) else { return nil }
            let recordLength = announcements.withUnsafeBytes { IndexSnapshot.announcedRecordLength($0, at: start) }
            announcements.removeSubrange(start..<(start + length))
            return recordLength
        }

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
            var encoded: [UInt8] = []
            encoded.reserveCapacity(IndexSnapshot.announcementSize(entry))
            IndexSnapshot.encodeAnnouncement(n, entry, into: &encoded)
            if announcements.isEmpty {
                // The common case, a path's first change: the bytes as encoded, no spare capacity.
                announcements = encoded
            } else if let (start, length) = span(of: n) {
                let old = announcements.withUnsafeBytes { IndexSnapshot.announcedRecordLength($0, at: start) }
                announcements.replaceSubrange(start..<(start + length), with: encoded)
                return .replaced(old)
            } else {
                announcements += encoded
            }
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
    var overlay: [String: Changes] = [:]

    /// While a log's tail is replayed, the paths it changes first are searched for in the
    /// snapshot together, in name order, at the end (``resolveDeferredSearches()``): one by one
    /// in the order they came, each search was a binary search through cold pages of the
    /// snapshot, the largest cost of the replay. nil when searches are made at once.
    var deferredSearches: DeferredSearches?

    /// The names still to search for, their bytes side by side (copied as they come: sorting
    /// `String`s retained and released both at every comparison), each with the device that
    /// changed it first, whose snapshot announcement it replaced.
    struct DeferredSearches {
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
    var deferredOtherDevices: [(place: Int, device: UInt16)] = []

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

    func isTouched(_ i: Int) -> Bool { touchedInBase[i >> 6] & (1 << UInt64(i & 63)) != 0 }

    /// Base path `i`'s announcements that still count, with `changes` (the overlay's) replacing
    /// their devices' ones.
    func merged(_ i: Int, _ name: String, _ changes: Changes?) -> [(device: UInt16, entry: FileEntry)] {
        // (set() searched every changed path; -1: not in the snapshot.)
        guard i >= 0, let base else { return changes?.entries(named: name) ?? [] }
        var list = base.announcements(i, name: name, skipping: voidedInBase)
        guard let changes, !changes.isEmpty else { return list }
        list.removeAll { item in changes.contains(item.device) }
        list += changes.entries(named: name)
        return list
    }

    func list(_ path: String) -> [(device: UInt16, entry: FileEntry)]? {
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
    func forEachList(_ body: (String, [(device: UInt16, entry: FileEntry)]) throws -> Void) rethrows {
        if let base {
            var passed = PassedPages(base)
            defer { passed.finish() }
            for i in 0..<base.pathCount {
                passed.reached(i)
                let name = base.name(i)
                let list = merged(i, name, isTouched(i) ? overlay[name] : nil)
                if !list.isEmpty { try body(name, list) }
            }
        }
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.isEmpty { try body(path, changes.entries(named: path)) }
    }

    /// Walks of the snapshot in path order, which give back the pages they passed every
    /// ``stride`` paths (``IndexSnapshot/releaseWalked(from:before:)``) and, at their end, every
    /// page they mapped when they passed many paths: a walk of every path, or of a directory
    /// holding most of them, would otherwise leave gigabytes resident at ten million paths. The
    /// end gives back the whole mapping, not only the ranges walked: the binary searches that
    /// found where each range starts touched pages elsewhere, and the kernel maps a large
    /// folio of the page cache (up to 2 MiB) at a single touch.
    ///
    /// A walk also asks the kernel to read ahead of it once it has passed ``readAheadAfter``
    /// paths in a row: the mapping is advised random (lookups jump around), so from a cold page
    /// cache each page a walk touched was a read of its own, 4 KiB at a time: 81 s for a
    /// status at ten million paths that a sequential read of the same file does in 2 s.
    struct PassedPages {
        static let stride = 1 << 16
        /// Fewer paths than this and a walk leaves its pages (an `ls` of one directory): the
        /// next round's release takes them.
        static let releasedAfter = 1 << 12
        /// Paths passed in a row before a walk reads ahead, and how many it reads ahead at a
        /// time (about 5 MB of records): an `ls` of one directory reads nothing it does not list.
        static let readAheadAfter = 1 << 10
        static let readAhead = 1 << 15
        let base: IndexSnapshot
        private var from: Int
        private var passed = 0
        /// Where the current run of consecutive paths began, the path expected next, and how far
        /// the kernel was asked to read.
        private var runStart = 0
        private var next = -1
        private var readUpTo = 0
        init(_ base: IndexSnapshot) {
            self.base = base
            from = 0
        }
        /// A range starts at `i`.
        mutating func start(at i: Int) { from = i }
        mutating func reached(_ i: Int) {
            passed += 1
            if i != next {
                runStart = i
                readUpTo = i
            }
            next = i + 1
            if i - runStart >= Self.readAheadAfter, i + Self.readAhead >= readUpTo {
                let start = Swift.max(readUpTo, i)
                readUpTo = Swift.min(base.pathCount, start + 2 * Self.readAhead)
                base.readAhead(from: start, before: readUpTo)
            }
            guard i - from >= Self.stride else { return }
            base.releaseWalked(from: from, before: i)
            from = i
        }
        func finish() { if passed >= Self.releasedAfter { base.releasePages() } }
    }

    /// Base path `i`, if it has announcements that count.
    func visitBase(_ i: Int, _ body: (String, [(device: UInt16, entry: FileEntry)]) throws -> Void) rethrows {
        let name = base!.name(i)
        let list = merged(i, name, isTouched(i) ? overlay[name] : nil)
        if !list.isEmpty { try body(name, list) }
    }

    /// The paths named in `exact` and those under the byte prefixes in `prefixes` (each
    /// ending in "/"), with their announcements; the caller keeps the two disjoint.
    func forEachList(
        exact: [String], prefixes: [String], _ body: (String, [(device: UInt16, entry: FileEntry)]) throws -> Void
    ) rethrows {
        if let base {
            var passed = PassedPages(base)
            defer { passed.finish() }
            for path in exact {
                if let i = base.find(path) {
                    passed.reached(i)
                    try visitBase(i, body)
                }
            }
            for prefix in prefixes {
                var i = base.lowerBound(prefix)
                passed.start(at: i)
                let key = Array(prefix.utf8)
                while i < base.pathCount {
                    passed.reached(i)
                    let name = base.nameBytes(i)
                    guard name.count >= key.count, memcmp(name.baseAddress!, key, key.count) == 0 else { break }
                    try visitBase(i, body)
                    i += 1
                }
            }
        }
        let wanted = Set(exact)
        let prefixSet = Set(prefixes)
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.isEmpty {
            if wanted.contains(path) || Self.hasPrefix(path, in: prefixSet) { try body(path, changes.entries(named: path)) }
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
