import KaitenTestSupport
import Testing

@testable import KaitenProtocol

/// The order an index snapshot and the local index's changes are written in: UTF-8 bytes, a
/// prefix before what extends it, not String's Unicode order.
@Suite(.timeLimit(.minutes(1)))
struct ByteOrderTests {
    @Test func orderOfNamesIsTheirUTF8ByteOrder() {
        var random = SplitMix64(seed: 43)
        let pieces = ["", "a", "A", "é", "e\u{301}", "photos", "photos/", "photos/2000", "z", "ä", "日本", "~", " ", "\u{7f}"]
        var names = pieces
        for _ in 0..<3000 {
            var name = ""
            for _ in 0..<Int.random(in: 1...4, using: &random) { name += pieces.randomElement(using: &random)! }
            names.append(name + String(Int.random(in: 0...50, using: &random)))
        }
        names = Array(Set(names)).shuffled(using: &random)
        let ordered = ByteOrder.order(of: names).map { names[$0] }
        let expected = names.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        #expect(ordered == expected)
        #expect(ByteOrder.order(of: [String]()).isEmpty)
        #expect(ByteOrder.order(of: ["b", "", "a"]) == [1, 2, 0])
    }
}
