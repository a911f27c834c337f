internal import CZlib

/// zlib's CRC-32 (the IEEE polynomial), as used in every log record.
enum CRC32 {
    static func checksum(_ bytes: UnsafeRawBufferPointer, seed: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return seed }
        return UInt32(crc32(UInt(seed), base.assumingMemoryBound(to: UInt8.self), UInt32(bytes.count)))
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}
