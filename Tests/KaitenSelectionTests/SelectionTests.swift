import Testing

@testable import KaitenSelection

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
}

/// Names `.stignore` cannot spell exactly are refused, never turned into another name (issue
/// 19, item 5); CRLF and empty `.stignore` files are read as syncthing reads them (item 10);
/// rendering is linear in the selected paths (item 9).
struct UnrepresentableNameTests {
    @Test(arguments: ["odd/trail.txt ", "odd/new\nline.txt", "odd/tab\there", " lead.txt", "cr\r.txt"])
    func namesNoStIgnoreLineCanSpellAreRefused(_ name: String) {
        var selection = SelectionFile()
        #expect {
            _ = try selection.select(name)
        } throws: { error in
            guard let error = error as? SelectionError else { return false }
            return error.code == .unrepresentable && "\(error)".contains("cannot be selected by name")
        }
        #expect(selection.paths.isEmpty)
        #expect(selection.render().isEmpty)
    }

    @Test func aNameWithAnInnerSpaceIsFine() throws {
        var selection = SelectionFile()
        #expect(try selection.select("odd/two words.txt") == .added)
        // Only the ends of the whole line are trimmed: a component may begin with a space.
        #expect(try selection.select("odd/ lead.txt") == .added)
        #expect(try SelectionFile.parse(selection.render(), file: "s").paths == ["odd/two words.txt", "odd/ lead.txt"])
    }

    @Test func quotingFollowsTheShell() {
        #expect(PathRules.quoted("plain/name.txt") == "plain/name.txt")
        #expect(PathRules.quoted("odd/new\nline.txt") == "'odd/new'$'\\n''line.txt'")
        #expect(PathRules.quoted("it's") == "'it'\\''s'")
        #expect(PathRules.quoted("trail ") == "'trail '")
    }

    @Test func aCRLFStIgnoreIsInTheSelectiveGrammar() {
        let text = "(?d).DS_Store\r\n!/photos/2025\r\n!/docs\r\n*\r\n"
        #expect(StIgnore.parse(text) == .managed(globalIgnores: [".DS_Store"], selected: ["photos/2025", "docs"]))
    }

    @Test func anEmptyStIgnoreHoldsNothingKaitenCannotWrite() {
        #expect(StIgnore.parse("") == .managed(globalIgnores: [], selected: []))
        #expect(StIgnore.parse("\n\n// a comment\n") == .managed(globalIgnores: [], selected: []))
    }

    @Test func renderingAQuarterMillionPathsLeavesOutCoveredOnes() {
        var paths: [String] = []
        for i in 0..<250_000 { paths.append("big/d\(i % 500)/f\(i).jpg") }
        paths.append("big/d7")
        let text = StIgnore.render(globalIgnores: [], selected: paths)
        let lines = text.split(separator: "\n")
        #expect(lines.count == 250_000 - 500 + 1 + 1)
        #expect(lines.contains("!/big/d7"))
        #expect(!lines.contains("!/big/d7/f7.jpg"))
    }
}

/// Issue 10, item 23: an indented line is refused at its line, never trimmed into another name.
struct IndentedLineTests {
    @Test func anIndentedLineIsRefusedWithItsNumber() {
        #expect {
            _ = try SelectionFile.parse("photos\n  docs\n", file: "s.txt")
        } throws: { error in
            "\(error)".contains("s.txt:2") && "\(error)".contains("begins with whitespace")
        }
        #expect((try? SelectionFile.parse("# indented comments are fine\n  # like this\n\n", file: "s.txt")) != nil)
    }
}
