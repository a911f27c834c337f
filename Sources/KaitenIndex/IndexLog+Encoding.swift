import Foundation
import KaitenProtocol
import SwiftProtobuf

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Encoding

extension IndexLog {
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

    func writeHeader() throws(IndexLogError) {
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

    func writeAll(_ bytes: [UInt8], at offset: Int64) throws(IndexLogError) {
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
        appendRecord(kind, payloadCount: payload.count, to: &buffer) { $0 += payload }
    }

    /// A record whose payload `write` appends to the buffer in place: its length and checksum
    /// are filled in after, so the payload is never assembled apart and copied (a full index
    /// appends one record per file).
    static func appendRecord(_ kind: Kind, payloadCount: Int, to buffer: inout [UInt8], _ write: (inout [UInt8]) -> Void) {
        buffer.reserveCapacity(buffer.count + 9 + payloadCount)
        let start = buffer.count
        appendRecord(kind, to: &buffer, write)
        precondition(buffer.count == start + 9 + payloadCount, "a record's payload is the length it was announced with")
    }

    /// The same for a payload whose length is known once written.
    static func appendRecord(_ kind: Kind, to buffer: inout [UInt8], _ write: (inout [UInt8]) -> Void) {
        let start = buffer.count
        buffer.appendBigEndian(UInt32(0))
        buffer.appendBigEndian(UInt32(0))
        buffer.append(kind.rawValue)
        write(&buffer)
        buffer.setBigEndian(UInt32(buffer.count - start - 9), at: start)
        let checksum = buffer.withUnsafeBytes { CRC32.checksum(UnsafeRawBufferPointer(rebasing: $0[(start + 8)...])) }
        buffer.setBigEndian(checksum, at: start + 4)
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
        // The meta half is what replay reads: it carries Kaiten's content hash of the blocks,
        // whatever the peer put in blocks_hash (1.x and 2.x compute it differently).
        let blocks = file.blocks
        let blocksHash = blocks.isEmpty ? nil : Data(BEPFileInfo.blocksHash(of: blocks).bytes)
        appendRecord(.file, to: &buffer) { buffer in
            buffer += device.bytes
            let lengthAt = buffer.count
            buffer.appendBigEndian(UInt32(0))
            file.appendWire(to: &buffer, blocksHash: blocksHash, withBlocks: false)
            buffer.setBigEndian(UInt32(buffer.count - lengthAt - 4), at: lengthAt)
            BEPFileInfo.appendWire(blocks: blocks, to: &buffer)
        }
    }
}
