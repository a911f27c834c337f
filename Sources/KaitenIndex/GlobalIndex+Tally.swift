import KaitenProtocol

/// A folder's figures that depend on the index alone: the live global versions by kind, and
/// per device what it holds of them and what it announced. A status request (tray apps and
/// dashboards poll every few seconds, and `kaiten run` is "ready" when it answers one) needs
/// them, and counting them is a walk of every path: 2 s of a warm page cache at ten million
/// paths, a read of the whole 1.7 GB snapshot from a cold one.
///
/// They are counted once per snapshot, by the process that writes it (or the first that needs
/// them, for a snapshot written before), kept beside it (``IndexSnapshot/Tally``) and brought
/// up to date by the paths changed since the snapshot: a request costs the log's tail, not the
/// folder.
public struct IndexTally: Equatable, Sendable {
    public struct Totals: Equatable, Sendable {
        public var files = 0
        public var directories = 0
        public var symlinks = 0
        public var bytes: Int64 = 0

        public init() {}

        mutating func add(_ type: BEPFileInfoType, size: Int64, _ sign: Int) {
            switch type {
            case .directory: directories += sign
            case .file:
                files += sign
                bytes += Int64(sign) * size
            default: symlinks += sign
            }
        }
    }

    /// One device's side.
    public struct DeviceFigures: Equatable, Sendable {
        /// The live global versions it holds validly.
        public var holds = Totals()
        /// Paths deleted globally that it still announces as live (deletions it has to carry out).
        public var liveOnDeleted = 0
        /// Its announcements: live, "not held" (invalid) and deleted.
        public var live = 0
        public var notHeld = 0
        public var deleted = 0

        public init() {}
    }

    /// Every live (neither deleted nor invalid) global version.
    public var global = Totals()
    /// By device number (the index's).
    var byNumber: [DeviceFigures]
    var deviceIDs: [DeviceID]

    init(devices: [DeviceID]) {
        deviceIDs = devices
        byNumber = Array(repeating: DeviceFigures(), count: devices.count)
    }

    /// `device`'s figures (all zero for a device that announced nothing).
    public func figures(of device: DeviceID) -> DeviceFigures {
        guard let n = deviceIDs.firstIndex(of: device) else { return DeviceFigures() }
        return byNumber[n]
    }

    mutating func grow(to devices: [DeviceID]) {
        while byNumber.count < devices.count { byNumber.append(DeviceFigures()) }
        deviceIDs = devices
    }

    /// Counts a path with one announcement, read in place (it is the global version).
    mutating func addSole(device: UInt16, type: BEPFileInfoType, flags: UInt8, size: Int64) {
        let deleted = flags & 1 != 0
        let invalid = flags & 2 != 0
        let n = Int(device)
        if invalid {
            byNumber[n].notHeld += 1
        } else if deleted {
            byNumber[n].deleted += 1
        } else {
            byNumber[n].live += 1
            global.add(type, size: size, 1)
            byNumber[n].holds.add(type, size: size, 1)
        }
    }

    /// Counts (`sign` 1) or takes back (-1) a path with its announcements and global version.
    mutating func add(_ list: [(device: UInt16, entry: FileEntry)], global winner: GlobalEntry?, numbers: [DeviceID: UInt16], _ sign: Int) {
        for (n, entry) in list {
            if entry.isInvalid {
                byNumber[Int(n)].notHeld += sign
            } else if entry.isDeleted {
                byNumber[Int(n)].deleted += sign
            } else {
                byNumber[Int(n)].live += sign
            }
        }
        guard let winner, !winner.file.isInvalid else { return }
        if winner.file.isDeleted {
            for (n, entry) in list where !entry.isDeleted && !entry.isInvalid { byNumber[Int(n)].liveOnDeleted += sign }
            return
        }
        global.add(winner.file.type, size: winner.file.size, sign)
        for holder in winner.holders {
            if let n = numbers[holder] { byNumber[Int(n)].holds.add(winner.file.type, size: winner.file.size, sign) }
        }
    }
}

extension GlobalIndex {
    /// The folder's figures: the snapshot's, kept beside it, with the paths changed since
    /// taken back and counted again; a walk of every path when there is no snapshot or a device
    /// has voided its announcements in it since (it sent a full index).
    public func tally() -> IndexTally {
        guard let base, voidedInBase.isEmpty, deferredSearches == nil else { return walkTally() }
        var tally = base.tally(rule: conflictRule) {
            var baseOnly = GlobalIndex(snapshot: base)
            baseOnly.conflictRule = conflictRule
            return baseOnly.walkTally()
        }
        tally.grow(to: devices)
        for (path, changes) in overlay where !changes.isEmpty || changes.baseIndex >= 0 {
            if changes.baseIndex >= 0 {
                let before = merged(changes.baseIndex, path, nil)
                tally.add(before, global: select(path: path, before), numbers: deviceNumbers, -1)
            }
            let after = merged(changes.baseIndex, path, changes)
            if !after.isEmpty { tally.add(after, global: select(path: path, after), numbers: deviceNumbers, 1) }
        }
        return tally
    }

    /// The figures counted path by path (a path with one announcement read in place).
    func walkTally() -> IndexTally {
        var tally = IndexTally(devices: devices)
        if let base {
            var passed = PassedPages(base)
            defer { passed.finish() }
            for i in 0..<base.pathCount {
                passed.reached(i)
                if !isTouched(i), let sole = base.soleAnnouncement(i) {
                    guard !voidedInBase.contains(sole.device) else { continue }
                    tally.addSole(device: sole.device, type: sole.type, flags: sole.flags, size: sole.size)
                    continue
                }
                visitBase(i) { path, list in tally.add(list, global: select(path: path, list), numbers: deviceNumbers, 1) }
            }
        }
        for (path, changes) in overlay where changes.baseIndex < 0 && !changes.isEmpty {
            let list = changes.entries(named: path)
            tally.add(list, global: select(path: path, list), numbers: deviceNumbers, 1)
        }
        return tally
    }
}
