import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenSelection

/// Seeded fuzzing of `.stignore` adoption (issue 42, item 7): whatever a folder's `.stignore`
/// holds, reading it never fails, and what Kaiten takes as its own renders back to the same.
@Suite(.ownThread, .timeLimit(.minutes(1)))
struct StIgnoreFuzzTests {
    @Test func anyStIgnoreIsReadAndWhatIsAdoptedRendersBackTheSame() {
        var random = SplitMix64.forTest("anyStIgnoreIsReadAndWhatIsAdoptedRendersBackTheSame")
        let valid = StIgnore.render(globalIgnores: [".DS_Store", "*.tmp"], selected: ["photos/2024", "docs/a b.txt", "music"])
        let inserts = ["\r", "\r\n", "\n", "\u{0}", "!", "/", "*", "**", "(?d)", "(?i)", "#include x", "//", "\\", "[", "..", " ", "é"]
        var managed = 0
        for _ in 0..<10_000 {
            var text = valid
            for _ in 0..<(random.next() % 4) {
                let at = text.index(text.startIndex, offsetBy: Int(random.next() % UInt64(text.count + 1)))
                if random.next() % 3 == 0, at < text.endIndex {
                    text.remove(at: at)
                } else {
                    text.insert(contentsOf: inserts[Int(random.next() % UInt64(inserts.count))], at: at)
                }
            }
            guard case .managed(let ignores, let selected) = StIgnore.parse(text) else { continue }
            managed += 1
            let rendered = StIgnore.render(globalIgnores: ignores, selected: selected)
            guard case .managed(let ignoresAgain, let selectedAgain) = StIgnore.parse(rendered) else {
                Issue.record("adopted \(text.debugDescription) renders to \(rendered.debugDescription), which is not adopted")
                continue
            }
            #expect(ignoresAgain == ignores, "\(text.debugDescription)")
            #expect(Set(selectedAgain).isSubset(of: Set(selected)), "\(text.debugDescription)")
        }
        #expect(managed > 1000, "\(managed) adopted")
    }
}
