import Foundation
import KaitenProtocol
import SwiftProtobuf

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Compaction

extension IndexLog {
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
    func compact(rewritingRecords: Bool, warn: (String) -> Void) throws(IndexLogError) {
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
        IndexSnapshot.remove(path: snapshotPath)
        adopt(try IndexLog.open(path: path, folderID: folderID, warn: warn))
        if lockDepth > 0 {
            guard Self.lockExclusively(fd) else {
                throw heldTooLong()
            }
            try catchUpHoldingLock()
            writeSnapshotIfLarge(warn: warn)
        }
    }
}
