import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenMedia

/// Seeded fuzzing of the HEIF index reader (issue 42, item 7): what a peer's "photo" says about
/// where its thumbnail lies is never trusted past the bytes given, and what it answers is safe
/// to use as it is used (offsets and lengths that add up without overflow, a size to compare).
/// A failure prints its seed (KAITEN_TEST_SEED replays it).
@Suite(.ownThread, .timeLimit(.minutes(2))) struct HEIFFuzzTests {
    /// What a caller may rely on: a positive size, extents that lie in [0, Int64.max] whole,
    /// an `ispe` among the properties, and a standalone HEIF that can be built around its data.
    static func checkUsable(_ found: HEIFThumbnail, _ context: @autoclosure () -> String) {
        #expect(found.width > 0 && found.height > 0, "\(context())")
        #expect(!found.extents.isEmpty, "\(context())")
        var total: Int64 = 0
        for extent in found.extents {
            #expect(extent.offset >= 0 && extent.length > 0, "\(context()): \(extent)")
            let (end, overflow) = extent.offset.addingReportingOverflow(extent.length)
            #expect(!overflow && end > extent.offset, "\(context()): \(extent)")
            let (sum, sumOverflow) = total.addingReportingOverflow(extent.length)
            #expect(!sumOverflow, "\(context())")
            total = sum
        }
        #expect(found.length == total)
        #expect(found.properties.contains { $0.box.count >= 8 && Array($0.box[4..<8]) == Array("ispe".utf8) })
        let standalone = found.standalone(data: [1, 2, 3])
        #expect(HEIFThumbnail(prefix: standalone) == nil, "a standalone HEIF has no thumbnail of its own")
    }

    @Test func damagedIndexesAnswerSafelyOrNot() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-heif-fuzz")
        defer { dir.remove() }
        try TestMedia.jpeg(dir.file("photo.jpg"), width: 800, height: 600)
        try TestMedia.heic(dir.file("photo.heic"), from: dir.file("photo.jpg"), thumbnail: 320)
        let whole = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("photo.heic"))))
        let original = try #require(HEIFThumbnail(prefix: whole))
        Self.checkUsable(original, "the undamaged file")
        // The meta box: where every field the reader trusts lies.
        var reader = BoxReader(bytes: whole)
        let metaBox = reader.topLevelBox("meta")
        let meta = try #require(metaBox)
        let span = meta.whole

        var random = SplitMix64.forTest("damagedIndexesAnswerSafelyOrNot")
        var stillFound = 0
        var changed = 0
        for round in 0..<20_000 {
            var damaged = Array(whole.prefix(span.upperBound + 64))
            switch round % 4 {
            case 0:
                // A few random bytes in the index.
                for _ in 0..<(1 + random.next() % 4) {
                    damaged[span.lowerBound + Int(random.next() % UInt64(span.count))] = UInt8(truncatingIfNeeded: random.next())
                }
            case 1:
                // A field set to an extreme: sizes, counts, offsets, lengths read as 1, 2, 4 or 8 bytes.
                let width = [1, 2, 4, 8][Int(random.next() % 4)]
                let at = span.lowerBound + Int(random.next() % UInt64(max(1, span.count - width)))
                let value: UInt8 = random.next() % 2 == 0 ? 0xFF : 0x7F
                for i in 0..<width where at + i < damaged.count { damaged[at + i] = i == 0 ? value : 0xFF }
            case 2:
                // Cut anywhere in the index.
                damaged = Array(damaged.prefix(span.lowerBound + Int(random.next() % UInt64(span.count))))
            default:
                // A box's size field (the first four bytes of any box header in the index) damaged.
                let boxes = BoxReader.boxes(in: whole, from: span.lowerBound + 12, to: span.upperBound)
                guard let box = boxes.randomElement(using: &random) else { continue }
                let extreme: [[UInt8]] = [[0, 0, 0, 1], [0xFF, 0xFF, 0xFF, 0xFF], [0, 0, 0, 0], [0, 0, 0, 7], [0x7F, 0xFF, 0xFF, 0xFF]]
                let bytes = extreme[Int(random.next() % UInt64(extreme.count))]
                for i in 0..<4 { damaged[box.whole.lowerBound + i] = bytes[i] }
                if bytes == [0, 0, 0, 1], box.whole.lowerBound + 16 <= damaged.count {
                    // A 64-bit "large size" after it.
                    for i in 8..<16 { damaged[box.whole.lowerBound + i] = random.next() % 2 == 0 ? 0xFF : UInt8(truncatingIfNeeded: random.next()) }
                }
            }
            guard let found = HEIFThumbnail(prefix: damaged) else { continue }
            stillFound += 1
            if found != original { changed += 1 }
            Self.checkUsable(found, "round \(round)")
        }
        // The damage reached the fields that matter: many files still parse, some to another answer.
        #expect(stillFound > 2_000, "\(stillFound)")
        #expect(changed > 100, "\(changed)")
    }

    /// Hand-made indexes at the limits of each integer: base offset plus offset past Int64,
    /// a length past Int64, a thumbnail of 2³² − 1 pixels square, a box whose 64-bit size runs
    /// past the end of memory.
    @Test func integersAtTheirLimitsAreRefusedNotTrappedOn() {
        func box(_ type: String, _ payload: [UInt8]) -> [UInt8] { be32(UInt32(8 + payload.count)) + Array(type.utf8) + payload }
        func full(_ type: String, version: UInt8 = 0, flags: UInt32 = 0, _ payload: [UInt8]) -> [UInt8] {
            box(type, [version] + Array(be32(flags).suffix(3)) + payload)
        }
        func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
        func be16(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }
        func be64(_ v: UInt64) -> [UInt8] { be32(UInt32(v >> 32)) + be32(UInt32(v & 0xFFFF_FFFF)) }
        /// A file whose item 2 is a thumbnail of item 1, located by `iloc` (8-byte fields).
        func file(base: UInt64, offset: UInt64, length: UInt64, width: UInt32, height: UInt32) -> [UInt8] {
            let iref = full("iref", box("thmb", be16(2) + be16(1) + be16(1)))
            let infe1 = full("infe", version: 2, be16(1) + be16(0) + Array("hvc1".utf8) + [0])
            let infe2 = full("infe", version: 2, be16(2) + be16(0) + Array("hvc1".utf8) + [0])
            let iinf = full("iinf", be16(2) + infe1 + infe2)
            let ispe = full("ispe", be32(width) + be32(height))
            let ipma = full("ipma", be32(1) + be16(2) + [1, 0x81])
            let iprp = box("iprp", box("ipco", ispe) + ipma)
            // version 1: offset, length and base offset sizes 8, index size 0; one item, one extent.
            let iloc = full("iloc", version: 1, [0x88, 0x80] + be16(1) + be16(2) + be16(0) + be16(0) + be64(base) + be16(1) + be64(offset) + be64(length))
            return box("ftyp", Array("heic".utf8) + be32(0)) + full("meta", iref + iinf + iprp + iloc)
        }
        #expect(HEIFThumbnail(prefix: file(base: 1000, offset: 24, length: 4000, width: 320, height: 240)) != nil, "the well-formed case parses")
        for (base, offset, length) in [
            (UInt64.max, 1, 10), (UInt64(Int64.max), 1, 10), (0, UInt64.max, 10), (0, 10, UInt64.max), (0, UInt64(Int64.max), 1),
            (UInt64(Int64.max) - 5, 0, 10),
        ] as [(UInt64, UInt64, UInt64)] {
            #expect(HEIFThumbnail(prefix: file(base: base, offset: offset, length: length, width: 320, height: 240)) == nil, "\(base) \(offset) \(length)")
        }
        // Two huge thumbnails compared by area: no overflow.
        let huge = file(base: 0, offset: 100, length: 100, width: .max, height: .max)
        if let found = HEIFThumbnail(prefix: huge) { Self.checkUsable(found, "huge") }
        // A box whose 64-bit size is near Int.max, after other boxes.
        let runaway = box("ftyp", Array("heic".utf8)) + be32(1) + Array("meta".utf8) + be64(UInt64(Int.max) - 3) + [0, 0, 0, 0]
        #expect(HEIFThumbnail(prefix: runaway) == nil)
    }
}
