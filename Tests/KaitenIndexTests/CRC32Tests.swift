import CKaitenCRC32
import KaitenTestSupport
import Testing

@testable import KaitenIndex

/// The folded CRC-32 gives zlib's sums, for every length, alignment and seed: logs, snapshots
/// and scan caches written before it (by zlib) still check, and their files stay as they were.
@Suite(.timeLimit(.minutes(5)))
struct CRC32Tests {
    @Test func theStandardCheckValue() {
        let bytes = Array("123456789".utf8)
        #expect(CRC32.checksum(bytes) == 0xCBF4_3926)
        #expect(bytes.withUnsafeBytes { kaiten_crc32(0, $0.baseAddress, $0.count) } == 0xCBF4_3926)
    }

    @Test func agreesWithZlibAtEveryLengthAlignmentAndSeed() {
        // A seeded generator, eight bytes a draw: the system's made a syscall per byte and held
        // a thread of the test pool for most of a second.
        var generator = SplitMix64.forTest("agreesWithZlibAtEveryLengthAlignmentAndSeed")
        var buffer = [UInt8](repeating: 0, count: (1 << 20) + 64)
        buffer.withUnsafeMutableBytes { raw in
            for at in stride(from: 0, to: raw.count, by: 8) { raw.storeBytes(of: generator.next(), toByteOffset: at, as: UInt64.self) }
        }
        buffer.withUnsafeBytes { raw in
            // Every length up to 600 (the folding starts at 64 and goes 16 bytes at a time), at
            // every alignment, then long ones.
            var lengths = Array(0...600)
            lengths += (0..<50).map { _ in Int.random(in: 600...(1 << 20), using: &generator) }
            var mismatches = 0
            for length in lengths {
                let offset = Int.random(in: 0..<64, using: &generator)
                let seed = UInt32.random(in: 0...UInt32.max, using: &generator)
                let start = raw.baseAddress! + offset
                if kaiten_crc32(seed, start, length) != kaiten_crc32_zlib(seed, start, length) { mismatches += 1 }
            }
            #expect(mismatches == 0)
        }
    }

    @Test func aSumCarriedOverIsTheSumOfTheWhole() {
        let bytes = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        bytes.withUnsafeBytes { raw in
            let whole = CRC32.checksum(raw)
            for split in [0, 1, 63, 64, 65, 200, 4999, 5000] {
                let first = CRC32.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<split]))
                #expect(CRC32.checksum(UnsafeRawBufferPointer(rebasing: raw[split...]), seed: first) == whole)
            }
        }
    }
}
