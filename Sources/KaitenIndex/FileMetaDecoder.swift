import Foundation
import KaitenProtocol

/// Reads the meta half of a file record (a `FileInfo` without blocks, protobuf) straight into a
/// ``FileEntry``: replaying a log's tail is mostly this, and going through `BEPFileInfo` (a heap
/// storage object, unknown-field bookkeeping, a generic decoder) cost three times as much.
///
/// It reads exactly the fields ``FileEntry`` keeps, as protobuf's rules have them (the last
/// scalar wins, a repeated message field appends, unknown fields are skipped by wire type). On
/// anything it does not expect — blocks in the meta half, a group, a name that is not UTF-8 — it
/// gives up, and the caller decodes the record with SwiftProtobuf as before, which accepts or
/// refuses it: the fast path never decides what the slow one would not.
enum FileMetaDecoder {
    struct GiveUp: Error {}

    struct Reader {
        let bytes: UnsafeRawBufferPointer
        var at: Int
        let end: Int

        @inline(__always) mutating func varint() throws(GiveUp) -> UInt64 {
            var result: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                guard at < end, shift < 64 else { throw GiveUp() }
                let byte = bytes[at]
                at += 1
                result |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 { return result }
                shift += 7
            }
        }

        @inline(__always) mutating func lengthDelimited() throws(GiveUp) -> UnsafeRawBufferPointer {
            let length = try varint()
            guard length <= UInt64(end - at) else { throw GiveUp() }
            let slice = UnsafeRawBufferPointer(rebasing: bytes[at..<(at + Int(length))])
            at += Int(length)
            return slice
        }

        mutating func skip(wireType: UInt64) throws(GiveUp) {
            switch wireType {
            case 0: _ = try varint()
            case 1:
                guard end - at >= 8 else { throw GiveUp() }
                at += 8
            case 2: _ = try lengthDelimited()
            case 5:
                guard end - at >= 4 else { throw GiveUp() }
                at += 4
            default: throw GiveUp()
            }
        }
    }

    /// The entry a meta half describes, or ``GiveUp``.
    static func decode(_ meta: UnsafeRawBufferPointer, recordOffset: Int64, recordLength: Int32) throws(GiveUp) -> FileEntry {
        var reader = Reader(bytes: meta, at: 0, end: meta.count)
        var name = ""
        var type = BEPFileInfoType.file
        var size: Int64 = 0
        var permissions: UInt32 = 0
        var modifiedS: Int64 = 0
        var modifiedNs: Int32 = 0
        var modifiedBy: UInt64 = 0
        var deleted = false
        var invalid = false
        var noPermissions = false
        var version = BEPVector()
        var sequence: Int64 = 0
        var blockSize: Int32 = 0
        var symlinkTarget = ""
        var blocksHash: UnsafeRawBufferPointer?
        while reader.at < reader.end {
            let key = try reader.varint()
            let field = key >> 3
            let wireType = key & 7
            guard field > 0 && field < 1 << 29 else { throw GiveUp() }
            switch (field, wireType) {
            case (1, 2): name = try text(reader.lengthDelimited())
            case (2, 0): type = BEPFileInfoType(rawValue: Int(Int32(truncatingIfNeeded: try reader.varint()))) ?? .file
            case (3, 0): size = Int64(bitPattern: try reader.varint())
            case (4, 0): permissions = UInt32(truncatingIfNeeded: try reader.varint())
            case (5, 0): modifiedS = Int64(bitPattern: try reader.varint())
            case (6, 0): deleted = try reader.varint() != 0
            case (7, 0): invalid = try reader.varint() != 0
            case (8, 0): noPermissions = try reader.varint() != 0
            case (9, 2): try counters(reader.lengthDelimited(), into: &version)
            case (10, 0): sequence = Int64(bitPattern: try reader.varint())
            case (11, 0): modifiedNs = Int32(truncatingIfNeeded: try reader.varint())
            case (12, 0): modifiedBy = try reader.varint()
            case (13, 0): blockSize = Int32(truncatingIfNeeded: try reader.varint())
            case (17, 2): symlinkTarget = try text(reader.lengthDelimited())
            case (18, 2): blocksHash = try reader.lengthDelimited()
            case (1...13, _), (16...18, _):
                // A known field with another wire type (or packed scalars, or blocks in the meta
                // half): SwiftProtobuf's business.
                throw GiveUp()
            default: try reader.skip(wireType: wireType)
            }
        }
        let isLiveFile = type == .file && !deleted && !invalid
        return FileEntry(
            name: name, type: type, size: size, permissions: permissions, modifiedS: modifiedS, modifiedNs: modifiedNs,
            modifiedBy: modifiedBy, isDeleted: deleted, isInvalid: invalid, noPermissions: noPermissions, version: version,
            sequence: sequence, blockSize: blockSize, blockCount: 0, symlinkTarget: symlinkTarget,
            contentHash: isLiveFile ? blocksHash.flatMap { ContentHash(bytes: $0) } ?? .zero : .zero,
            recordOffset: recordOffset, recordLength: recordLength)
    }

    private static func text(_ bytes: UnsafeRawBufferPointer) throws(GiveUp) -> String {
        // Nearly every name is ASCII, which is valid UTF-8 as it is: decoding it takes the
        // string's own fast path (validating went through generic metadata at every record).
        if WireName.isASCII(bytes: bytes) { return String(decoding: bytes, as: UTF8.self) }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw GiveUp() }
        return text
    }

    private static func counters(_ bytes: UnsafeRawBufferPointer, into vector: inout BEPVector) throws(GiveUp) {
        var reader = Reader(bytes: bytes, at: 0, end: bytes.count)
        while reader.at < reader.end {
            let key = try reader.varint()
            switch (key >> 3, key & 7) {
            case (1, 2):
                var counter = BEPCounter()
                let body = try reader.lengthDelimited()
                var inner = Reader(bytes: body, at: 0, end: body.count)
                while inner.at < inner.end {
                    let innerKey = try inner.varint()
                    switch (innerKey >> 3, innerKey & 7) {
                    case (1, 0): counter.id = try inner.varint()
                    case (2, 0): counter.value = try inner.varint()
                    // Anything else would be kept as an unknown field of the counter, which the
                    // entry compares: SwiftProtobuf's business.
                    default: throw GiveUp()
                    }
                }
                vector.counters.append(counter)
            default: throw GiveUp()
            }
        }
    }
}
