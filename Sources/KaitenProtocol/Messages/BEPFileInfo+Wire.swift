import Foundation
import SwiftProtobuf

// Protobuf's wire format written straight into a byte array for the messages Kaiten writes by
// the hundred thousand: a full index's FileInfos, into the log and to peers. The bytes are
// those `serializedBytes()` gives (fields in number order, zero values left out, unknown fields
// last: WireEncodingTests compares them), without SwiftProtobuf's separate size pass over every
// nested message and without copying a message's storage to change one field.

extension Array where Element == UInt8 {
    @inline(__always)
    mutating func appendVarint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        append(UInt8(value))
    }

    @inline(__always)
    mutating func appendTag(_ field: Int, _ wireType: UInt8) {
        appendVarint(UInt64(field << 3) | UInt64(wireType))
    }

    /// A varint field, left out at zero as proto3 leaves it out (an int64 or a sign-extended
    /// int32 is zero exactly when its value is).
    @inline(__always)
    mutating func appendVarintField(_ field: Int, _ value: UInt64) {
        guard value != 0 else { return }
        appendTag(field, Wire.varint)
        appendVarint(value)
    }

    @inline(__always)
    mutating func appendLengthDelimited(_ field: Int, _ bytes: Data) {
        appendTag(field, 2)
        appendVarint(UInt64(bytes.count))
        append(contentsOf: bytes)
    }

    @inline(__always)
    mutating func appendString(_ field: Int, _ string: String) {
        var string = string
        string.withUTF8 { utf8 in
            appendTag(field, 2)
            appendVarint(UInt64(utf8.count))
            append(contentsOf: utf8)
        }
    }
}

enum Wire {
    static let varint: UInt8 = 0
    static let lengthDelimited: UInt8 = 2

    @inline(__always)
    static func varintSize(_ value: UInt64) -> Int { value == 0 ? 1 : (70 - value.leadingZeroBitCount) / 7 }
    /// An int32 or enum is sign-extended to 64 bits on the wire.
    @inline(__always)
    static func signExtended(_ value: Int32) -> UInt64 { UInt64(bitPattern: Int64(value)) }
    @inline(__always)
    static func tagSize(_ field: Int) -> Int { varintSize(UInt64(field << 3)) }
    @inline(__always)
    static func lengthDelimitedSize(_ field: Int, _ count: Int) -> Int { tagSize(field) + varintSize(UInt64(count)) + count }
}

extension BEPCounter {
    var wireSize: Int {
        (id != 0 ? 1 + Wire.varintSize(id) : 0) + (value != 0 ? 1 + Wire.varintSize(value) : 0) + unknownFields.data.count
    }

    func appendWire(to buffer: inout [UInt8]) {
        buffer.appendVarintField(1, id)
        buffer.appendVarintField(2, value)
        buffer.append(contentsOf: unknownFields.data)
    }
}

extension BEPVector {
    var wireSize: Int {
        counters.reduce(unknownFields.data.count) { $0 + Wire.lengthDelimitedSize(1, $1.wireSize) }
    }

    func appendWire(to buffer: inout [UInt8]) {
        for counter in counters {
            buffer.appendTag(1, Wire.lengthDelimited)
            buffer.appendVarint(UInt64(counter.wireSize))
            counter.appendWire(to: &buffer)
        }
        buffer.append(contentsOf: unknownFields.data)
    }
}

extension BEPBlockInfo {
    var wireSize: Int {
        var size = unknownFields.data.count
        if offset != 0 { size += 1 + Wire.varintSize(UInt64(bitPattern: offset)) }
        if self.size != 0 { size += 1 + Wire.varintSize(Wire.signExtended(self.size)) }
        if !hash.isEmpty { size += Wire.lengthDelimitedSize(3, hash.count) }
        if weakHash != 0 { size += 1 + Wire.varintSize(UInt64(weakHash)) }
        return size
    }

    func appendWire(to buffer: inout [UInt8]) {
        buffer.appendVarintField(1, UInt64(bitPattern: offset))
        buffer.appendVarintField(2, Wire.signExtended(size))
        if !hash.isEmpty { buffer.appendLengthDelimited(3, hash) }
        buffer.appendVarintField(4, UInt64(weakHash))
        buffer.append(contentsOf: unknownFields.data)
    }
}

extension BEPFileInfo {
    /// Appends this FileInfo's encoding, as `serializedBytes()` gives it.
    /// - Parameters:
    ///   - blocksHash: written in place of ``blocksHash`` when given (the log stores its own).
    ///   - withBlocks: false leaves the blocks out (field 16), as if the list were empty.
    public func appendWire(to buffer: inout [UInt8], blocksHash replacement: Data? = nil, withBlocks: Bool = true) {
        if !name.isEmpty { buffer.appendString(1, name) }
        buffer.appendVarintField(2, Wire.signExtended(Int32(truncatingIfNeeded: type.rawValue)))
        buffer.appendVarintField(3, UInt64(bitPattern: size))
        buffer.appendVarintField(4, UInt64(permissions))
        buffer.appendVarintField(5, UInt64(bitPattern: modifiedS))
        buffer.appendVarintField(6, deleted ? 1 : 0)
        buffer.appendVarintField(7, invalid ? 1 : 0)
        buffer.appendVarintField(8, noPermissions ? 1 : 0)
        if hasVersion {
            let version = self.version
            buffer.appendTag(9, Wire.lengthDelimited)
            buffer.appendVarint(UInt64(version.wireSize))
            version.appendWire(to: &buffer)
        }
        buffer.appendVarintField(10, UInt64(bitPattern: sequence))
        buffer.appendVarintField(11, Wire.signExtended(modifiedNs))
        buffer.appendVarintField(12, modifiedBy)
        buffer.appendVarintField(13, Wire.signExtended(blockSize))
        if withBlocks { Self.appendWire(blocks: blocks, to: &buffer) }
        if !symlinkTarget.isEmpty { buffer.appendString(17, symlinkTarget) }
        let blocksHash = replacement ?? self.blocksHash
        if !blocksHash.isEmpty { buffer.appendLengthDelimited(18, blocksHash) }
        if !encrypted.isEmpty { buffer.appendLengthDelimited(19, encrypted) }
        buffer.append(contentsOf: unknownFields.data)
    }

    /// Appends `blocks` as field 16 of a FileInfo: alone, the encoding of a FileInfo holding
    /// nothing but them.
    public static func appendWire(blocks: [BEPBlockInfo], to buffer: inout [UInt8]) {
        for block in blocks {
            buffer.appendTag(16, Wire.lengthDelimited)
            buffer.appendVarint(UInt64(block.wireSize))
            block.appendWire(to: &buffer)
        }
    }
}

extension BEPIndex {
    /// This Index's encoding, as `serializedBytes()` gives it, each FileInfo written once.
    public func wireBytes() -> [UInt8] { Self.wireBytes(folder: folder, files: files, unknown: unknownFields.data) }

    static func wireBytes(folder: String, files: [BEPFileInfo], unknown: Data) -> [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(files.count * 256)
        if !folder.isEmpty { buffer.appendString(1, folder) }
        var scratch: [UInt8] = []
        for file in files {
            scratch.removeAll(keepingCapacity: true)
            file.appendWire(to: &scratch)
            buffer.appendTag(2, Wire.lengthDelimited)
            buffer.appendVarint(UInt64(scratch.count))
            buffer += scratch
        }
        buffer.append(contentsOf: unknown)
        return buffer
    }
}

extension BEPIndexUpdate {
    /// This IndexUpdate's encoding, as `serializedBytes()` gives it (the same fields as an Index).
    public func wireBytes() -> [UInt8] { BEPIndex.wireBytes(folder: folder, files: files, unknown: unknownFields.data) }
}
