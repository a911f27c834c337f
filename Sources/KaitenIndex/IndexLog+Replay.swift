import Foundation
import KaitenProtocol
import SwiftProtobuf

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Replay

extension IndexLog {
    func replay(size: Int64, from start: Int64 = 0, warn: (String) -> Void) throws(IndexLogError) {
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
    func replay(data: Data, from start: Int, warn: (String) -> Void) throws {
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

    func corruption(at offset: Int, _ what: String) -> IndexLogError {
        IndexLogError(
            .corruptRecord, file: path, offset: Int64(offset),
            "\(what); the log is damaged. Run `kaiten index rebuild \(folderID)` to drop it and fetch full indexes again")
    }

    func cutTornTail(at offset: Int, warn: (String) -> Void, why: String) throws(IndexLogError) {
        if isReadOnly { return }
        warn("\(path): \(why) at byte \(offset) (an interrupted write); cutting the log back to its last whole record")
        guard ftruncate(fd, off_t(offset)) == 0, fsync(fd) == 0 else {
            throw IndexLogError(.io, file: path, offset: Int64(offset), "cannot truncate the torn tail")
        }
    }

    func readHeader(_ bytes: UnsafeBufferPointer<UInt8>) throws(IndexLogError) {
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

    func applyRecord(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, length: Int) throws(IndexLogError) {
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

    func forget(_ device: DeviceID) {
        liveBytes -= index.removeAll(from: device)
    }

    func record(_ entry: consuming FileEntry, from device: DeviceID) {
        liveBytes += Int64(entry.recordLength)
        if let old = index.set(entry, for: device) { liveBytes -= Int64(old) }
    }

    func dropCheckpoint(_ device: DeviceID) {
        liveBytes -= checkpointRecordLength[device] ?? 0
        checkpointRecordLength[device] = nil
        checkpoints[device] = nil
    }

    func setCheckpoint(_ device: DeviceID, _ checkpoint: Checkpoint, length: Int64) {
        liveBytes -= checkpointRecordLength[device] ?? 0
        liveBytes += length
        checkpointRecordLength[device] = length
        checkpoints[device] = checkpoint
    }
}
