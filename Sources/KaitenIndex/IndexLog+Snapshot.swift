import Foundation
import KaitenProtocol
import SwiftProtobuf

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Snapshot

extension IndexLog {
    /// Reads the header; with a usable snapshot, takes the view from it and replays the records
    /// after it; otherwise replays the whole log.
    func replayUsingSnapshot(size: Int64, warn: (String) -> Void) throws(IndexLogError) {
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
    /// a quarter of what the last one covered (so a growing log is snapshotted a logarithmic
    /// number of times, not at every batch). A quarter, not a half: what waits for the next
    /// snapshot is held in memory, and an intake's peak is set by it (a fifth of the paths at
    /// most, not a third); each path's record is then written about five times, not three.
    public var shouldSnapshot: Bool {
        fileFormat == Self.formatVersion && bytesAfterSnapshot >= max(Self.snapshotThreshold, snapshotCovers / 4)
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
                // Counted now, while the pages just checked are in the page cache, and kept beside
                // it: the first status request after an intake then reads none of it.
                _ = index.tally()
            }
        } catch {
            throw IndexLogError(.io, file: snapshotPath, "the snapshot just written does not read back: \(error)")
        }
    }

    /// After a full replay or a compaction: a snapshot when the log is big enough to want one;
    /// otherwise an old one is removed (it names another generation or a bigger view).
    /// A snapshot that cannot be written is a warning: the log it would summarise is whole.
    func writeSnapshotIfLarge(warn: (String) -> Void) {
        if fileSize - headerLength >= Self.snapshotThreshold {
            do {
                try writeSnapshot()
            } catch {
                warn("\(error.description); the next open reads the whole log")
            }
        } else {
            IndexSnapshot.remove(path: snapshotPath)
            snapshotCovers = 0
        }
    }

    /// Removes a log and its snapshot (`index rebuild`, a folder forgotten).
    public static func remove(path: String) {
        unlink(path)
        IndexSnapshot.remove(path: snapshotPath(of: path))
        unlink(snapshotPath(of: path) + ".tmp")
    }
}
