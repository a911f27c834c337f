import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenSelection

/// Seeded fuzzing of what users and peers write (issue 42, item 7): globs against a reference
/// matcher, and selection files, mutated. A failure prints its seed (KAITEN_TEST_SEED replays it).
@Suite(.ownThread, .timeLimit(.minutes(1)))
struct SelectionFuzzTests {
    /// The rules as written, by backtracking (exponential: short inputs only).
    static func reference(_ tokens: [Glob.Token], _ t: Int, _ name: [Character], _ n: Int) -> Bool {
        guard t < tokens.count else { return n == name.count }
        switch tokens[t] {
        case .literal(let c):
            return n < name.count && name[n] == c && reference(tokens, t + 1, name, n + 1)
        case .any:
            return n < name.count && name[n] != "/" && reference(tokens, t + 1, name, n + 1)
        case .characterClass(let ranges, let negated):
            guard n < name.count, name[n] != "/", ranges.contains(where: { $0.contains(name[n]) }) != negated else { return false }
            return reference(tokens, t + 1, name, n + 1)
        case .star:
            var i = n
            while true {
                if reference(tokens, t + 1, name, i) { return true }
                if i == name.count || name[i] == "/" { return false }
                i += 1
            }
        case .doubleStar:
            return (n...name.count).contains { reference(tokens, t + 1, name, $0) }
        case .alternatives(let options):
            let rest = Array(tokens[(t + 1)...])
            return options.contains { reference($0 + rest, 0, name, n) }
        }
    }

    @Test func globsAgreeWithTheRulesAsWritten() throws {
        var random = SplitMix64.forTest("globsAgreeWithTheRulesAsWritten")
        let pieces = ["a", "b", "/", "*", "**", "?", "[ab]", "[!a]", "[a-c]", "{a,b/}", "{,a*}", "\\*", "."]
        let letters: [Character] = ["a", "b", "c", "/", "*", "."]
        var matched = 0
        for _ in 0..<20_000 {
            let pattern = (0..<Int(random.next() % 7)).map { _ in pieces[Int(random.next() % UInt64(pieces.count))] }.joined()
            let name = String((0..<Int(random.next() % 9)).map { _ in letters[Int(random.next() % UInt64(letters.count))] })
            let glob = try Glob(pattern)
            let expected = Self.reference(glob.tokens, 0, Array(name), 0)
            #expect(glob.matches(name) == expected, "\"\(pattern)\" against \"\(name)\"")
            if expected { matched += 1 }
        }
        #expect(matched > 1000, "the cases exercise matches, not only misses")
    }

    @Test func anyTextIsAGlobOrAClearError() {
        var random = SplitMix64.forTest("anyTextIsAGlobOrAClearError")
        let alphabet: [Character] = ["[", "]", "{", "}", ",", "!", "-", "\\", "*", "?", "a", "/", "\u{0}", "é"]
        var errors = 0
        for _ in 0..<20_000 {
            let text = String((0..<Int(random.next() % 12)).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
            do {
                let glob = try Glob(text)
                _ = glob.matches("a/b[c]{d}")
            } catch {
                errors += 1
                #expect(error.pattern == text && !error.reason.isEmpty)
            }
        }
        #expect(errors > 100)
    }

    /// A selection file mutated byte by byte (CR, NUL, tabs, globs, `..`): it parses, and then
    /// renders to a file that parses to the same selection, or it is refused at a line it has.
    @Test func mutatedSelectionFilesParseStablyOrAreRefusedAtTheirLine() {
        var random = SplitMix64.forTest("mutatedSelectionFilesParseStablyOrAreRefusedAtTheirLine")
        let valid = "# photos\nphotos/2024\n!photos/2024/raw\ndocs/**/*.pdf\n\"quoted name\"\nmusic/{a,b}*\n"
        let inserts = ["\r", "\r\n", "\u{0}", "\t", " ", "*", "[", "{", "\\", "../", "/", "!", "#", "é", "\n", "**"]
        var refused = 0
        for _ in 0..<5_000 {
            var text = valid
            for _ in 0..<(1 + random.next() % 4) {
                let at = text.index(text.startIndex, offsetBy: Int(random.next() % UInt64(text.count + 1)))
                if random.next() % 3 == 0, at < text.endIndex {
                    text.remove(at: at)
                } else {
                    text.insert(contentsOf: inserts[Int(random.next() % UInt64(inserts.count))], at: at)
                }
            }
            do {
                let parsed = try SelectionFile.parse(text, file: "sel.txt")
                let again = try SelectionFile.parse(parsed.render(), file: "sel.txt")
                #expect(again.render() == parsed.render(), "\(text.debugDescription)")
                #expect(again.paths == parsed.paths && again.patterns == parsed.patterns, "\(text.debugDescription)")
            } catch {
                refused += 1
                // Lines end at LF, CRLF or a lone CR (an editor's line ends, whichever it writes).
                let scalars = Array(text.unicodeScalars)
                let lines = 1 + scalars.indices.count { i in
                    scalars[i] == "\n" || (scalars[i] == "\r" && (i + 1 == scalars.count || scalars[i + 1] != "\n"))
                }
                #expect(error.file == "sel.txt" && (1...max(1, lines)).contains(error.line), "\(error) in \(text.debugDescription)")
            }
        }
        #expect(refused > 50)
    }
}
