extension Array where Element == UInt8 {
    /// Appends a value in network byte order (the index log and the scan cache both use it).
    package mutating func appendBigEndian(_ value: UInt32) {
        append(UInt8(value >> 24))
        append(UInt8(value >> 16 & 0xFF))
        append(UInt8(value >> 8 & 0xFF))
        append(UInt8(value & 0xFF))
    }

    package mutating func appendBigEndian(_ value: UInt64) {
        appendBigEndian(UInt32(value >> 32))
        appendBigEndian(UInt32(value & 0xFFFF_FFFF))
    }

    /// Overwrites four bytes at `offset` with a value in network byte order (a length or a
    /// checksum known only once what follows it is written).
    package mutating func setBigEndian(_ value: UInt32, at offset: Int) {
        withUnsafeMutableBytes { bytes in
            bytes[offset] = UInt8(value >> 24)
            bytes[offset + 1] = UInt8(value >> 16 & 0xFF)
            bytes[offset + 2] = UInt8(value >> 8 & 0xFF)
            bytes[offset + 3] = UInt8(value & 0xFF)
        }
    }
}
