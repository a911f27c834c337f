import KaitenTestSupport
import Testing

@testable import KaitenSelection

@Suite(.timeLimit(.minutes(5)))
struct SelectionFileTests {
    @Test func parsesEveryKindOfLineAndRendersItBack() throws {
        let text = """
            # my selection
            /photos/2025/
            docs/*.pdf

            notes/\\[draft\\].txt
            \\#hash.txt
            (?d).DS_Store
            café
            """ + "\n"
        let selection = try SelectionFile.parse(text, file: "s.txt")
        #expect(selection.paths == ["photos/2025", "notes/[draft].txt", "#hash.txt", "café"])
        #expect(selection.patterns.map(\.pattern) == ["docs/*.pdf"])
        #expect(selection.globalIgnores == [".DS_Store"])
        #expect(selection.render() == text)
    }

    /// An editor that writes CRLF must not turn the file into one line that matches nothing
    /// (the plan then deleted every selected local file).
    @Test func aCRLFFileReadsAsTheSameLinesAsLF() throws {
        let lf = "# kept\nphotos/2025\ndocs/*.pdf\n(?d).DS_Store\nnotes/a.txt\n"
        let crlf = lf.replacingOccurrences(of: "\n", with: "\r\n")
        #expect(crlf.split(separator: "\n").count == 1)  // why Character-wise splitting failed
        let fromLF = try SelectionFile.parse(lf, file: "s.txt")
        let fromCRLF = try SelectionFile.parse(crlf, file: "s.txt")
        #expect(fromCRLF.paths == ["photos/2025", "notes/a.txt"])
        #expect(fromCRLF.paths == fromLF.paths)
        #expect(fromCRLF.patterns.map(\.pattern) == ["docs/*.pdf"])
        #expect(fromCRLF.globalIgnores == [".DS_Store"])
        // Mixed endings and a last line without one.
        let mixed = try SelectionFile.parse("a\r\nb\nc", file: "s.txt")
        #expect(mixed.paths == ["a", "b", "c"])
    }

    @Test func aNULByteIsRefusedAtItsLine() {
        #expect {
            _ = try SelectionFile.parse("ok.txt\r\nbad\0name.txt\r\n", file: "s.txt")
        } throws: { error in
            guard let error = error as? SelectionError else { return false }
            return error.line == 2 && "\(error)".contains("NUL")
        }
    }

    struct Bad: CustomTestStringConvertible, Sendable {
        let text: String
        let line: Int
        let code: SelectionError.Code
        var testDescription: String { text }
    }

    @Test(arguments: [
        Bad(text: "ok\n../etc/passwd\n", line: 2, code: .escapesFolder),
        Bad(text: "a/./b\n", line: 1, code: .escapesFolder),
        Bad(text: "a//b\n", line: 1, code: .escapesFolder),
        Bad(text: "/\n", line: 1, code: .emptyPath),
        Bad(text: "# c\n\nphotos/[2025\n", line: 3, code: .badPattern),
        Bad(text: "(?d)sub/x\n", line: 1, code: .badGlobalIgnore),
        Bad(text: "(?d)**.tmp\n", line: 1, code: .badGlobalIgnore),
    ])
    func mistakesNameFileAndLine(_ bad: Bad) {
        let error = #expect(throws: SelectionError.self) { try SelectionFile.parse(bad.text, file: "sel/photos.txt") }
        #expect(error?.line == bad.line)
        #expect(error?.code == bad.code)
        #expect(error?.description.hasPrefix("sel/photos.txt:\(bad.line): ") == true)
    }

    @Test func selectKeepsCommentsAndOrderAndReportsCoveringParents() throws {
        var selection = try SelectionFile.parse("# keep me\nphotos\n", file: "s")
        #expect(try selection.select("music/a [live].mp3") == .added)
        #expect(try selection.select("/photos/2025/x.jpg") == .coveredBy("photos"))
        #expect(try selection.select("photos") == .alreadySelected)
        #expect(try selection.select("#notes") == .added)
        #expect(selection.render() == "# keep me\nphotos\nmusic/a \\[live\\].mp3\n\\#notes\n")
        let reparsed = try SelectionFile.parse(selection.render(), file: "s")
        #expect(reparsed.paths == ["photos", "music/a [live].mp3", "#notes"])
        #expect(try selection.deselect("photos"))
        #expect(try !selection.deselect("never-there"))
        #expect(selection.render() == "# keep me\nmusic/a \\[live\\].mp3\n\\#notes\n")
    }

    @Test func aSiblingWithACommonPrefixIsNotCovered() throws {
        var selection = try SelectionFile.parse("a/some\n", file: "s")
        #expect(try selection.select("a/something") == .added)
        #expect(try selection.select("a/some/thing") == .coveredBy("a/some"))
    }
}

@Suite(.timeLimit(.minutes(5)))
struct StIgnoreTests {
    @Test func rendersSushitrainsGrammar() {
        let text = StIgnore.render(
            globalIgnores: [".DS_Store"],
            selected: ["photos/2025", "photos/2025/x.jpg", "a [1]!*?{}.txt", "photos/2025x", "Zed", "back\\slash"])
        #expect(
            text == """
                (?d).DS_Store
                !/Zed
                !/a \\[1\\]\\!\\*\\?\\{\\}.txt
                !/back\\\\slash
                !/photos/2025
                !/photos/2025x
                *

                """)
    }

    @Test func parsesWhatItWritesAndWhatSushitrainWrites() {
        let written = StIgnore.render(globalIgnores: ["*.tmp"], selected: ["a [1].txt", "dir/sub", "café"])
        #expect(StIgnore.parse(written) == .managed(globalIgnores: ["*.tmp"], selected: ["a [1].txt", "café", "dir/sub"]))
        #expect(StIgnore.parse("// comment\n!/x\n\n*\n") == .managed(globalIgnores: [], selected: ["x"]))
        #expect(StIgnore.parse("*\n") == .managed(globalIgnores: [], selected: []))
    }

    @Test(arguments: [
        ("*.tmp\n", ["(no final \"*\" line)"]),
        ("!/a\n(?d)late\n*\n", ["(?d)late"]),
        ("!/photos/*.jpg\n*\n", ["!/photos/*.jpg"]),
        ("#include other\n!/a\n*\n", ["#include other"]),
        ("!keep.txt\n*\n", ["!keep.txt"]),
        ("(?d)a/b\n*\n", ["(?d)a/b"]),
    ])
    func anythingElseIsUnmanaged(text: String, quoted: [String]) {
        #expect(StIgnore.parse(text) == .unmanaged(unrepresentable: quoted))
    }
}

@Suite(.timeLimit(.minutes(5)))
struct GlobTests {
    @Test(arguments: [
        ("*.jpg", "a.jpg", true), ("*.jpg", "d/a.jpg", false), ("**/*.jpg", "d/e/a.jpg", true),
        ("**", "anything/at/all", true), ("a?c", "abc", true), ("a?c", "a/c", false), ("[ab]x", "bx", true),
        ("[!ab]x", "bx", false), ("[a-c]x", "cx", true), ("{foo,bar}.txt", "bar.txt", true),
        ("{foo,bar}.txt", "baz.txt", false), ("\\*.txt", "*.txt", true), ("\\*.txt", "a.txt", false),
        ("photos/20??/*", "photos/2025/x.jpg", true), ("photos/20??/*", "photos/2025/d/x.jpg", false),
    ])
    func matches(pattern: String, path: String, want: Bool) throws {
        #expect(try Glob(pattern).matches(path) == want)
    }

    @Test(arguments: ["[abc", "{a,b", "trailing\\"])
    func badPatterns(_ pattern: String) {
        #expect(throws: GlobError.self) { try Glob(pattern) }
    }

    /// Names come from peers: a pattern's match work is bounded by name x pattern, whatever
    /// the stars. Backtracking took 3.3 s for the first case and over a minute for the others.
    @Test(.timeLimit(.minutes(1)), arguments: [
        ("longname/*_*_*_*_*.jpg", "longname/" + String(repeating: "a_", count: 112)),
        ("**/*_*_*_*_*_*_*_*.jpg", "longname/" + String(repeating: "a_", count: 112)),
        (String(repeating: "*a", count: 20) + "b", String(repeating: "a", count: 45)),
        ("{**,*}{**,*}{**,*}{**,*}{**,*}{**,*}{**,*}{**,*}x", String(repeating: "a/", count: 100)),
        (String(repeating: "**", count: 30) + "/x", String(repeating: "aa/", count: 80)),
    ])
    func adversarialNamesAndPatternsMatchInLinearWork(pattern: String, name: String) throws {
        let glob = try Glob(pattern)
        let (matched, visits) = glob.run(name)
        #expect(!matched)
        // Each character visits each state at most once per way into it (two at most: itself
        // and the state before it).
        let bound = (name.count + 1) * glob.program.nodes.count * 4
        #expect(visits <= bound, "\(visits) state visits for a \(name.count)-character name and \(glob.program.nodes.count) states")
    }

    /// The automaton decides as the backtracking definition does, on seeded random patterns and
    /// names over a small alphabet (where every token kind meets every other).
    @Test func automatonAgreesWithTheBacktrackingDefinition() throws {
        var random = SplitMix64(seed: 0x5EED_6106)
        let pieces = ["a", "b", "/", "*", "**", "?", "[ab]", "[!a]", "{a,b/}", "{,*}", "\\*"]
        let letters: [Character] = ["a", "b", "/", "*"]
        for round in 0..<4000 {
            let pattern = (0..<Int.random(in: 1...6, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
            let name = String((0..<Int.random(in: 0...8, using: &random)).map { _ in letters.randomElement(using: &random)! })
            let glob = try Glob(pattern)
            let want = BacktrackingGlob.match(glob.tokens[...], Array(name)[...])
            #expect(glob.matches(name) == want, "round \(round) (seed 0x5EED6106): \"\(pattern)\" against \"\(name)\"")
        }
    }
}

/// The glob's definition, as plain backtracking (exponential: small inputs only).
enum BacktrackingGlob {
    static func match(_ tokens: ArraySlice<Glob.Token>, _ text: ArraySlice<Character>) -> Bool {
        guard let token = tokens.first else { return text.isEmpty }
        let rest = tokens.dropFirst()
        switch token {
        case .literal(let ch):
            return text.first == ch && match(rest, text.dropFirst())
        case .any:
            guard let ch = text.first, ch != "/" else { return false }
            return match(rest, text.dropFirst())
        case .characterClass(let ranges, let negated):
            guard let ch = text.first, ch != "/" else { return false }
            return ranges.contains { $0.contains(ch) } != negated && match(rest, text.dropFirst())
        case .star, .doubleStar:
            var i = text.startIndex
            while true {
                if match(rest, text[i...]) { return true }
                guard i < text.endIndex, token == .doubleStar || text[i] != "/" else { return false }
                i += 1
            }
        case .alternatives(let options):
            return options.contains { match(ArraySlice($0 + Array(rest)), text) }
        }
    }
}
