import Foundation
import KaitenProtocol
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The global view of an index log up to some byte of it, in a file beside the log that is
/// read in place (memory-mapped) rather than decoded: opening a log with a snapshot costs what
/// was appended after it (etcd keeps a snapshot beside its WAL for the same reason).
///
/// ```
/// header (72 bytes, little-endian):
///   "KAITENSS" | format u32 = 1 | CRC32 of every byte after the first 16 (u32)
///   | file size u64 | log generation u64 | log bytes covered u64 | live log bytes u64
///   | path count u64 | device count u32 | checkpoint count u32 | path table offset u64
/// folder ID: length u16 | bytes, padded to a multiple of 8
/// devices:      32 bytes each, numbered in order
/// checkpoints:  device number u16 | 6 zero bytes | index ID u64 | max sequence i64 | record length u64
/// path table:   path count × u64, where each path's record starts; paths sorted by UTF-8 bytes
/// path record:  name length u32 | announcement count u16 | name | announcements
/// announcement: device u16 | type i32 | flags u8 (1 deleted, 2 invalid, 4 no permissions)
///               | permissions u32 | modified ns i32 | block size i32 | block count i32
///               | record length i32 | size i64 | modified s i64 | modified by u64 | sequence i64
///               | record offset i64 | content hash 4 × u64 | counter count u16 | symlink length u32
///               | counters (id u64, value u64) | symlink target
/// ```
///
/// Trust: a snapshot decides nothing a log could not. It is used only when its CRC matches,
/// its folder and generation are the log's, and it covers no more of the log than there is;
/// every offset it holds is checked against its size before it is read (once per file: a
/// later process takes a file it finds unchanged since, see ``CheckStamp``). Anything else and the
/// log is replayed in full (a writer then writes a new snapshot). Written to a temporary file,
/// fsynced and renamed, so a crash leaves the old snapshot or the new one, whole; the
/// generation (a random number in the log's header, new at every compaction) tells a snapshot
/// of an older log apart, whatever its size.
public final class IndexSnapshot: @unchecked Sendable {
    public static let magic: [UInt8] = Array("KAITENSS".utf8)
    public static let formatVersion: UInt32 = 1
    static let headerSize = 74
    static let announcementFixedSize = 105
    /// How much of a snapshot is encoded before it goes to the file.
    static let chunkSize = 1 << 20

    public let path: String
    public let folderID: String
    /// Which log this is a snapshot of, and how much of it.
    public let generation: UInt64
    public let coveredLogBytes: Int64
    public let liveLogBytes: Int64
    public let pathCount: Int
    public let devices: [DeviceID]
    public let checkpoints: [(device: DeviceID, checkpoint: IndexLog.Checkpoint, recordLength: Int64)]
    /// The snapshot's size in bytes.
    public let byteCount: Int

    private let base: UnsafeRawPointer
    private let pathTable: Int
    /// The file this was mapped from (set before the snapshot is shared).
    private(set) var identity: FileIdentity?
    /// The figures of this snapshot's paths, once counted or read (``tally(rule:compute:)``).
    let keptTally = Mutex<(rule: ConflictRule, tally: IndexTally)?>(nil)

    private init(
        path: String, folderID: String, base: UnsafeRawPointer, size: Int, generation: UInt64, covered: Int64, live: Int64,
        pathCount: Int, devices: [DeviceID], checkpoints: [(device: DeviceID, checkpoint: IndexLog.Checkpoint, recordLength: Int64)],
        pathTable: Int
    ) {
        self.path = path
        self.folderID = folderID
        self.base = base
        self.byteCount = size
        self.generation = generation
        self.coveredLogBytes = covered
        self.liveLogBytes = live
        self.pathCount = pathCount
        self.devices = devices
        self.checkpoints = checkpoints
        self.pathTable = pathTable
    }

    deinit {
        munmap(UnsafeMutableRawPointer(mutating: base), byteCount)
    }

    /// The snapshot this process last mapped and checked at each path: a snapshot file never
    /// changes once renamed into place (a new snapshot is a new file), so a later reader of the
    /// same log (a service's peer sessions, its rounds, its REST API, one after another) shares
    /// that mapping instead of reading and checking it again, gigabytes at ten million paths.
    /// Held until a newer snapshot at the same path is opened: a mapping costs address space,
    /// not memory (its pages are given back), and a replaced file's blocks only until then.
    private static let checked = Mutex<[String: (identity: FileIdentity, snapshot: IndexSnapshot)]>([:])
    /// At most this many paths are held (folders × the global log and the local index).
    static let checkedKept = 64

    /// Removes the snapshot at `path` and its check stamp, and lets go of this process's hold
    /// on its mapping.
    static func remove(path: String) {
        unlink(path)
        unlink(Tally.path(of: path))
        unlink(Tally.path(of: path) + ".tmp")
        unlink(CheckStamp.path(of: path))
        unlink(CheckStamp.path(of: path) + ".tmp")
        _ = checked.withLock { $0.removeValue(forKey: path) }
    }

    /// Lets go of this process's hold on the snapshot at `path`, as a new process would find it.
    static func forgetChecked(path: String) {
        _ = checked.withLock { $0.removeValue(forKey: path) }
    }

    /// Which file a snapshot was mapped from: a replaced or rewritten file is another one. The
    /// change time is the kernel's: no program can set it back, so a file whose identity is
    /// unchanged has not been written to, renamed over or truncated since.
    struct FileIdentity: Hashable {
        let device: UInt64
        let inode: UInt64
        let size: Int64
        let modifiedS: Int
        let modifiedNs: Int
        let changedS: Int
        let changedNs: Int

        init(_ info: stat) {
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
            size = Int64(info.st_size)
            modifiedS = info.st_mtim.tv_sec
            modifiedNs = info.st_mtim.tv_nsec
            changedS = info.st_ctim.tv_sec
            changedNs = info.st_ctim.tv_nsec
        }

        init(device: UInt64, inode: UInt64, size: Int64, modifiedS: Int, modifiedNs: Int, changedS: Int, changedNs: Int) {
            self.device = device
            self.inode = inode
            self.size = size
            self.modifiedS = modifiedS
            self.modifiedNs = modifiedNs
            self.changedS = changedS
            self.changedNs = changedNs
        }
    }

    /// Why a snapshot was not used.
    public struct Rejection: Error, CustomStringConvertible {
        public let description: String
    }

    // MARK: - Reading

    /// Maps and checks the snapshot at `path`: nil when there is none, a ``Rejection`` naming
    /// the reason when it is damaged or belongs to another log or folder.
    public static func open(path: String, folderID: String, generation: UInt64, logSize: Int64) throws(Rejection) -> IndexSnapshot? {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw Rejection(description: "\(path): cannot open: \(String(cString: strerror(errno)))")
        }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_size >= headerSize else {
            throw Rejection(description: "\(path): shorter than a snapshot header")
        }
        let identity = FileIdentity(info)
        if let shared = checked.withLock({ $0[path].flatMap { $0.identity == identity ? $0.snapshot : nil } }) {
            guard shared.folderID == folderID else { throw Rejection(description: "\(path): belongs to another folder") }
            guard shared.generation == generation, generation != 0 else {
                throw Rejection(description: "\(path): made from another log (generation differs)")
            }
            guard shared.coveredLogBytes <= logSize else {
                throw Rejection(description: "\(path): covers \(shared.coveredLogBytes) bytes of a log that has \(logSize)")
            }
            return shared
        }
        let size = Int(info.st_size)
        guard let mapped = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), mapped != MAP_FAILED else {
            throw Rejection(description: "\(path): cannot map: \(String(cString: strerror(errno)))")
        }
        let raw = UnsafeRawBufferPointer(start: mapped, count: size)
        // Lookups jump around: map only the page each touches, not its neighbours (fault-around)
        // or a whole huge page, which made a 1,000-file `ls` resident in 140 MiB.
        madvise(mapped, size, MADV_RANDOM)
        madvise(mapped, size, 15 /* MADV_NOHUGEPAGE */)
        do {
            let stamped = CheckStamp.read(of: path) == CheckStamp(identity: identity, checksum: raw.u32(12))
            let snapshot = try check(
                raw, path: path, folderID: folderID, generation: generation, logSize: logSize, contents: !stamped)
            if !stamped {
                // Checking read every page; the plan reads only what it visits.
                madvise(mapped, size, MADV_DONTNEED)
                CheckStamp(identity: identity, checksum: raw.u32(12)).write(of: path)
            }
            snapshot.identity = identity
            checked.withLock { kept in
                if kept.count >= Self.checkedKept && kept[path] == nil { kept.removeAll() }
                kept[path] = (identity, snapshot)
            }
            return snapshot
        } catch {
            munmap(mapped, size)
            throw error
        }
    }

    /// Checks the header and tables; with `contents`, also the CRC of every byte and every
    /// record's bounds, order and name (without, the file is one checked before: see
    /// ``CheckStamp``).
    private static func check(
        _ raw: UnsafeRawBufferPointer, path: String, folderID: String, generation wanted: UInt64, logSize: Int64, contents: Bool
    ) throws(Rejection) -> IndexSnapshot {
        func reject(_ why: String) -> Rejection { Rejection(description: "\(path): \(why)") }
        guard Array(raw[0..<8]) == magic else { throw reject("not a Kaiten index snapshot") }
        guard raw.u32(8) == formatVersion else { throw reject("snapshot format \(raw.u32(8)) is not supported") }
        guard raw.u64(16) == UInt64(raw.count) else { throw reject("torn: the header says \(raw.u64(16)) bytes, the file has \(raw.count)") }
        if contents {
            // Checking reads every byte; each window read is given back at once, so that opening
            // a 150 MB snapshot does not make it resident (the plan then reads only what it visits).
            let window = 8 << 20
            var crc: UInt32 = 0
            var at16 = 16
            willNeed(raw, from: 0, to: min(raw.count, window))
            while at16 < raw.count {
                let end = min(raw.count, (at16 / window + 1) * window)
                // The next window is read while this one is summed (the mapping is advised random).
                willNeed(raw, from: end, to: min(raw.count, end + window))
                crc = CRC32.checksum(UnsafeRawBufferPointer(rebasing: raw[at16..<end]), seed: crc)
                release(raw, from: at16 == 16 ? 0 : at16, to: end)
                at16 = end
            }
            guard crc == raw.u32(12) else { throw reject("checksum mismatch") }
        }
        let generation = raw.u64(24)
        guard generation == wanted, generation != 0 else { throw reject("made from another log (generation differs)") }
        let covered = raw.u64(32)
        guard covered <= UInt64(logSize) else { throw reject("covers \(covered) bytes of a log that has \(logSize)") }
        let pathCount = raw.u64(48)
        let deviceCount = Int(raw.u32(56))
        let checkpointCount = Int(raw.u32(60))
        let pathTable = raw.u64(64)
        let nameLength = Int(raw.u16(72))
        guard 74 + nameLength <= raw.count, String(decoding: raw[74..<(74 + nameLength)], as: UTF8.self) == folderID else {
            throw reject("belongs to another folder")
        }
        var at = (74 + nameLength + 7) & ~7
        guard deviceCount <= Int(UInt16.max), checkpointCount <= deviceCount,
            at + 32 * deviceCount + 32 * checkpointCount <= raw.count
        else { throw reject("device table runs past the end") }
        var devices: [DeviceID] = []
        for _ in 0..<deviceCount {
            guard let device = try? DeviceID(bytes: Array(raw[at..<(at + 32)])) else { throw reject("bad device ID") }
            devices.append(device)
            at += 32
        }
        var checkpoints: [(device: DeviceID, checkpoint: IndexLog.Checkpoint, recordLength: Int64)] = []
        for _ in 0..<checkpointCount {
            let number = Int(raw.u16(at))
            guard number < deviceCount else { throw reject("checkpoint of an unknown device") }
            checkpoints.append(
                (devices[number], IndexLog.Checkpoint(indexID: raw.u64(at + 8), maxSequence: Int64(bitPattern: raw.u64(at + 16))),
                 Int64(bitPattern: raw.u64(at + 24))))
            at += 32
        }
        guard pathCount < UInt64(Int.max / 8), pathTable == UInt64(at), at + 8 * Int(pathCount) <= raw.count else {
            throw reject("path table runs past the end")
        }
        // Every record must lie inside the file, in order, and hold what it says: checked once
        // here, so that reading one later needs no check that could fail.
        let count = Int(pathCount)
        guard contents else {
            return IndexSnapshot(
                path: path, folderID: folderID, base: raw.baseAddress!, size: raw.count, generation: generation, covered: Int64(covered),
                live: Int64(bitPattern: raw.u64(40)), pathCount: count, devices: devices, checkpoints: checkpoints, pathTable: at)
        }
        var previousEnd = at + 8 * count
        var previousName = UnsafeRawBufferPointer(start: nil, count: 0)
        var releasedTable = at
        var releasedRecords = previousEnd
        for i in 0..<count {
            if i & 0x7FFF == 0x7FFF {
                release(raw, from: releasedTable, to: at + 8 * i)
                release(raw, from: releasedRecords, to: previousEnd)
                releasedTable = at + 8 * i
                releasedRecords = previousEnd
            }
            let start = Int(raw.u64(at + 8 * i))
            guard start == previousEnd, let end = recordEnd(raw, start, deviceCount: deviceCount) else {
                throw reject("path record \(i) is malformed")
            }
            let name = UnsafeRawBufferPointer(rebasing: raw[(start + 6)..<(start + 6 + Int(raw.u32(start)))])
            guard i == 0 || ByteOrder.compare(previousName, name) < 0 else { throw reject("paths out of order at record \(i)") }
            previousName = name
            previousEnd = end
        }
        guard previousEnd == raw.count else { throw reject("bytes after the last record") }
        return IndexSnapshot(
            path: path, folderID: folderID, base: raw.baseAddress!, size: raw.count, generation: generation, covered: Int64(covered),
            live: Int64(bitPattern: raw.u64(40)), pathCount: count, devices: devices, checkpoints: checkpoints, pathTable: at)
    }

    /// Gives back the whole pages between two offsets of a mapping (they stay in the page cache).
    private static func release(_ raw: UnsafeRawBufferPointer, from: Int, to: Int) {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let start = (from + page - 1) / page * page
        let end = to / page * page
        guard end > start else { return }
        madvise(UnsafeMutableRawPointer(mutating: raw.baseAddress! + start), end - start, MADV_DONTNEED)
    }

    /// Where a path record that starts at `start` ends, or nil when it does not fit.
    private static func recordEnd(_ raw: UnsafeRawBufferPointer, _ start: Int, deviceCount: Int) -> Int? {
        guard start + 6 <= raw.count else { return nil }
        let nameLength = Int(raw.u32(start))
        let count = Int(raw.u16(start + 4))
        var at = start + 6 + nameLength
        guard count > 0, at <= raw.count, WireName.staysInsideFolder(bytes: UnsafeRawBufferPointer(rebasing: raw[(start + 6)..<at])) else { return nil }
        for _ in 0..<count {
            guard at + announcementFixedSize <= raw.count, Int(raw.u16(at)) < deviceCount else { return nil }
            at += announcementLength(raw, at: at)
            guard at <= raw.count else { return nil }
        }
        return at
    }

    private var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: byteCount) }

    private func recordStart(_ i: Int) -> Int { Int(bytes.u64(pathTable + 8 * i)) }

    /// Where path `i`'s record starts; for `pathCount`, where the records end.
    func recordOffset(_ i: Int) -> Int { i < pathCount ? recordStart(i) : byteCount }

    /// Paths of the snapshot whose records are copied into the next one as they are: their
    /// records lie one after the other, so the run is one span of bytes.
    struct RecordRun {
        let snapshot: IndexSnapshot
        let paths: Range<Int>
        /// Every record of the run, in path order.
        let bytes: UnsafeRawBufferPointer

        /// Each record's size, in path order.
        func forEachSize(_ body: (Int) -> Void) {
            var start = snapshot.recordOffset(paths.lowerBound)
            for i in paths {
                let end = snapshot.recordOffset(i + 1)
                body(end - start)
                start = end
            }
        }
    }

    /// The records of `paths` as one run, or nil when the table says they do not lie one after
    /// the other inside the file (a snapshot checked when opened never does).
    func run(_ paths: Range<Int>) -> RecordRun? {
        let start = recordOffset(paths.lowerBound)
        let end = recordOffset(paths.upperBound)
        guard start >= pathTable + 8 * pathCount, start < end, end <= byteCount else { return nil }
        var at = start
        for i in paths {
            let next = recordOffset(i + 1)
            guard next - at >= 6 + Int(bytes.u32(at)) else { return nil }
            at = next
        }
        return RecordRun(snapshot: self, paths: paths, bytes: UnsafeRawBufferPointer(rebasing: bytes[start..<end]))
    }

    /// The name of path `i`, as bytes.
    func nameBytes(_ i: Int) -> UnsafeRawBufferPointer {
        let start = recordStart(i)
        let length = Int(bytes.u32(start))
        return UnsafeRawBufferPointer(rebasing: bytes[(start + 6)..<(start + 6 + length)])
    }

    /// The name of path `i`.
    public func name(_ i: Int) -> String { String(decoding: nameBytes(i), as: UTF8.self) }

    /// The index of `name`, if the snapshot holds it.
    func find(_ name: String) -> Int? {
        var name = name
        return name.withUTF8 { key in
            let i = lowerBound(UnsafeRawBufferPointer(key))
            guard i < pathCount, ByteOrder.compare(nameBytes(i), UnsafeRawBufferPointer(key)) == 0 else { return nil }
            return i
        }
    }

    /// The first path not ordered before `key` (byte order).
    func lowerBound(_ key: UnsafeRawBufferPointer) -> Int {
        ByteOrder.lowerBound(of: key, count: pathCount, keyAt: nameBytes)
    }

    /// The same, for keys searched in ascending order: every path before `start` is known
    /// to be ordered before `key`.
    func lowerBound(_ key: UnsafeRawBufferPointer, from start: Int) -> Int {
        ByteOrder.lowerBound(of: key, from: start, count: pathCount, keyAt: nameBytes)
    }

    func lowerBound(_ key: String) -> Int {
        var key = key
        return key.withUTF8 { lowerBound(UnsafeRawBufferPointer($0)) }
    }

    /// The device numbers of path `i`'s announcements and their record lengths (a partial read:
    /// forgetting a device weighs what it held without decoding the rest).
    func devicesAndLengths(_ i: Int, _ body: (UInt16, Int32) -> Void) {
        let start = recordStart(i)
        let count = Int(bytes.u16(start + 4))
        var at = start + 6 + Int(bytes.u32(start))
        for _ in 0..<count {
            body(bytes.u16(at), Self.announcedRecordLength(bytes, at: at))
            at += Self.announcementLength(bytes, at: at)
        }
    }

    /// Path `i`'s only announcement, when it has one and it is not a symlink, in the parts a
    /// count needs: read in place, nothing decoded or allocated.
    func soleAnnouncement(_ i: Int) -> (device: UInt16, type: BEPFileInfoType, flags: UInt8, size: Int64, contentHash: ContentHash)? {
        let start = recordStart(i)
        guard bytes.u16(start + 4) == 1 else { return nil }
        let at = start + 6 + Int(bytes.u32(start))
        guard bytes.u32(at + 101) == 0, let type = BEPFileInfoType(rawValue: Int(Int32(bitPattern: bytes.u32(at + 2)))),
            type != .symlink, type != .symlinkFile, type != .symlinkDirectory
        else { return nil }
        return (
            bytes.u16(at), type, bytes[at + 6], Int64(bitPattern: bytes.u64(at + 27)),
            ContentHash(a: bytes.u64(at + 67), b: bytes.u64(at + 75), c: bytes.u64(at + 83), d: bytes.u64(at + 91))
        )
    }

    /// Path `i`'s announcements, each by device number, named `name`.
    func announcements(_ i: Int, name: String, skipping voided: Set<UInt16>) -> [(device: UInt16, entry: FileEntry)] {
        let start = recordStart(i)
        let count = Int(bytes.u16(start + 4))
        return Self.decodeAnnouncements(bytes, from: start + 6 + Int(bytes.u32(start)), count: count, name: name, skipping: voided)
    }

    /// The length of the announcement that starts at `at`.
    @inline(__always)
    static func announcementLength(_ bytes: UnsafeRawBufferPointer, at: Int) -> Int {
        announcementFixedSize + 16 * Int(bytes.u16(at + 99)) + Int(bytes.u32(at + 101))
    }

    /// `count` announcements one after the other from `at` (a record's, or a changed path's in
    /// a view, ``GlobalIndex/Changes``), each by device number, named `name`.
    static func decodeAnnouncements(
        _ bytes: UnsafeRawBufferPointer, from at: Int, count: Int, name: String, skipping voided: Set<UInt16>
    ) -> [(device: UInt16, entry: FileEntry)] {
        var at = at
        var list: [(device: UInt16, entry: FileEntry)] = []
        list.reserveCapacity(count)
        for _ in 0..<count {
            let device = bytes.u16(at)
            defer { at += announcementLength(bytes, at: at) }
            if !voided.isEmpty && voided.contains(device) { continue }
            list.append((device, decodeAnnouncement(bytes, at: at, name: name)))
        }
        return list
    }

    /// The announcement that starts at `at`, named `name` (its device is its first two bytes).
    static func decodeAnnouncement(_ bytes: UnsafeRawBufferPointer, at: Int, name: String) -> FileEntry {
        let counters = Int(bytes.u16(at + 99))
        let symlink = Int(bytes.u32(at + 101))
        let flags = bytes[at + 6]
        var version = BEPVector()
        if counters > 0 {
            version.counters.reserveCapacity(counters)
            for c in 0..<counters {
                var counter = BEPCounter()
                counter.id = bytes.u64(at + 105 + 16 * c)
                counter.value = bytes.u64(at + 113 + 16 * c)
                version.counters.append(counter)
            }
        }
        let symlinkStart = at + Self.announcementFixedSize + 16 * counters
        return FileEntry(
            name: name, type: BEPFileInfoType(rawValue: Int(Int32(bitPattern: bytes.u32(at + 2)))) ?? .file,
            size: Int64(bitPattern: bytes.u64(at + 27)), permissions: bytes.u32(at + 7),
            modifiedS: Int64(bitPattern: bytes.u64(at + 35)), modifiedNs: Int32(bitPattern: bytes.u32(at + 11)),
            modifiedBy: bytes.u64(at + 43), isDeleted: flags & 1 != 0, isInvalid: flags & 2 != 0,
            noPermissions: flags & 4 != 0, version: version, sequence: Int64(bitPattern: bytes.u64(at + 51)),
            blockSize: Int32(bitPattern: bytes.u32(at + 15)), blockCount: Int32(bitPattern: bytes.u32(at + 19)),
            symlinkTarget: symlink == 0 ? "" : String(decoding: bytes[symlinkStart..<(symlinkStart + symlink)], as: UTF8.self),
            contentHash: ContentHash(a: bytes.u64(at + 67), b: bytes.u64(at + 75), c: bytes.u64(at + 83), d: bytes.u64(at + 91)),
            recordOffset: Int64(bitPattern: bytes.u64(at + 59)), recordLength: Int32(bitPattern: bytes.u32(at + 23)))
    }

    /// The record length an announcement that starts at `at` names.
    @inline(__always)
    static func announcedRecordLength(_ bytes: UnsafeRawBufferPointer, at: Int) -> Int32 {
        Int32(bitPattern: bytes.u32(at + 23))
    }

    /// The sequence an announcement that starts at `at` names.
    @inline(__always)
    static func announcedSequence(_ bytes: UnsafeRawBufferPointer, at: Int) -> Int64 {
        Int64(bitPattern: bytes.u64(at + 51))
    }

    /// Gives the pages read so far back (they stay in the page cache): a long-running service
    /// between rounds.
    public func releasePages() {
        madvise(UnsafeMutableRawPointer(mutating: base), byteCount, MADV_DONTNEED)
    }

    /// The header's CRC of every byte.
    var checksum: UInt32 { bytes.u32(12) }

    /// Asks the kernel to read the slots and records of paths `start..<end` into the page cache
    /// (MADV_WILLNEED: the reads are queued, nothing waits for them), for a walk about to pass them.
    func readAhead(from start: Int, before end: Int) {
        guard start < end, end <= pathCount else { return }
        Self.willNeed(bytes, from: pathTable + 8 * start, to: pathTable + 8 * end)
        Self.willNeed(bytes, from: recordStart(start), to: end < pathCount ? recordStart(end) : byteCount)
    }

    /// In pieces of 128 KiB: the kernel reads at most the device's read-ahead window of what
    /// one call asks (128 KiB by default) and drops the rest.
    private static func willNeed(_ raw: UnsafeRawBufferPointer, from: Int, to: Int) {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let piece = 128 << 10
        var start = from / page * page
        while start < to {
            let length = Swift.min(piece, to - start)
            madvise(UnsafeMutableRawPointer(mutating: raw.baseAddress! + start), length, MADV_WILLNEED)
            start += length
        }
    }

    /// Gives back the pages of paths `start..<end` (their slots in the path table and their
    /// records), which a walk in path order has passed: a walk of every path (a plan, a
    /// refresh) otherwise leaves the whole snapshot resident, gigabytes at ten million paths.
    /// The pages stay in the page cache; reading them again maps them again.
    func releaseWalked(from start: Int = 0, before end: Int) {
        guard end > start else { return }
        let recordsStart = start == 0 ? pathTable + 8 * pathCount : recordStart(start)
        Self.release(bytes, from: pathTable + 8 * start, to: pathTable + 8 * end)
        Self.release(bytes, from: recordsStart, to: end < pathCount ? recordStart(end) : byteCount)
    }

    // MARK: - Writing

    /// Writes a snapshot of `index` (the view of the log's first `covered` bytes) to `path`:
    /// temporary file, fsync, rename, directory fsync.
    static func write(
        _ index: GlobalIndex, checkpoints: [(device: DeviceID, checkpoint: IndexLog.Checkpoint, recordLength: Int64)],
        to path: String, folderID: String, generation: UInt64, covered: Int64, live: Int64
    ) throws(IndexLogError) {
        let file = try ReplacementFile(replacing: path, temp: path + ".tmp")
        defer { file.abandon() }
        let devices = index.deviceTable
        let numbers = Dictionary(uniqueKeysWithValues: devices.enumerated().map { ($0.element, UInt16($0.offset)) })
        // Two walks of the view in name order: the records' sizes (the path table comes first),
        // then the records. Only the sizes are kept between them.
        let added = index.addedPathsInOrder()
        var sizes: [UInt32] = []
        index.forEachSnapshotRecord(added: added) { record in
            switch record {
            case .unchanged(let run): run.forEachSize { sizes.append(UInt32($0)) }
            case .encoded(let name, let list): sizes.append(UInt32(recordSize(name, list)))
            case .added(let name, let changes): sizes.append(UInt32(6 + name.utf8.count + changes.announcements.count))
            }
        }

        var head: [UInt8] = []
        head += magic
        head.appendLE(formatVersion)
        head.appendLE(UInt32(0))  // CRC, filled in below
        head.appendLE(UInt64(0))  // size, filled in below
        head.appendLE(generation)
        head.appendLE(UInt64(covered))
        head.appendLE(UInt64(live))
        head.appendLE(UInt64(sizes.count))
        head.appendLE(UInt32(devices.count))
        head.appendLE(UInt32(checkpoints.count))
        head.appendLE(UInt64(0))  // path table offset, filled in below
        let folder = Array(folderID.utf8)
        head.appendLE(UInt16(folder.count))
        head += folder
        while head.count % 8 != 0 { head.append(0) }
        for device in devices { head += device.bytes }
        for (device, checkpoint, length) in checkpoints.sorted(by: { $0.device < $1.device }) {
            head.appendLE(numbers[device]!)
            head += [UInt8](repeating: 0, count: 6)
            head.appendLE(checkpoint.indexID)
            head.appendLE(UInt64(bitPattern: checkpoint.maxSequence))
            head.appendLE(UInt64(bitPattern: length))
        }
        let table = head.count
        head.replaceLE(UInt64(table), at: 64)

        // Streamed through a bounded buffer: the path table (each record's offset, from the
        // records' sizes) then the records, the CRC carried along and put in the header last.
        // A snapshot of ten million paths is a gigabyte; it is never held in memory whole.
        let recordsStart = UInt64(table + 8 * sizes.count)
        let recordsSize = sizes.reduce(UInt64(0)) { $0 + UInt64($1) }
        let size = recordsStart + recordsSize
        head.replaceLE(size, at: 16)
        var crc: UInt32 = 0
        head.withUnsafeBytes { crc = CRC32.checksum(UnsafeRawBufferPointer(rebasing: $0[16...])) }
        try file.write(head)
        var chunk: [UInt8] = []
        chunk.reserveCapacity(Self.chunkSize + 4096)
        func flush() throws(IndexLogError) {
            crc = chunk.withUnsafeBytes { CRC32.checksum($0, seed: crc) }
            try file.write(chunk)
            chunk.removeAll(keepingCapacity: true)
        }
        var at = recordsStart
        for recordSize in sizes {
            chunk.appendLE(at)
            at += UInt64(recordSize)
            if chunk.count >= Self.chunkSize { try flush() }
        }
        sizes = []
        try index.forEachSnapshotRecord(added: added) { (record) throws(IndexLogError) in
            switch record {
            case .unchanged(let run):
                // A run is bounded (GlobalIndex.snapshotRunBytes): made room for, it fits the chunk.
                if chunk.count + run.bytes.count > Self.chunkSize { try flush() }
                chunk.append(contentsOf: run.bytes)
            case .encoded(let name, let list):
                encode(name, list, into: &chunk)
            case .added(let name, let changes):
                encode(name, count: changes.count, announcements: changes.announcements, into: &chunk)
            }
            if chunk.count >= Self.chunkSize { try flush() }
        }
        try flush()
        // The header promised the size the table's offsets were counted from.
        guard file.written == Int64(size) else {
            throw IndexLogError(.io, file: file.temp, "snapshot written with \(file.written) bytes, \(size) expected")
        }
        var stored: [UInt8] = []
        stored.appendLE(crc)
        try file.write(stored, at: 12)
        try file.commit()
    }
}

extension IndexSnapshot {
    /// Appends one path's record.
    static func encode(_ name: String, _ list: [(device: UInt16, entry: FileEntry)], into chunk: inout [UInt8]) {
        chunk.appendLE(UInt32(name.utf8.count))
        chunk.appendLE(UInt16(list.count))
        chunk.append(contentsOf: name.utf8)
        for (device, entry) in list { encodeAnnouncement(device, entry, into: &chunk) }
    }

    /// Appends one path's record whose announcements are already encoded (`count` of them).
    static func encode(_ name: String, count: Int, announcements: [UInt8], into chunk: inout [UInt8]) {
        chunk.appendLE(UInt32(name.utf8.count))
        chunk.appendLE(UInt16(count))
        chunk.append(contentsOf: name.utf8)
        chunk.append(contentsOf: announcements)
    }

    /// Appends one announcement (everything but the name, which is its path's).
    static func encodeAnnouncement(_ device: UInt16, _ entry: FileEntry, into chunk: inout [UInt8]) {
        chunk.appendLE(device)
        chunk.appendLE(UInt32(bitPattern: Int32(entry.type.rawValue)))
        chunk.append((entry.isDeleted ? 1 : 0) | (entry.isInvalid ? 2 : 0) | (entry.noPermissions ? 4 : 0))
        chunk.appendLE(entry.permissions)
        chunk.appendLE(UInt32(bitPattern: entry.modifiedNs))
        chunk.appendLE(UInt32(bitPattern: entry.blockSize))
        chunk.appendLE(UInt32(bitPattern: entry.blockCount))
        chunk.appendLE(UInt32(bitPattern: entry.recordLength))
        chunk.appendLE(UInt64(bitPattern: entry.size))
        chunk.appendLE(UInt64(bitPattern: entry.modifiedS))
        chunk.appendLE(entry.modifiedBy)
        chunk.appendLE(UInt64(bitPattern: entry.sequence))
        chunk.appendLE(UInt64(bitPattern: entry.recordOffset))
        chunk.appendLE(entry.contentHash.a)
        chunk.appendLE(entry.contentHash.b)
        chunk.appendLE(entry.contentHash.c)
        chunk.appendLE(entry.contentHash.d)
        chunk.appendLE(UInt16(entry.version.counters.count))
        chunk.appendLE(UInt32(entry.symlinkTarget.utf8.count))
        for counter in entry.version.counters {
            chunk.appendLE(counter.id)
            chunk.appendLE(counter.value)
        }
        chunk.append(contentsOf: entry.symlinkTarget.utf8)
    }

    /// The bytes of one encoded announcement.
    static func announcementSize(_ entry: FileEntry) -> Int {
        announcementFixedSize + 16 * entry.version.counters.count + entry.symlinkTarget.utf8.count
    }

    /// The bytes of one path's record: what ``write(_:checkpoints:to:folderID:generation:covered:live:)`` encodes.
    static func recordSize(_ name: String, _ list: [(device: UInt16, entry: FileEntry)]) -> Int {
        var size = 6 + name.utf8.count
        for (_, entry) in list { size += announcementSize(entry) }
        return size
    }
}

extension UnsafeRawBufferPointer {
    @inline(__always) func u16(_ at: Int) -> UInt16 { UInt16(littleEndian: loadUnaligned(fromByteOffset: at, as: UInt16.self)) }
    @inline(__always) func u32(_ at: Int) -> UInt32 { UInt32(littleEndian: loadUnaligned(fromByteOffset: at, as: UInt32.self)) }
    @inline(__always) func u64(_ at: Int) -> UInt64 { UInt64(littleEndian: loadUnaligned(fromByteOffset: at, as: UInt64.self)) }
}

extension Array where Element == UInt8 {
    mutating func appendLE<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }

    mutating func replaceLE<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        Swift.withUnsafeBytes(of: value.littleEndian) { bytes in
            for (i, byte) in bytes.enumerated() { self[offset + i] = byte }
        }
    }
}
