import Foundation
import KaitenProtocol
import SwiftProtobuf

#if canImport(Glibc)
import Glibc
#endif

/// The global index of one folder: an append-only log of what peers announced, replayed into a
/// ``GlobalIndex`` on open.
///
/// ```
/// header:  "KAITENIX" | format version (u32 BE) = 3 | generation (u64 BE) | folder-ID length
///          (u16 BE) | folder ID | CRC32 of the header bytes before it (u32 BE)
///   the generation is random, new with every file (creation, compaction): a snapshot
///   (``IndexSnapshot``) names the generation it was made from. Formats 1 and 2 had none;
///   a writable open rewrites them.
/// record:  | payload length (u32 BE) | CRC32 of kind + payload (u32 BE) | kind (u8) | payload |
///   kind 1 "replaced":   device ID (32) | index ID (u64 BE)
///            the device sent a full Index: everything it announced before is void
///   kind 2 "file":       device ID (32) | meta length (u32 BE) | FileInfo without blocks
///                        | FileInfo holding only the blocks (the rest of the payload);
///            the meta's `blocks_hash` is Kaiten's own (``BEPFileInfo/blocksHash(of:)``), not
///            the peer's: format 1 kept the peer's, which differs between syncthing 1.x and
///            2.x, and is converted on the first writable open
///   kind 3 "checkpoint": device ID (32) | index ID (u64 BE) | highest sequence (i64 BE)
///            what to send in the next ClusterConfig to get only deltas
/// ```
///
/// Durability: ``apply(device:indexID:files:isFullIndex:)`` writes a batch's records and its
/// checkpoint, then fsyncs, before it returns or changes the in-memory view. A crash loses at
/// most the batch being written; the checkpoint on disk never claims more than the records
/// before it, so the next sync asks for everything after it again. On open, a torn last
/// record is cut off with a warning; damage anywhere else is an error naming the byte offset.
///
/// Snapshot: a writer keeps the view up to some byte of the log in `PATH.snap` (at compaction,
/// and from ``maintain(eager:warn:)`` once enough was appended after it); an open then reads the snapshot
/// in place and replays only the records after it. A snapshot that is damaged, torn, or made
/// from another generation of the log is not used: the log is replayed in full and a writer
/// writes a new one.
///
/// Sharing: any number of processes may hold a log open for writing. A writer takes the
/// exclusive lock for one batch at a time (``exclusively(_:)``): it first reads what others
/// appended since (or the whole file again, after another writer's compaction renamed a new
/// one over the path), then appends, then lets go. A long-running writer (`kaiten run`) so
/// keeps nobody out for longer than a batch, and the one-shot verbs beside it write safely.
public final class IndexLog {
    public static let magic: [UInt8] = Array("KAITENIX".utf8)
    public static let formatVersion: UInt32 = 3
    /// The format of the file as read (1 or 2 until a writable open converts it).
    var fileFormat: UInt32 = formatVersion
    /// This file's generation (0 for formats 1 and 2, which had none).
    public internal(set) var generation: UInt64 = 0
    /// Where the snapshot of this log lives.
    public var snapshotPath: String { Self.snapshotPath(of: path) }
    public static func snapshotPath(of logPath: String) -> String { logPath + ".snap" }
    /// How many bytes of the log the view's snapshot covers (0: none used).
    public internal(set) var snapshotCovers: Int64 = 0
    /// Why the snapshot beside the log was not used on open, if one was there and was not.
    public internal(set) var snapshotRejection: String?

    enum Kind: UInt8 {
        case replaced = 1
        case file = 2
        case checkpoint = 3
    }

    /// What we hold of one peer's index.
    public struct Checkpoint: Sendable, Equatable {
        public var indexID: UInt64
        public var maxSequence: Int64
    }

    public let path: String
    public let folderID: String
    public internal(set) var index = GlobalIndex()
    /// How concurrent versions are ordered in ``index`` (the peers' generation's rule).
    public var conflictRule: ConflictRule {
        get { index.conflictRule }
        set { index.conflictRule = newValue }
    }
    public internal(set) var checkpoints: [DeviceID: Checkpoint] = [:]
    /// Bytes in the file, and bytes still backing the current state.
    public internal(set) var fileSize: Int64 = 0
    public internal(set) var liveBytes: Int64 = 0
    /// Records read on open.
    public internal(set) var recordsReplayed = 0
    /// The device of the last record replayed (the next one is most likely the same).
    var lastReplayedDevice: DeviceID?

    var fd: Int32 = -1
    var isReadOnly = false
    /// A reader that did not get the shared lock in time: it reads a copy, up to the last batch.
    var readsUnlocked = false
    /// How deep in ``exclusively(_:)`` this writer is: it holds the lock while above 0.
    var lockDepth = 0
    var headerLength: Int64 = 0
    var checkpointRecordLength: [DeviceID: Int64] = [:]

    /// The share of the file that still backs the current state.
    public var liveFraction: Double { fileSize == 0 ? 1 : Double(liveBytes) / Double(fileSize) }

    init(path: String, folderID: String) {
        self.path = path
        self.folderID = folderID
    }

    deinit {
        if fd >= 0 { Glibc.close(fd) }
    }

    /// Closes the file (and releases its lock); the view stays readable, appending does not work.
    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    /// Opens (or creates) the log and replays it.
    /// - Parameter warn: told about a torn tail that was cut off.
    /// - Throws: ``IndexLogError`` naming the file and offset of damage that is not a torn tail.
    /// - Parameter readOnly: open for reading only (`ls`, `status`, a server's view): no file is
    ///   created, a torn tail is skipped rather than cut, and the shared lock is held only
    ///   while the log is read: a long-lived reader (`kaiten serve`) never keeps a writer out.
    ///   Its view stays whole after that: a writer only appends past it, and a compaction
    ///   renames a new file over the path while the reader keeps the old one open.
    public static func open(
        path: String, folderID: String, readOnly: Bool = false, warn: (String) -> Void = { _ in }
    ) throws(IndexLogError) -> IndexLog {
        let log = IndexLog(path: path, folderID: folderID)
        log.isReadOnly = readOnly
        if readOnly && !FileManager.default.fileExists(atPath: path) { return log }
        let fd = Glibc.open(path, (readOnly ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw IndexLogError(.io, file: path, "cannot open: \(String(cString: strerror(errno)))") }
        log.fd = fd
        // A writer reads the log under the exclusive lock (it may cut a torn tail, which only a
        // writer that was killed mid-batch leaves) and lets it go after, as after each batch.
        // A reader takes the shared lock, so that it never sees half a batch (a full index's
        // "replaced" record without the entries after it) nor a tail a writer cuts back. Writers
        // hold the lock one batch at a time, so this is a short wait; a writer that holds it for
        // longer (compacting a very big log) is not waited for: the reader copies the file and
        // reads it up to its last whole batch.
        let locked = readOnly ? lockShared(fd) : lockExclusively(fd)
        guard locked || readOnly else {
            throw log.heldTooLong()
        }
        log.readsUnlocked = !locked
        // A compaction that did not reach its rename leaves its temporary file: the old log is
        // whole. Only under the lock: another writer's compaction may be writing it right now.
        if !readOnly { unlink(path + ".compact") }
        var info = stat()
        fstat(fd, &info)
        if info.st_size == 0 && readOnly {
            // Created a moment ago by a writer that has not written its header yet: empty.
        } else if info.st_size == 0 {
            try log.writeHeader()
        } else {
            try log.replayUsingSnapshot(size: Int64(info.st_size), warn: warn)
            // Format 1 stored each peer's own blocks_hash: rewrite it once with Kaiten's; format
            // 2 had no generation for a snapshot to name.
            if log.fileFormat < formatVersion && !readOnly { try log.compact(rewritingRecords: log.fileFormat == 1, warn: warn) }
            // A writer that had to replay everything (no snapshot, or one it could not use: a
            // crash between a compaction and its snapshot leaves either) writes one for the
            // next open, when the log is big enough to want it.
            if !log.index.hasSnapshot && !readOnly && log.fileFormat == formatVersion { log.writeSnapshotIfLarge(warn: warn) }
        }
        flock(log.fd, LOCK_UN)
        return log
    }

    /// Runs `body` holding the exclusive lock, with the view first brought up to what other
    /// writers appended: appends made in `body` (``apply(device:indexID:files:isFullIndex:)``)
    /// and the decisions they depend on (this device's next sequence number) see the whole log.
    /// Nested calls take the lock once.
    public func exclusively<T>(_ body: () throws -> T) throws -> T {
        let took = try lockForBatch()
        defer { if took { unlockAfterBatch() } }
        return try body()
    }

    /// Brings a writer's view up to what other writers appended (it moves on its own only at
    /// this writer's batches).
    public func catchUp() throws(IndexLogError) {
        let took = try lockForBatch()
        if took { unlockAfterBatch() }
    }

    /// Takes the lock and catches up, unless already held; returns whether it took it.
    func lockForBatch() throws(IndexLogError) -> Bool {
        precondition(!isReadOnly, "writing to a read-only index log")
        if lockDepth > 0 {
            lockDepth += 1
            return false
        }
        guard fd >= 0 else { throw IndexLogError(.io, file: path, "the log was closed") }
        guard Self.lockExclusively(fd) else {
            throw heldTooLong()
        }
        lockDepth = 1
        do {
            try catchUpHoldingLock()
        } catch {
            unlockAfterBatch()
            throw error
        }
        return true
    }

    func unlockAfterBatch() {
        lockDepth = 0
        if fd >= 0 { flock(fd, LOCK_UN) }
    }

    /// Under the lock: reads what other writers appended since this view was made, or reads
    /// the file at the path afresh when it is another one than the view's (a compaction
    /// renamed a new file over it, `index rebuild` removed it) or it shrank.
    func catchUpHoldingLock() throws(IndexLogError) {
        var held = stat()
        var current = stat()
        fstat(fd, &held)
        let samePath = stat(path, &current) == 0 && current.st_ino == held.st_ino && current.st_dev == held.st_dev
        if samePath && Int64(held.st_size) == fileSize { return }
        if samePath && Int64(held.st_size) > fileSize {
            try replay(size: Int64(held.st_size), from: fileSize, warn: { _ in })
            return
        }
        // Another file, or this one cut back: read the one at the path from the start.
        while true {
            let fresh = try IndexLog.open(path: path, folderID: folderID)
            Glibc.close(fd)
            adopt(fresh)
            guard Self.lockExclusively(fd) else {
                throw heldTooLong()
            }
            // Between that open and this lock another writer may have appended again.
            fstat(fd, &held)
            guard stat(path, &current) == 0, current.st_ino == held.st_ino else {
                flock(fd, LOCK_UN)
                continue
            }
            if Int64(held.st_size) > fileSize { try replay(size: Int64(held.st_size), from: fileSize, warn: { _ in }) }
            return
        }
    }

    /// Brings a long-lived reader's view (``open(path:folderID:readOnly:warn:)`` with `readOnly`)
    /// up to the file at its path: what writers appended since is read, and only that; a file
    /// replaced since (a compaction, `index rebuild`) or created since is read afresh. The
    /// shared lock is held while reading, so the view never takes half a batch. Returns false,
    /// with the view unchanged, when a writer holds the lock for too long (compacting a very
    /// big log): the next refresh reads it.
    @discardableResult
    public func refresh(warn: (String) -> Void = { _ in }) throws(IndexLogError) -> Bool {
        precondition(isReadOnly, "refresh is for read-only views; writers catch up in exclusively(_:)")
        var current = stat()
        guard stat(path, &current) == 0 else {
            // Removed (`index rebuild`, `folder rm`): nothing is known any more.
            if fd >= 0 || fileSize > 0 {
                close()
                adopt(IndexLog(path: path, folderID: folderID))
            }
            return true
        }
        var held = stat()
        // A writer wrote a snapshot that covers much of what this view holds in memory (a
        // service's view opened before a big sync): read the view afresh from it.
        let newerSnapshot = bytesAfterSnapshot >= Self.snapshotThreshold && snapshotFileCovers() > snapshotCovers
        if fd >= 0, fstat(fd, &held) == 0, held.st_ino == current.st_ino, held.st_dev == current.st_dev,
            Int64(current.st_size) >= fileSize, !readsUnlocked, !newerSnapshot
        {
            if Int64(current.st_size) == fileSize { return true }
            guard Self.lockShared(fd) else { return false }
            defer { flock(fd, LOCK_UN) }
            fstat(fd, &held)
            if Int64(held.st_size) > fileSize { try replay(size: Int64(held.st_size), from: fileSize, warn: warn) }
            return true
        }
        let fresh = try IndexLog.open(path: path, folderID: folderID, readOnly: true, warn: warn)
        if fresh.readsUnlocked { return false }
        if fd >= 0 { Glibc.close(fd) }
        adopt(fresh)
        return true
    }

    /// Takes over the descriptor and view of a log just opened on the same path.
    func adopt(_ fresh: IndexLog) {
        fd = fresh.fd
        fresh.fd = -1
        let rule = index.conflictRule
        index = fresh.index
        index.conflictRule = rule
        checkpoints = fresh.checkpoints
        fileSize = fresh.fileSize
        liveBytes = fresh.liveBytes
        checkpointRecordLength = fresh.checkpointRecordLength
        headerLength = fresh.headerLength
        fileFormat = fresh.fileFormat
        generation = fresh.generation
        snapshotCovers = fresh.snapshotCovers
        snapshotRejection = fresh.snapshotRejection
    }

    /// A flock belongs to the open file description, which a child forked by this process
    /// shares until its exec closes it (O_CLOEXEC). A lock that is busy for a moment may be
    /// such a child's copy of our own earlier descriptor, or another writer's batch: both end
    /// soon, so the lock is waited for, up to 10 s (a reader holds its shared lock only while
    /// it reads, a writer its exclusive one for one batch).
    static func lockExclusively(_ fd: Int32) -> Bool { lock(fd, LOCK_EX, for: 500) }

    /// Up to 2 s; past that a reader reads a copy instead (see `open`).
    static func lockShared(_ fd: Int32) -> Bool { lock(fd, LOCK_SH, for: 100) }

    /// Tries `operation` every 20 ms, `tries` times.
    static func lock(_ fd: Int32, _ operation: Int32, for tries: Int) -> Bool {
        for _ in 0..<tries {
            if flock(fd, operation | LOCK_NB) == 0 { return true }
            guard errno == EWOULDBLOCK else { return false }
            usleep(20_000)
        }
        return false
    }

    func heldTooLong() -> IndexLogError {
        IndexLogError(.io, file: path, "in use by another kaiten process for more than 10 s (try again when it has finished)")
    }

    // MARK: - Appending

    /// Appends one batch from `device` and makes it durable, then updates the view.
    /// - Parameters:
    ///   - indexID: the device's index ID for this folder, from its ClusterConfig.
    ///   - isFullIndex: an `Index` message: everything earlier from this device is void.
    public func apply(device: DeviceID, indexID: UInt64, files: [BEPFileInfo], isFullIndex: Bool) throws(IndexLogError) {
        precondition(!isReadOnly, "apply on a read-only index log")
        let took = try lockForBatch()
        defer { if took { unlockAfterBatch() } }
        // Names were checked when they arrived; the log checks again so that nothing that
        // escapes the folder is ever stored, whoever calls it, before any of the batch is written.
        if let bad = files.first(where: { !WireName.staysInsideFolder($0.name) }) {
            throw IndexLogError(.io, file: path, "refusing an entry from \(device.shortDescription) whose name escapes the folder: \(bad.name)")
        }
        // The batch goes to the end of the log in chunks as it is encoded, fsynced once at the
        // end (a full index's 50,000 entries are never one buffer in memory); a failure takes
        // every chunk back.
        var batch = PendingAppend(base: fileSize, reserving: files.count * 256)
        var recordStarts: [(offset: Int, length: Int)] = []
        var keptTombstones: [(entry: FileEntry, offset: Int, length: Int)] = []
        if isFullIndex {
            var payload = device.bytes
            payload.appendBigEndian(indexID)
            Self.appendRecord(.replaced, payload, to: &batch.buffer)
            // Syncthing 2.x forgets deletions after ~15 months, so a full index may no longer
            // list a file it once announced deleted. Kaiten keeps such a tombstone (written again
            // after the "replaced" record): otherwise an older live copy on a peer that was away
            // would become the global version again and the deleted file would come back. A
            // file re-created later has a newer version and wins over it as usual.
            let mentioned = Set(files.lazy.map(\.name))
            var old: [FileEntry] = []
            index.forEachEntry { _, owner, entry in
                if owner == device && entry.isDeleted && !mentioned.contains(entry.name) { old.append(entry) }
            }
            for entry in old.sorted(by: { $0.name < $1.name }) {
                var record = [UInt8](repeating: 0, count: Int(entry.recordLength))
                let n = record.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(entry.recordOffset)) }
                guard n == record.count, entry.recordLength > 0 else { continue }
                keptTombstones.append((entry, batch.offset, record.count))
                batch.buffer += record
                try spillIfLarge(&batch)
            }
        }
        var maxSequence = isFullIndex ? 0 : (checkpoints[device]?.indexID == indexID ? checkpoints[device]?.maxSequence ?? 0 : 0)
        for file in files {
            let start = batch.offset
            do {
                try Self.appendFileRecord(device: device, file: file, to: &batch.buffer)
            } catch {
                _ = ftruncate(fd, off_t(batch.base))
                throw IndexLogError(.io, file: path, "cannot encode \(file.name): \(error)")
            }
            recordStarts.append((start, batch.offset - start))
            maxSequence = max(maxSequence, file.sequence)
            try spillIfLarge(&batch)
        }
        let checkpointStart = batch.offset
        var checkpointPayload = device.bytes
        checkpointPayload.appendBigEndian(indexID)
        checkpointPayload.appendBigEndian(UInt64(bitPattern: maxSequence))
        Self.appendRecord(.checkpoint, checkpointPayload, to: &batch.buffer)
        let checkpointLength = batch.offset - checkpointStart

        let base = try appendDurably(batch)

        // The batch is on disk; now the view.
        if isFullIndex { forget(device) }
        for kept in keptTombstones {
            var entry = kept.entry
            entry.recordOffset = base + Int64(kept.offset)
            record(entry, from: device)
        }
        for (file, (offset, length)) in zip(files, recordStarts) {
            record(FileEntry(file, recordOffset: base + Int64(offset), recordLength: Int32(length)), from: device)
        }
        setCheckpoint(device, Checkpoint(indexID: indexID, maxSequence: maxSequence), length: Int64(checkpointLength))
        // Each path new to the view was searched for in the snapshot, and a search maps what it
        // touches (a large folio of the page cache at a touch): given back after each batch, or
        // a full index's intake held most of the snapshot resident (82 of its 150 MB at a
        // million paths from syncthing 1.19.2, half the process's peak).
        index.releaseSnapshotPages()
    }

    /// Drops everything a device announced (it no longer shares the folder): its entries stop
    /// counting in the global view, and a later sync with it starts from a full index.
    public func removeDevice(_ device: DeviceID) throws(IndexLogError) {
        precondition(!isReadOnly, "removeDevice on a read-only index log")
        let took = try lockForBatch()
        defer { if took { unlockAfterBatch() } }
        guard checkpoints[device] != nil || index.hasEntries(from: device) else { return }
        var buffer: [UInt8] = []
        var payload = device.bytes
        payload.appendBigEndian(UInt64(0))
        Self.appendRecord(.replaced, payload, to: &buffer)
        try appendDurably(buffer)
        forget(device)
        dropCheckpoint(device)
    }

    /// Writes `buffer` at the end and fsyncs it; on failure the file is cut back to where it
    /// was. Returns the offset it was written at.
    @discardableResult
    func appendDurably(_ buffer: [UInt8]) throws(IndexLogError) -> Int64 {
        try appendDurably(PendingAppend(base: fileSize, buffer: buffer))
    }

    /// A batch being appended: the bytes already written after `base`, and the rest.
    struct PendingAppend {
        /// How much of a batch is encoded before it is written (a test makes it small).
        @TaskLocal static var chunk = 1 << 20
        let base: Int64
        var written = 0
        var buffer: [UInt8]

        init(base: Int64, buffer: [UInt8]) {
            self.base = base
            self.buffer = buffer
        }

        init(base: Int64, reserving bytes: Int) {
            self.base = base
            buffer = []
            buffer.reserveCapacity(min(bytes, Self.chunk + (64 << 10)))
        }

        /// Where the next byte appended to `buffer` lands, from `base`.
        var offset: Int { written + buffer.count }
    }

    /// Writes what a pending batch holds once it passes a chunk (at its place, not yet fsynced).
    func spillIfLarge(_ batch: inout PendingAppend) throws(IndexLogError) {
        guard batch.buffer.count >= PendingAppend.chunk else { return }
        do {
            try writeAll(batch.buffer, at: batch.base + Int64(batch.written))
        } catch {
            _ = ftruncate(fd, off_t(batch.base))
            throw error
        }
        batch.written += batch.buffer.count
        batch.buffer.removeAll(keepingCapacity: true)
    }

    /// Writes the rest of a batch and fsyncs it; on failure the log ends where it did before.
    func appendDurably(_ batch: PendingAppend) throws(IndexLogError) -> Int64 {
        do {
            try writeAll(batch.buffer, at: batch.base + Int64(batch.written))
        } catch {
            _ = ftruncate(fd, off_t(batch.base))
            throw error
        }
        guard fsync(fd) == 0 else {
            _ = ftruncate(fd, off_t(batch.base))
            throw IndexLogError(.io, file: path, "fsync failed: \(String(cString: strerror(errno)))")
        }
        fileSize = batch.base + Int64(batch.offset)
        return batch.base
    }

    /// The block list of an entry, read from the log.
    public func blocks(of entry: FileEntry) throws(IndexLogError) -> [BEPBlockInfo] {
        var record = [UInt8](repeating: 0, count: Int(entry.recordLength))
        let n = record.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(entry.recordOffset)) }
        guard n == record.count else {
            throw IndexLogError(.io, file: path, offset: entry.recordOffset, "cannot read the record of \(entry.name)")
        }
        let payload = record[9...]
        guard record[8] == Kind.file.rawValue, payload.count >= 36 else {
            throw IndexLogError(.corruptRecord, file: path, offset: entry.recordOffset, "not a file record")
        }
        let metaLength = Int(payload.readBE32(at: payload.startIndex + 32))
        let blocksStart = payload.startIndex + 36 + metaLength
        guard blocksStart <= payload.endIndex else {
            throw IndexLogError(.corruptRecord, file: path, offset: entry.recordOffset, "bad meta length")
        }
        do {
            return try BEPFileInfo(serializedBytes: Array(payload[blocksStart...])).blocks
        } catch {
            throw IndexLogError(.corruptRecord, file: path, offset: entry.recordOffset, "blocks do not decode: \(error)")
        }
    }

    /// An entry as announced, block list included, read from the log.
    public func fileInfo(of entry: FileEntry) throws(IndexLogError) -> BEPFileInfo {
        try fileInfo(recordAt: entry.recordOffset, length: entry.recordLength, name: entry.name)
    }

    /// The entry of the file record at `offset`, block list included.
    func fileInfo(recordAt offset: Int64, length: Int32, name: String? = nil) throws(IndexLogError) -> BEPFileInfo {
        var record = [UInt8](repeating: 0, count: Int(length))
        let n = record.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(offset)) }
        guard n == record.count, record.count >= 9 + 36, record[8] == Kind.file.rawValue else {
            throw IndexLogError(.io, file: path, offset: offset, "cannot read the record \(name.map { "of \($0)" } ?? "of an entry")")
        }
        let payload = record[9...]
        let metaLength = Int(payload.readBE32(at: payload.startIndex + 32))
        let metaStart = payload.startIndex + 36
        guard metaStart + metaLength <= payload.endIndex else {
            throw IndexLogError(.corruptRecord, file: path, offset: offset, "bad meta length")
        }
        do {
            var file = try BEPFileInfo(serializedBytes: Array(payload[metaStart..<(metaStart + metaLength)]))
            file.blocks = try BEPFileInfo(serializedBytes: Array(payload[(metaStart + metaLength)...])).blocks
            return file
        } catch {
            throw IndexLogError(.corruptRecord, file: path, offset: offset, "record does not decode: \(error)")
        }
    }

    /// The log size before which ``maintain(warn:)`` does not try again after a failure.
    var maintenanceRetryAt: Int64 = 0

}

extension Collection where Element == UInt8, Index == Int {
    func readBE32(at i: Int) -> UInt32 {
        UInt32(self[i]) << 24 | UInt32(self[i + 1]) << 16 | UInt32(self[i + 2]) << 8 | UInt32(self[i + 3])
    }

    func readBE64(at i: Int) -> UInt64 {
        (0..<8).reduce(UInt64(0)) { $0 << 8 | UInt64(self[i + $1]) }
    }
}
