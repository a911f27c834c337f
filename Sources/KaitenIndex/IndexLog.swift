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
    private var fileFormat: UInt32 = formatVersion
    /// This file's generation (0 for formats 1 and 2, which had none).
    public private(set) var generation: UInt64 = 0
    /// Where the snapshot of this log lives.
    public var snapshotPath: String { Self.snapshotPath(of: path) }
    public static func snapshotPath(of logPath: String) -> String { logPath + ".snap" }
    /// How many bytes of the log the view's snapshot covers (0: none used).
    public private(set) var snapshotCovers: Int64 = 0
    /// Why the snapshot beside the log was not used on open, if one was there and was not.
    public private(set) var snapshotRejection: String?

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
    public private(set) var index = GlobalIndex()
    /// How concurrent versions are ordered in ``index`` (the peers' generation's rule).
    public var conflictRule: ConflictRule {
        get { index.conflictRule }
        set { index.conflictRule = newValue }
    }
    public private(set) var checkpoints: [DeviceID: Checkpoint] = [:]
    /// Bytes in the file, and bytes still backing the current state.
    public private(set) var fileSize: Int64 = 0
    public private(set) var liveBytes: Int64 = 0
    /// Records read on open.
    public private(set) var recordsReplayed = 0
    /// The device of the last record replayed (the next one is most likely the same).
    private var lastReplayedDevice: DeviceID?

    private var fd: Int32 = -1
    private var isReadOnly = false
    /// A reader that did not get the shared lock in time: it reads a copy, up to the last batch.
    private var readsUnlocked = false
    /// How deep in ``exclusively(_:)`` this writer is: it holds the lock while above 0.
    private var lockDepth = 0
    private var headerLength: Int64 = 0
    private var checkpointRecordLength: [DeviceID: Int64] = [:]

    /// The share of the file that still backs the current state.
    public var liveFraction: Double { fileSize == 0 ? 1 : Double(liveBytes) / Double(fileSize) }

    private init(path: String, folderID: String) {
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
    private func lockForBatch() throws(IndexLogError) -> Bool {
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

    private func unlockAfterBatch() {
        lockDepth = 0
        if fd >= 0 { flock(fd, LOCK_UN) }
    }

    /// Under the lock: reads what other writers appended since this view was made, or reads
    /// the file at the path afresh when it is another one than the view's (a compaction
    /// renamed a new file over it, `index rebuild` removed it) or it shrank.
    private func catchUpHoldingLock() throws(IndexLogError) {
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
    private func adopt(_ fresh: IndexLog) {
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
    private static func lockExclusively(_ fd: Int32) -> Bool { lock(fd, LOCK_EX, for: 500) }

    /// Up to 2 s; past that a reader reads a copy instead (see `open`).
    private static func lockShared(_ fd: Int32) -> Bool { lock(fd, LOCK_SH, for: 100) }

    /// Tries `operation` every 20 ms, `tries` times.
    private static func lock(_ fd: Int32, _ operation: Int32, for tries: Int) -> Bool {
        for _ in 0..<tries {
            if flock(fd, operation | LOCK_NB) == 0 { return true }
            guard errno == EWOULDBLOCK else { return false }
            usleep(20_000)
        }
        return false
    }

    private func heldTooLong() -> IndexLogError {
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
        var buffer: [UInt8] = []
        buffer.reserveCapacity(files.count * 256)
        var recordStarts: [(offset: Int, length: Int)] = []
        var keptTombstones: [(entry: FileEntry, offset: Int, length: Int)] = []
        if isFullIndex {
            var payload = device.bytes
            payload.appendBigEndian(indexID)
            Self.appendRecord(.replaced, payload, to: &buffer)
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
                keptTombstones.append((entry, buffer.count, record.count))
                buffer += record
            }
        }
        // Names were checked when they arrived; the log checks again so that nothing that
        // escapes the folder is ever stored, whoever calls it.
        if let bad = files.first(where: { !WireName.staysInsideFolder($0.name) }) {
            throw IndexLogError(.io, file: path, "refusing an entry from \(device.shortDescription) whose name escapes the folder: \(bad.name)")
        }
        var maxSequence = isFullIndex ? 0 : (checkpoints[device]?.indexID == indexID ? checkpoints[device]?.maxSequence ?? 0 : 0)
        for file in files {
            let start = buffer.count
            do {
                try Self.appendFileRecord(device: device, file: file, to: &buffer)
            } catch {
                throw IndexLogError(.io, file: path, "cannot encode \(file.name): \(error)")
            }
            recordStarts.append((start, buffer.count - start))
            maxSequence = max(maxSequence, file.sequence)
        }
        let checkpointStart = buffer.count
        var checkpointPayload = device.bytes
        checkpointPayload.appendBigEndian(indexID)
        checkpointPayload.appendBigEndian(UInt64(bitPattern: maxSequence))
        Self.appendRecord(.checkpoint, checkpointPayload, to: &buffer)

        let base = try appendDurably(buffer)

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
        setCheckpoint(device, Checkpoint(indexID: indexID, maxSequence: maxSequence), length: Int64(buffer.count - checkpointStart))
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
    private func appendDurably(_ buffer: [UInt8]) throws(IndexLogError) -> Int64 {
        let base = fileSize
        try writeAll(buffer, at: base)
        guard fsync(fd) == 0 else {
            _ = ftruncate(fd, off_t(base))
            throw IndexLogError(.io, file: path, "fsync failed: \(String(cString: strerror(errno)))")
        }
        fileSize = base + Int64(buffer.count)
        return base
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
        var record = [UInt8](repeating: 0, count: Int(entry.recordLength))
        let n = record.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(entry.recordOffset)) }
        guard n == record.count, record.count >= 9 + 36, record[8] == Kind.file.rawValue else {
            throw IndexLogError(.io, file: path, offset: entry.recordOffset, "cannot read the record of \(entry.name)")
        }
        let payload = record[9...]
        let metaLength = Int(payload.readBE32(at: payload.startIndex + 32))
        let metaStart = payload.startIndex + 36
        guard metaStart + metaLength <= payload.endIndex else {
            throw IndexLogError(.corruptRecord, file: path, offset: entry.recordOffset, "bad meta length")
        }
        do {
            var file = try BEPFileInfo(serializedBytes: Array(payload[metaStart..<(metaStart + metaLength)]))
            file.blocks = try BEPFileInfo(serializedBytes: Array(payload[(metaStart + metaLength)...])).blocks
            return file
        } catch {
            throw IndexLogError(.corruptRecord, file: path, offset: entry.recordOffset, "record does not decode: \(error)")
        }
    }

    // MARK: - Compaction

    /// Whether dead records outweigh live ones (and the file is big enough to bother).
    public var shouldCompact: Bool { fileSize > 1 << 20 && liveBytes * 2 < fileSize }

    /// Rewrites the log with only live records: a new file, fsynced, renamed over the old one.
    /// A crash at any moment leaves either the old log or the new one, whole.
    /// - Parameter warn: told when the snapshot of the compacted log cannot be written (the
    ///   compaction itself stands).
    public func compact(warn: (String) -> Void = { _ in }) throws(IndexLogError) {
        let took = try lockForBatch()
        defer { if took { unlockAfterBatch() } }
        try compact(rewritingRecords: false, warn: warn)
    }

    /// - Parameter rewritingRecords: re-encode every file record in the current format (a
    ///   format-1 log's records carry the peer's blocks hash) instead of copying it.
    private func compact(rewritingRecords: Bool, warn: (String) -> Void) throws(IndexLogError) {
        let out = try ReplacementFile(replacing: path, temp: path + ".compact")
        defer { out.abandon() }
        var buffer = Self.header(folderID: folderID, generation: Self.newGeneration())
        func flush() throws(IndexLogError) {
            try out.write(buffer)
            buffer.removeAll(keepingCapacity: true)
        }
        var live: [(String, DeviceID, FileEntry)] = []
        index.forEachEntry { live.append(($0, $1, $2)) }
        live.sort { ($0.0, $0.1) < ($1.0, $1.1) }
        for (_, device, entry) in live {
            do {
                var record = [UInt8](repeating: 0, count: Int(entry.recordLength))
                let n = record.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(entry.recordOffset)) }
                guard n == record.count else { throw IndexLogError(.io, file: path, offset: entry.recordOffset, "read failed") }
                if rewritingRecords {
                    let file: BEPFileInfo
                    do {
                        file = try Self.decodeFileRecord(record)
                        try Self.appendFileRecord(device: device, file: file, to: &buffer)
                    } catch {
                        throw IndexLogError(.corruptRecord, file: path, offset: entry.recordOffset, "file record does not decode")
                    }
                } else {
                    buffer += record
                }
                if buffer.count > 4 << 20 { try flush() }
            }
        }
        for (device, checkpoint) in checkpoints.sorted(by: { $0.key < $1.key }) {
            var payload = device.bytes
            payload.appendBigEndian(checkpoint.indexID)
            payload.appendBigEndian(UInt64(bitPattern: checkpoint.maxSequence))
            Self.appendRecord(.checkpoint, payload, to: &buffer)
        }
        try flush()
        try out.commit()
        // Re-read the new file so every entry points at its new offset. Closing drops the lock
        // on the old inode (a writer waiting on it then finds the path moved on); a batch in
        // progress takes the new one's and reads what another writer appended in between.
        Glibc.close(fd)
        fd = -1
        unlink(snapshotPath)
        adopt(try IndexLog.open(path: path, folderID: folderID, warn: warn))
        if lockDepth > 0 {
            guard Self.lockExclusively(fd) else {
                throw heldTooLong()
            }
            try catchUpHoldingLock()
            writeSnapshotIfLarge(warn: warn)
        }
    }

    // MARK: - Snapshot

    /// Reads the header; with a usable snapshot, takes the view from it and replays the records
    /// after it; otherwise replays the whole log.
    private func replayUsingSnapshot(size: Int64, warn: (String) -> Void) throws(IndexLogError) {
        var head = [UInt8](repeating: 0, count: Int(min(size, 1 << 17)))
        let n = head.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n >= 0 else { throw IndexLogError(.io, file: path, "cannot read: \(String(cString: strerror(errno)))") }
        let snapshot: IndexSnapshot?
        do {
            // A header that does not parse is reported by the full replay below.
            try head.withUnsafeBufferPointer { (bytes: UnsafeBufferPointer<UInt8>) throws(IndexLogError) in
                try readHeader(UnsafeBufferPointer(rebasing: bytes[0..<n]))
            }
            snapshot = generation == 0 ? nil : try IndexSnapshot.open(path: snapshotPath, folderID: folderID, generation: generation, logSize: size)
        } catch let rejection as IndexSnapshot.Rejection {
            snapshotRejection = rejection.description
            warn("\(rejection.description); reading the whole index log instead")
            snapshot = nil
        } catch {
            snapshot = nil
        }
        guard let snapshot, snapshot.coveredLogBytes >= headerLength else {
            try replay(size: size, warn: warn)
            return
        }
        let rule = index.conflictRule
        index = GlobalIndex(snapshot: snapshot)
        index.conflictRule = rule
        for (device, checkpoint, length) in snapshot.checkpoints {
            checkpoints[device] = checkpoint
            checkpointRecordLength[device] = length
        }
        liveBytes = snapshot.liveLogBytes
        snapshotCovers = snapshot.coveredLogBytes
        fileSize = snapshot.coveredLogBytes
        // A file record is rarely under 100 bytes: room for the tail's paths up front.
        index.reserveChanges(Int(min((size - snapshot.coveredLogBytes) / 100, 1 << 22)))
        try replay(size: size, from: snapshot.coveredLogBytes, warn: warn)
    }

    /// How much of this log the snapshot file beside it covers now (0: none, or not this
    /// log's), read from its header alone.
    func snapshotFileCovers() -> Int64 {
        let fd = Glibc.open(snapshotPath, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { Glibc.close(fd) }
        var header = [UInt8](repeating: 0, count: 40)
        guard header.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, 40, 0) }) == 40 else { return 0 }
        return header.withUnsafeBytes { raw in
            raw.u64(24) == generation && generation != 0 ? Int64(bitPattern: raw.u64(32)) : 0
        }
    }

    /// Bytes appended after the snapshot (after the header without one).
    public var bytesAfterSnapshot: Int64 { fileSize - max(snapshotCovers, headerLength) }

    /// Whether a new snapshot pays: enough was appended since the last one that replaying it
    /// costs noticeably (4 MiB is ~25,000 records, a few hundredths of a second), and at least
    /// half the size of what the last one covered (so a growing log is snapshotted a
    /// logarithmic number of times, not at every batch).
    public var shouldSnapshot: Bool {
        fileFormat == Self.formatVersion && bytesAfterSnapshot >= max(Self.snapshotThreshold, snapshotCovers / 2)
    }

    /// Tail size from which a snapshot is written (tests lower it for their task).
    @TaskLocal public static var snapshotThreshold: Int64 = 4 << 20

    /// Housekeeping after a sync or a batch: compacts when dead records outweigh live ones,
    /// else writes a snapshot when enough was appended since the last one. Cheap when neither.
    ///
    /// Never an error for the caller: the batch before it is durable in the log whatever
    /// happens here. A compaction or snapshot that cannot be written (a full disk, a directory
    /// made read-only) leaves the old files whole, is named through `warn`, and is not tried
    /// again until another threshold's worth has been appended (a full disk would otherwise be
    /// written to, in vain, after every batch).
    ///
    /// - Parameter eager: snapshot once the tail reaches the threshold, without waiting for it
    ///   to be half the last snapshot (a service between rounds, when memory matters more).
    public func maintain(eager: Bool = false, warn: (String) -> Void) {
        let wantsSnapshot = eager ? fileFormat == Self.formatVersion && bytesAfterSnapshot >= Self.snapshotThreshold : shouldSnapshot
        guard shouldCompact || wantsSnapshot, fileSize >= maintenanceRetryAt else { return }
        do throws(IndexLogError) {
            let took = try lockForBatch()
            defer { if took { unlockAfterBatch() } }
            if shouldCompact {
                try compact(rewritingRecords: false, warn: warn)
            } else if eager ? bytesAfterSnapshot >= Self.snapshotThreshold : shouldSnapshot {
                try writeSnapshot()
            }
            maintenanceRetryAt = 0
        } catch {
            maintenanceRetryAt = fileSize + Self.snapshotThreshold
            warn("\(error.description); the log holds every record and is read in full past the last snapshot meanwhile; trying again after \(Self.snapshotThreshold >> 20 > 0 ? "\(Self.snapshotThreshold >> 20) MiB" : "\(Self.snapshotThreshold) bytes") more")
        }
    }

    /// The log size before which ``maintain(warn:)`` does not try again after a failure.
    private var maintenanceRetryAt: Int64 = 0

    /// Writes the view as the snapshot (under the lock: the view is the whole log), then reads
    /// the view from it: what the snapshot holds leaves the heap.
    public func writeSnapshot() throws(IndexLogError) {
        let took = try lockForBatch()
        defer { if took { unlockAfterBatch() } }
        precondition(fileFormat == Self.formatVersion && generation != 0, "a snapshot needs a log with a generation")
        let covered = fileSize
        try IndexSnapshot.write(
            index, checkpoints: checkpoints.map { ($0.key, $0.value, checkpointRecordLength[$0.key] ?? 0) }, to: snapshotPath,
            folderID: folderID, generation: generation, covered: covered, live: liveBytes)
        do {
            if let snapshot = try IndexSnapshot.open(path: snapshotPath, folderID: folderID, generation: generation, logSize: covered) {
                let rule = index.conflictRule
                index = GlobalIndex(snapshot: snapshot)
                index.conflictRule = rule
                snapshotCovers = covered
                snapshotRejection = nil
            }
        } catch {
            throw IndexLogError(.io, file: snapshotPath, "the snapshot just written does not read back: \(error)")
        }
    }

    /// After a full replay or a compaction: a snapshot when the log is big enough to want one;
    /// otherwise an old one is removed (it names another generation or a bigger view).
    /// A snapshot that cannot be written is a warning: the log it would summarise is whole.
    private func writeSnapshotIfLarge(warn: (String) -> Void) {
        if fileSize - headerLength >= Self.snapshotThreshold {
            do {
                try writeSnapshot()
            } catch {
                warn("\(error.description); the next open reads the whole log")
            }
        } else {
            unlink(snapshotPath)
            snapshotCovers = 0
        }
    }

    /// Removes a log and its snapshot (`index rebuild`, a folder forgotten).
    public static func remove(path: String) {
        unlink(path)
        unlink(snapshotPath(of: path))
        unlink(snapshotPath(of: path) + ".tmp")
    }

    // MARK: - Replay

    private func replay(size: Int64, from start: Int64 = 0, warn: (String) -> Void) throws(IndexLogError) {
        // Mapped through the open descriptor, not the path: a compaction renaming a new file
        // over the path meanwhile must not give this view bytes of another file than the one
        // its block reads go to.
        let data: Data
        if size == 0 {
            data = Data()
        } else if readsUnlocked {
            // Not mapped: a writer may cut the file back under a mapping (a signal on access).
            var copy = Data(count: Int(size))
            let n = copy.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
            guard n >= 0 else { throw IndexLogError(.io, file: path, "cannot read: \(String(cString: strerror(errno)))") }
            data = copy.prefix(n)
        } else {
            guard let base = mmap(nil, Int(size), PROT_READ, MAP_PRIVATE, fd, 0), base != MAP_FAILED else {
                throw IndexLogError(.io, file: path, "cannot read: \(String(cString: strerror(errno)))")
            }
            data = Data(bytesNoCopy: base, count: Int(size), deallocator: .custom { pointer, count in munmap(pointer, count) })
        }
        // Over a snapshot, the paths the records change are searched for in it together, in
        // name order, once they are all read (whatever happens, before anything reads the view).
        index.deferSnapshotSearches()
        defer { liveBytes -= index.resolveDeferredSearches() }
        do {
            try replay(data: data, from: Int(start), warn: warn)
        } catch let error as IndexLogError {
            throw error
        } catch {
            throw IndexLogError(.io, file: path, "\(error)")
        }
    }

    /// Replays the records from `start` (the header and everything after it when 0).
    private func replay(data: Data, from start: Int, warn: (String) -> Void) throws {
        try data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) throws in
            let bytes = raw.bindMemory(to: UInt8.self)
            var offset = start
            if start == 0 {
                try readHeader(bytes)
                offset = Int(headerLength)
                liveBytes = headerLength
            }
            let end = readsUnlocked ? Self.endOfLastBatch(in: bytes, from: offset) : bytes.count
            while offset < end {
                let remaining = bytes.count - offset
                if remaining < 9 {
                    try cutTornTail(at: offset, warn: warn, why: "a record header is incomplete")
                    break
                }
                let length = Int(bytes.readBE32(at: offset))
                let checksum = bytes.readBE32(at: offset + 4)
                if 9 + length > remaining {
                    // A length that runs past the end is a write cut short only when nothing
                    // whole was written after it; a flipped bit in the length of a record in
                    // the middle looks the same, and cutting there would drop good records.
                    if let later = Self.wholeCheckpoint(in: bytes, after: offset) {
                        throw corruption(at: offset, "a record's length runs past the end, yet a whole record follows at byte \(later)")
                    }
                    try cutTornTail(at: offset, warn: warn, why: "the last record is incomplete")
                    break
                }
                let body = UnsafeRawBufferPointer(rebasing: raw[(offset + 8)..<(offset + 9 + length)])
                if CRC32.checksum(body) != checksum {
                    if offset + 9 + length == bytes.count {
                        try cutTornTail(at: offset, warn: warn, why: "the last record's checksum does not match")
                        break
                    }
                    throw corruption(at: offset, "record checksum mismatch")
                }
                try applyRecord(bytes, at: offset, length: length)
                recordsReplayed += 1
                offset += 9 + length
            }
            fileSize = Int64(offset)
        }
    }

    /// Where the last whole batch ends (each ends with its checkpoint record): a reader without
    /// the lock stops there rather than take half of a batch a writer is appending.
    static func endOfLastBatch(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        var offset = start
        var end = start
        while offset + 9 <= bytes.count {
            let length = Int(bytes.readBE32(at: offset))
            guard offset + 9 + length <= bytes.count else { break }
            if bytes[offset + 8] == Kind.checkpoint.rawValue { end = offset + 9 + length }
            offset += 9 + length
        }
        return end
    }

    /// The offset of the first complete, checksummed checkpoint record that starts after
    /// `offset`, if any. Every batch ends with one, so a torn tail (part of the last batch)
    /// never contains one whole.
    static func wholeCheckpoint(in bytes: UnsafeBufferPointer<UInt8>, after offset: Int) -> Int? {
        let recordLength = 9 + 48
        var at = offset + 1
        while at + recordLength <= bytes.count {
            if bytes.readBE32(at: at) == 48 && bytes[at + 8] == Kind.checkpoint.rawValue {
                let body = UnsafeBufferPointer(rebasing: bytes[(at + 8)..<(at + recordLength)])
                if CRC32.checksum(UnsafeRawBufferPointer(body)) == bytes.readBE32(at: at + 4) { return at }
            }
            at += 1
        }
        return nil
    }

    private func corruption(at offset: Int, _ what: String) -> IndexLogError {
        IndexLogError(
            .corruptRecord, file: path, offset: Int64(offset),
            "\(what); the log is damaged. Run `kaiten index rebuild \(folderID)` to drop it and fetch full indexes again")
    }

    private func cutTornTail(at offset: Int, warn: (String) -> Void, why: String) throws(IndexLogError) {
        if isReadOnly { return }
        warn("\(path): \(why) at byte \(offset) (an interrupted write); cutting the log back to its last whole record")
        guard ftruncate(fd, off_t(offset)) == 0, fsync(fd) == 0 else {
            throw IndexLogError(.io, file: path, offset: Int64(offset), "cannot truncate the torn tail")
        }
    }

    private func readHeader(_ bytes: UnsafeBufferPointer<UInt8>) throws(IndexLogError) {
        guard bytes.count >= 18, Array(bytes[0..<8]) == Self.magic else {
            throw IndexLogError(
                .notAnIndexLog, file: path, offset: 0,
                "not a Kaiten index log; run `kaiten index rebuild \(folderID)` to replace it")
        }
        let version = bytes.readBE32(at: 8)
        fileFormat = version
        guard (1...Self.formatVersion).contains(version) else {
            throw IndexLogError(.unsupportedVersion, file: path, offset: 8, "log format \(version) is not supported (want \(Self.formatVersion))")
        }
        // Format 3 puts the generation before the folder ID.
        let nameAt = version >= 3 ? 20 : 12
        guard bytes.count >= nameAt + 2 else { throw IndexLogError(.notAnIndexLog, file: path, offset: 12, "header is cut short") }
        let nameLength = Int(UInt16(bytes[nameAt]) << 8 | UInt16(bytes[nameAt + 1]))
        let end = nameAt + 2 + nameLength
        guard bytes.count >= end + 4 else { throw IndexLogError(.notAnIndexLog, file: path, offset: 12, "header is cut short") }
        guard CRC32.checksum(Array(bytes[0..<end])) == bytes.readBE32(at: end) else {
            throw IndexLogError(.corruptRecord, file: path, offset: 0, "header checksum mismatch; run `kaiten index rebuild \(folderID)`")
        }
        let name = String(decoding: bytes[(nameAt + 2)..<end], as: UTF8.self)
        guard name == folderID else {
            throw IndexLogError(.wrongFolder, file: path, offset: Int64(nameAt + 2), "this log belongs to folder \"\(name)\", not \"\(folderID)\"")
        }
        generation = version >= 3 ? bytes.readBE64(at: 12) : 0
        headerLength = Int64(end + 4)
    }

    private func applyRecord(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, length: Int) throws(IndexLogError) {
        let payloadStart = offset + 9
        guard let kind = Kind(rawValue: bytes[offset + 8]), length >= 32 else {
            throw corruption(at: offset, "unknown record kind \(bytes[offset + 8])")
        }
        // A batch's records all name the same device: its ID is made once, not once a record.
        let deviceBytes = UnsafeBufferPointer(rebasing: bytes[payloadStart..<(payloadStart + 32)])
        let device: DeviceID
        if let last = lastReplayedDevice, last.bytes.withUnsafeBytes({ memcmp($0.baseAddress!, deviceBytes.baseAddress!, 32) == 0 }) {
            device = last
        } else {
            device = try! DeviceID(bytes: Array(deviceBytes))  // exactly 32 bytes
            lastReplayedDevice = device
        }
        switch kind {
        case .replaced:
            forget(device)
            // A full index brings its own checkpoint after its records; a removal none.
            dropCheckpoint(device)
        case .checkpoint:
            guard length == 48 else { throw corruption(at: offset, "bad checkpoint record") }
            let indexID = bytes.readBE64(at: payloadStart + 32)
            let sequence = Int64(bitPattern: bytes.readBE64(at: payloadStart + 40))
            setCheckpoint(device, Checkpoint(indexID: indexID, maxSequence: sequence), length: Int64(9 + length))
        case .file:
            guard length >= 36 else { throw corruption(at: offset, "file record too short") }
            let metaLength = Int(bytes.readBE32(at: payloadStart + 32))
            guard 36 + metaLength <= length else { throw corruption(at: offset, "bad meta length") }
            let meta = UnsafeRawBufferPointer(
                rebasing: UnsafeRawBufferPointer(bytes)[(payloadStart + 36)..<(payloadStart + 36 + metaLength)])
            var entry: FileEntry
            if fileFormat != 1, let fast = try? FileMetaDecoder.decode(meta, recordOffset: Int64(offset), recordLength: Int32(9 + length)) {
                // The common case; SwiftProtobuf below for anything the fast reader gives up on.
                entry = fast
            } else {
                do {
                    var file = try BEPFileInfo(serializedBytes: Array(meta))
                    if fileFormat == 1 && file.type == .file {
                        // The stored hash is the peer's; Kaiten's own needs the block list.
                        let blocks = UnsafeRawBufferPointer(
                            rebasing: UnsafeRawBufferPointer(bytes)[(payloadStart + 36 + metaLength)..<(payloadStart + length)])
                        file.blocks = try BEPFileInfo(serializedBytes: Array(blocks)).blocks
                    }
                    entry = FileEntry(file, recordOffset: Int64(offset), recordLength: Int32(9 + length))
                } catch {
                    throw corruption(at: offset, "file record does not decode")
                }
            }
            // Only `apply` writes records and it refuses such names: this log was changed by
            // something else, and nothing it says can be trusted.
            guard WireName.staysInsideFolder(entry.name) else {
                throw corruption(at: offset, "a file record names \"\(entry.name)\", which escapes the folder")
            }
            // The meta half carries no blocks; their count follows from size and block size
            // (an empty file has one, empty block), and is 0 when the blocks half is empty (a
            // deletion, a directory), as an entry appended this session has it.
            entry.blockCount = Self.blockCount(hasBlocks: length > 36 + metaLength, size: entry.size, blockSize: entry.blockSize)
            record(entry, from: device)
        }
    }

    /// How many blocks a record's blocks half holds, from the size and block size (an empty
    /// file has one, empty block; a deletion or a directory none).
    static func blockCount(hasBlocks: Bool, size: Int64, blockSize: Int32) -> Int32 {
        guard hasBlocks else { return 0 }
        let effective = Int64(max(blockSize, 128 << 10))
        return Int32(clamping: size > 0 ? (size + effective - 1) / effective : 1)
    }

    // MARK: - State bookkeeping

    private func forget(_ device: DeviceID) {
        liveBytes -= index.removeAll(from: device)
    }

    private func record(_ entry: consuming FileEntry, from device: DeviceID) {
        liveBytes += Int64(entry.recordLength)
        if let old = index.set(entry, for: device) { liveBytes -= Int64(old) }
    }

    private func dropCheckpoint(_ device: DeviceID) {
        liveBytes -= checkpointRecordLength[device] ?? 0
        checkpointRecordLength[device] = nil
        checkpoints[device] = nil
    }

    private func setCheckpoint(_ device: DeviceID, _ checkpoint: Checkpoint, length: Int64) {
        liveBytes -= checkpointRecordLength[device] ?? 0
        liveBytes += length
        checkpointRecordLength[device] = length
        checkpoints[device] = checkpoint
    }

    // MARK: - Encoding

    static func header(folderID: String, generation: UInt64) -> [UInt8] {
        var header = magic
        header.appendBigEndian(formatVersion)
        header.appendBigEndian(generation)
        let name = Array(folderID.utf8)
        header.append(UInt8(name.count >> 8 & 0xFF))
        header.append(UInt8(name.count & 0xFF))
        header += name
        header.appendBigEndian(CRC32.checksum(header))
        return header
    }

    /// A generation no snapshot names yet (never 0, which means "none").
    static func newGeneration() -> UInt64 {
        var generator = SystemRandomNumberGenerator()
        return max(1, generator.next())
    }

    private func writeHeader() throws(IndexLogError) {
        let newGeneration = Self.newGeneration()
        let header = Self.header(folderID: folderID, generation: newGeneration)
        try writeAll(header, at: 0)
        guard fsync(fd) == 0 else { throw IndexLogError(.io, file: path, "fsync failed") }
        headerLength = Int64(header.count)
        fileSize = headerLength
        liveBytes = headerLength
        generation = newGeneration
        fileFormat = Self.formatVersion
    }

    private func writeAll(_ bytes: [UInt8], at offset: Int64) throws(IndexLogError) {
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset) + off_t(written)) }
            if n < 0 {
                if errno == EINTR { continue }
                let reason = String(cString: strerror(errno))
                _ = ftruncate(fd, off_t(offset))
                throw IndexLogError(.io, file: path, offset: offset, "write failed: \(reason)")
            }
            written += n
        }
    }

    static func appendRecord(_ kind: Kind, _ payload: [UInt8], to buffer: inout [UInt8]) {
        var body = [kind.rawValue]
        body += payload
        buffer.appendBigEndian(UInt32(payload.count))
        buffer.appendBigEndian(CRC32.checksum(body))
        buffer += body
    }

    /// A whole FileInfo (meta and blocks) from a file record's bytes (header included).
    static func decodeFileRecord(_ record: [UInt8]) throws -> BEPFileInfo {
        let payloadStart = 9
        guard record.count >= payloadStart + 36 else { throw IndexLogError(.corruptRecord, file: "", "short record") }
        let metaLength = Int(record.readBE32(at: payloadStart + 32))
        let metaStart = payloadStart + 36
        guard metaStart + metaLength <= record.count else { throw IndexLogError(.corruptRecord, file: "", "bad meta length") }
        var file = try BEPFileInfo(serializedBytes: Array(record[metaStart..<(metaStart + metaLength)]))
        file.blocks = try BEPFileInfo(serializedBytes: Array(record[(metaStart + metaLength)...])).blocks
        return file
    }

    static func appendFileRecord(device: DeviceID, file: BEPFileInfo, to buffer: inout [UInt8]) throws {
        var meta = file
        // The meta half is what replay reads: it carries Kaiten's content hash of the blocks,
        // whatever the peer put in blocks_hash (1.x and 2.x compute it differently).
        if !file.blocks.isEmpty {
            meta.blocksHash = Data(BEPFileInfo.blocksHash(of: file.blocks).bytes)
        }
        meta.blocks = []
        let metaBytes: [UInt8] = try meta.serializedBytes()
        var blocksOnly = BEPFileInfo()
        blocksOnly.blocks = file.blocks
        let blockBytes: [UInt8] = try blocksOnly.serializedBytes()
        var payload = device.bytes
        payload.reserveCapacity(36 + metaBytes.count + blockBytes.count)
        payload.appendBigEndian(UInt32(metaBytes.count))
        payload += metaBytes
        payload += blockBytes
        appendRecord(.file, payload, to: &buffer)
    }
}

extension Collection where Element == UInt8, Index == Int {
    func readBE32(at i: Int) -> UInt32 {
        UInt32(self[i]) << 24 | UInt32(self[i + 1]) << 16 | UInt32(self[i + 2]) << 8 | UInt32(self[i + 3])
    }

    func readBE64(at i: Int) -> UInt64 {
        (0..<8).reduce(UInt64(0)) { $0 << 8 | UInt64(self[i + $1]) }
    }
}
