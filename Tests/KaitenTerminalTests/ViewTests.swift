import KaitenApp
import KaitenTerminal
import Testing

/// The terminal's views are strings made from values: what a user reads, checked without a process.
@Suite struct ViewTests {
    @Test func aTableAlignsEveryColumnButTheLast() {
        let lines = Terminal.table(["ID", "PATH"], [["photos", "/srv/photos"], ["a", "/a"]])
        #expect(lines == ["ID      PATH", "photos  /srv/photos", "a       /a"])
    }

    @Test func aPathIsQuotedOnlyWhenAShellWouldSplitOrExpandIt() {
        #expect(Terminal.shellQuoted("2025/a_b-c.jpg") == "2025/a_b-c.jpg")
        #expect(Terminal.shellQuoted("my photo.jpg") == "'my photo.jpg'")
        #expect(Terminal.shellQuoted("it's $HOME") == "'it'\\''s $HOME'")
    }

    @Test func aDeselectionThatCannotBeDoneIsARefusal() {
        #expect(SelectionView.line(Deselected.path("a")) == ("deselected a", false))
        let through = SelectionView.line(Deselected.selectedThrough("a/b", parent: "a"))
        #expect(through.refused && through.text.contains("deselect a"))
        let pattern = SelectionView.line(Deselected.selectedByPattern("a.jpg", pattern: "*.jpg", file: "photos.txt"))
        #expect(pattern.refused && pattern.text.contains("edit photos.txt"))
    }

    @Test func aSelectedPatternSaysHowManyPathsItCovers() {
        #expect(SelectionView.line(Selected.pattern("*.jpg", matching: 1)) == "selected the pattern *.jpg (1 path now)")
        #expect(SelectionView.line(Selected.pattern("*.jpg", matching: 3)) == "selected the pattern *.jpg (3 paths now)")
    }

    @Test func aPeerIsShownByNameElseByTheFirstGroupOfItsID() {
        #expect(Terminal.peer("MFZWI3D-BONSGYC", name: "nas") == "nas")
        #expect(Terminal.peer("MFZWI3D-BONSGYC", name: "") == "MFZWI3D")
        #expect(Terminal.peer("MFZWI3D-BONSGYC", name: nil) == "MFZWI3D")
        #expect(Terminal.peerWithID("MFZWI3D-BONSGYC", name: "nas") == "nas (MFZWI3D)")
        #expect(Terminal.peerWithID("MFZWI3D-BONSGYC", name: "") == "(MFZWI3D)")
    }
}
