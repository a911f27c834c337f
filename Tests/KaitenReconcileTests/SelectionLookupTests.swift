import KaitenIndex
import KaitenProtocol
import Testing

@testable import KaitenReconcile
import KaitenSelection

/// Whether a path is selected (itself, or through a selected ancestor) answers the same
/// through the roots' byte table (all roots ASCII) as through the set of roots, for ASCII
/// paths, non-ASCII ones (canonical equivalence: a decomposed "é" is the precomposed one) and
/// odd shapes (a root that is a prefix of a sibling's name, deep paths, an empty path).
struct SelectionLookupTests {
    static func reference(_ roots: Set<String>, _ path: String) -> Bool {
        if roots.contains(path) { return true }
        var current = Substring(path)
        while let slash = current.lastIndex(of: "/") {
            current = current[..<slash]
            if roots.contains(String(current)) { return true }
        }
        return false
    }

    @Test func theByteTableAnswersAsTheSetOfRoots() throws {
        let paths = [
            "photos", "photos/2024", "photos/2024/a.jpg", "photos/20240/a.jpg", "photos2/a", "docs/Café/menu.pdf",
            "docs/Cafe\u{301}/menu.pdf", "docs/café", "x/y/z/w/v/u", "x/y/z/w/v/u/t", "x/y", "", "/", "a/", "music/K",
            "music/\u{212A}",
        ]
        let selections = [
            "photos/2024\ndocs\n", "photos/2024/a.jpg\nx/y/z/w/v\n", "x\n", "music/K\n", "docs/café\n", "docs/Cafe\u{301}\nphotos\n",
        ]
        var global = GlobalIndex()
        for (i, path) in paths.enumerated() where !path.isEmpty && !path.hasSuffix("/") {
            var file = BEPFileInfo()
            file.name = path
            file.sequence = Int64(i + 1)
            global.announce(file, by: Fixture.peerA)
        }
        for text in selections {
            let file = try SelectionFile.parse(text, file: "sel.txt")
            let selection = Selection(file, global: global)
            for path in paths {
                #expect(selection.isSelected(path) == Self.reference(selection.roots, path), "\(text.debugDescription) for \(path.debugDescription)")
            }
        }
    }
}
