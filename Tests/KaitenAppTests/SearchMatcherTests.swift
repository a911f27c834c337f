import KaitenIndex
import Testing

@testable import KaitenApp

/// What the page's search box matches: text anywhere in the path ignoring case, a glob against
/// the name (or the path when it has a `/`), and the type, size and date bounds.
@Suite(.timeLimit(.minutes(1)))
struct SearchMatcherTests {
    func matcher(_ text: String, _ adjust: (inout SearchQuery) -> Void = { _ in }) throws -> SearchMatcher {
        var query = SearchQuery()
        query.text = text
        adjust(&query)
        return try SearchMatcher(query)
    }

    func matches(_ matcher: SearchMatcher, _ path: String, type: String = "file", size: Int64 = 10, modifiedS: Int64 = 1000) -> Bool {
        matcher.matches(path: path, type: type, size: size, modifiedS: modifiedS)
    }

    @Test func textIsFoundAnywhereInThePathIgnoringCase() throws {
        let text = try matcher("holiday")
        #expect(matches(text, "photos/Holiday 2024/a.jpg"))
        #expect(matches(text, "HOLIDAY.txt"))
        #expect(!matches(text, "photos/hol-iday.jpg"))
        #expect(matches(try matcher("café"), "docs/Café/menu.pdf"))
        #expect(matches(try matcher("e"), "Ärger/été"))
        #expect(matches(try matcher(""), "anything"))
    }

    @Test func aGlobMatchesTheNameOrWithASlashThePath() throws {
        let name = try matcher("*.JPG")
        #expect(matches(name, "a/b/IMG_1.JPG"))
        #expect(!matches(name, "a/b/IMG_1.jpg"))
        #expect(!matches(name, "a.JPG/readme"))
        let path = try matcher("photos/*/IMG_?.jpg")
        #expect(matches(path, "photos/2024/IMG_1.jpg"))
        #expect(!matches(path, "photos/2024/x/IMG_1.jpg"))
        #expect(matches(try matcher("photos/**"), "photos/2024/x/IMG_1.jpg"))
    }

    @Test func typeSizeAndDateBoundTheMatches() throws {
        let big = try matcher("") { $0.type = "file"; $0.minSize = 100; $0.maxSize = 200 }
        #expect(matches(big, "a", size: 150))
        #expect(!matches(big, "a", size: 99) && !matches(big, "a", size: 201))
        #expect(!matches(big, "a", type: "directory", size: 150))
        let recent = try matcher("") { $0.modifiedAfter = 1000; $0.modifiedBefore = 2000 }
        #expect(matches(recent, "a", modifiedS: 1000) && !matches(recent, "a", modifiedS: 2000) && !matches(recent, "a", modifiedS: 999))
    }

    /// The name-only check a search makes before reading a path's announcements says yes for
    /// every name the whole match accepts (and no where the name alone rules it out).
    @Test func theNameAloneDecidesAsTheWholeMatchDoes() throws {
        let names = ["photos/Holiday 2024/a.jpg", "HOLIDAY.txt", "photos/hol-iday.jpg", "docs/Café/menu.pdf", "Ärger/été",
                     "a/b/IMG_1.JPG", "a.JPG/readme", "photos/2024/IMG_1.jpg", "photos/2024/x/IMG_1.jpg", "x"]
        for text in ["holiday", "café", "e", "", "*.JPG", "photos/*/IMG_?.jpg", "photos/**", "IMG"] {
            let m = try matcher(text)
            for name in names {
                var bytes = name
                let early = bytes.withUTF8 { m.mayMatch(name: UnsafeRawBufferPointer($0)) }
                #expect(early == matches(m, name), "\(text) against \(name)")
            }
        }
    }

    @Test func aBadGlobOrTypeIsRefusedAndNamed() {
        #expect(throws: ArgumentError.self) { try matcher("[unclosed") }
        #expect(throws: ArgumentError.self) { try matcher("x") { $0.type = "fifo" } }
    }
}
