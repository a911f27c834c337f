import KaitenProtocol

/// A path's global version in the parts a count needs (``GlobalIndex/forEachGlobalSummary(_:)``):
/// for a path with one announcement (nearly every path of a big folder) read in place from the
/// snapshot, with nothing decoded; otherwise from the whole ``GlobalEntry``.
public struct GlobalSummary {
    public let path: String
    public let type: BEPFileInfoType
    public let size: Int64
    public let isDeleted: Bool
    public let isInvalid: Bool
    /// The content hash of a regular file's global version (nil for anything else).
    public let fileHash: ContentHash?
    /// The whole global version: present when the path was not summarised in place.
    public let entry: GlobalEntry?
    /// The number of the one device that announced the path, when summarised in place (a
    /// number, not an ID: copying and comparing IDs cost more than the rest of a summary).
    let soleDevice: UInt16?

    init(_ entry: GlobalEntry) {
        path = entry.path
        type = entry.file.type
        size = entry.file.size
        isDeleted = entry.file.isDeleted
        isInvalid = entry.file.isInvalid
        fileHash = entry.file.type == .file ? entry.file.contentHash : nil
        self.entry = entry
        soleDevice = nil
    }

    init(path: String, device: UInt16, type: BEPFileInfoType, flags: UInt8, size: Int64, contentHash: ContentHash) {
        self.path = path
        self.type = type
        self.size = size
        isDeleted = flags & 1 != 0
        isInvalid = flags & 2 != 0
        fileHash = type == .file ? contentHash : nil
        entry = nil
        soleDevice = device
    }

    /// Whether `device` holds the global version validly.
    public func holds(_ device: GlobalIndex.Device) -> Bool {
        if let entry { return entry.holders.contains(device.id) }
        return !isInvalid && soleDevice != nil && soleDevice == device.number
    }

    /// Whether `device`'s own announcement of the path is live (neither deleted nor invalid).
    public func announcesLive(_ device: GlobalIndex.Device) -> Bool {
        if let entry {
            guard let theirs = entry.versions[device.id] else { return false }
            return !theirs.isDeleted && !theirs.isInvalid
        }
        return soleDevice != nil && soleDevice == device.number && !isDeleted && !isInvalid
    }
}

extension GlobalIndex {
    /// A device as this index numbers it, for ``GlobalSummary/holds(_:)``.
    public struct Device {
        public let id: DeviceID
        /// Nil when the device announced nothing here.
        let number: UInt16?
    }

    public func device(_ id: DeviceID) -> Device { Device(id: id, number: deviceNumbers[id]) }

    /// Every path's global version as a ``GlobalSummary``, in no particular order: what the
    /// folder figures and totals walk. At ten million paths decoding every announcement into a
    /// ``GlobalEntry`` (its arrays, its version vector) was most of a status request's 11 s.
    public func forEachGlobalSummary(_ body: (GlobalSummary) throws -> Void) rethrows {
        if let base {
            var passed = PassedPages(base)
            defer { passed.finish() }
            for i in 0..<base.pathCount {
                passed.reached(i)
                if !isTouched(i), let sole = base.soleAnnouncement(i) {
                    guard !voidedInBase.contains(sole.device) else { continue }
                    try body(
                        GlobalSummary(
                            path: base.name(i), device: sole.device, type: sole.type, flags: sole.flags, size: sole.size,
                            contentHash: sole.contentHash))
                    continue
                }
                try visitBase(i) { path, list in
                    if let entry = select(path: path, list) { try body(GlobalSummary(entry)) }
                }
            }
        }
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.isEmpty {
            if let entry = select(path: path, changes.entries(named: path)) { try body(GlobalSummary(entry)) }
        }
    }

    /// The global versions of the paths named in `exact` and of those under the byte prefixes
    /// in `prefixes` (a selection's coverage), as summaries.
    public func forEachGlobalSummary(exact: [String], prefixes: [String], _ body: (GlobalSummary) throws -> Void) rethrows {
        try forEachList(exact: exact, prefixes: prefixes) { path, list in
            if let entry = select(path: path, list) { try body(GlobalSummary(entry)) }
        }
    }

    /// Every entry `device` announced that is not invalid, in no particular order. A path whose
    /// only announcement is an invalid one is passed over in place: a device that holds 1 % of
    /// a folder announces the rest as "not held", ten million such entries at scale, and the
    /// plan decoded every one to keep none.
    public func forEachValidEntry(from device: DeviceID, _ body: (String, FileEntry) throws -> Void) rethrows {
        guard let n = deviceNumbers[device] else { return }
        func visit(_ path: String, _ list: [(device: UInt16, entry: FileEntry)]) throws {
            if let item = list.first(where: { $0.device == n }), !item.entry.isInvalid { try body(path, item.entry) }
        }
        if let base {
            var passed = PassedPages(base)
            defer { passed.finish() }
            for i in 0..<base.pathCount {
                passed.reached(i)
                if !isTouched(i), let sole = base.soleAnnouncement(i), sole.device != n || sole.flags & 2 != 0 { continue }
                try visitBase(i, visit)
            }
        }
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.isEmpty { try visit(path, changes.entries(named: path)) }
    }
}
