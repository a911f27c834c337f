internal import CKaitenCRC32

/// zlib's CRC-32 (the IEEE polynomial), as used in every log record and snapshot
/// (`kaiten_crc32`: the same sums, folded with carry-less multiplication where the CPU can).
enum CRC32 {
    static func checksum(_ bytes: UnsafeRawBufferPointer, seed: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return seed }
        return kaiten_crc32(seed, base, bytes.count)
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}
