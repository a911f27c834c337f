import KaitenTestSupport
import KaitenTestThreads
import Testing

#if canImport(Glibc)
import Glibc
#endif

@testable import KaitenStream

/// Seeded fuzzing of what an HTTP client sends the on-demand server (issue 42, item 7): Range
/// headers and signed links. A failure prints its seed (KAITEN_TEST_SEED replays it).
@Suite(.ownThread, .timeLimit(.minutes(1)))
struct StreamFuzzTests {
    @Test func anyRangeHeaderResolvesWithinTheFileAndTheRangeCap() {
        var random = SplitMix64.forTest("anyRangeHeaderResolvesWithinTheFileAndTheRangeCap")
        let pieces = ["bytes=", "0", "1", "9", "-", ",", " ", "items=", "99999999999999999999", "-0", "=", "bytes"]
        var ranged = 0
        for _ in 0..<20_000 {
            let header: String
            if random.next() % 2 == 0 {
                header = (0..<Int(random.next() % 12)).map { _ in pieces[Int(random.next() % UInt64(pieces.count))] }.joined()
            } else {
                // Well formed, the numbers anywhere (past the end, reversed, huge).
                func number() -> String { random.next() % 200 == 0 ? "99999999999999999999" : String(random.next() % 250) }
                let specs = (0..<(1 + Int(random.next() % 8))).map { _ -> String in
                    switch random.next() % 3 {
                    case 0: return "\(number())-\(number())"
                    case 1: return "\(number())-"
                    default: return "-\(number())"
                    }
                }
                header = "bytes=" + specs.joined(separator: random.next() % 2 == 0 ? "," : ", ")
            }
            let size = Int64(random.next() % 200)
            switch HTTPRange.resolve(header, size: size) {
            case .full, .unsatisfiable:
                break
            case .ranges(let ranges):
                ranged += 1
                #expect(!ranges.isEmpty && ranges.count <= 32, "\(header) over \(size)")
                #expect(ranges.allSatisfy { $0.lowerBound >= 0 && $0.upperBound < size }, "\(header) over \(size): \(ranges)")
            }
        }
        #expect(ranged > 3000, "\(ranged) headers resolved to ranges")
    }

    @Test func aHeaderOfManyRangesIsCappedInBoundedTime() {
        let header = "bytes=" + (0..<100_000).map { "\($0)-\($0)" }.joined(separator: ",")
        // The time this thread computed, not the wall clock: the bound is on the work (a
        // quadratic resolver takes minutes), and the whole suite runs beside it on two cores.
        func cpuSeconds() -> Double {
            var now = timespec()
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
            return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        }
        let start = cpuSeconds()
        let resolved = HTTPRange.resolve(header, size: 1 << 30)
        let took = cpuSeconds() - start
        if case .ranges(let ranges) = resolved { #expect(ranges.count <= 32) }
        #expect(took < 2, "\(took) s of CPU")
    }

    @Test func noAlteredLinkVerifies() {
        var random = SplitMix64.forTest("noAlteredLinkVerifies")
        let signer = URLSigner(key: (0..<32).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        let hex = Array("0123456789abcdef")
        for _ in 0..<5_000 {
            let folder = "f\(random.next() % 3)"
            let path = "dir/\(random.next() % 1000).mkv"
            let expires = Int64(random.next() % 1_000_000)
            let signature = signer.signature(folder: folder, path: path, expires: expires)
            #expect(signer.verify(folder: folder, path: path, expires: expires, signature: signature))
            var altered = Array(signature)
            let at = Int(random.next() % UInt64(altered.count))
            var replacement = hex[Int(random.next() % 16)]
            if replacement == altered[at] { replacement = hex[(hex.firstIndex(of: replacement)! + 1) % 16] }
            altered[at] = replacement
            #expect(!signer.verify(folder: folder, path: path, expires: expires, signature: String(altered)))
            #expect(!signer.verify(folder: folder, path: path, expires: expires + 1 + Int64(random.next() % 100), signature: signature))
            #expect(!signer.verify(folder: folder, path: path + "x", expires: expires, signature: signature))
            // A thumbnail's signature never opens the file, nor the other way round.
            #expect(!signer.verifyThumbnail(folder: folder, path: path, size: 256, expires: expires, signature: signature))
        }
    }

    /// A signature is 64 hex digits and nothing else: 64 bytes of other characters (which once
    /// walked past the end of the string, a crash any client could cause), a sign, spaces.
    @Test func aSignatureThatIsNotHexNeverVerifiesNorTraps() {
        let signer = URLSigner(key: Array(repeating: 9, count: 32))
        // A signature that begins with 0, so that "+" in its place reads as the same byte to a
        // lenient parser.
        let expires = (100..<10_000).first { signer.signature(folder: "f", path: "a.mkv", expires: Int64($0)).hasPrefix("0") }.map(Int64.init)!
        let signature = signer.signature(folder: "f", path: "a.mkv", expires: expires)
        let plusSigned = "+" + signature.dropFirst()
        let others = [
            String(repeating: "a", count: 62) + "é", String(repeating: "é", count: 21) + String(repeating: "a", count: 22), String(repeating: "é", count: 32), String(repeating: " ", count: 64),
            plusSigned, signature.uppercased() + "0", String(signature.dropLast()), "", String(repeating: "ff", count: 33),
        ]
        #expect(plusSigned.utf8.count == 64 && plusSigned != signature)
        for other in others {
            #expect(!signer.verify(folder: "f", path: "a.mkv", expires: expires, signature: other), "\(other)")
            #expect(!signer.verifyThumbnail(folder: "f", path: "a.mkv", size: 256, expires: expires, signature: other), "\(other)")
        }
        #expect(signer.verify(folder: "f", path: "a.mkv", expires: expires, signature: signature.uppercased()), "hex in either case")
    }
}
