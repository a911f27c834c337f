import KaitenProtocol
import Testing

@testable import KaitenReconcile
import KaitenSelection

/// Need and completion in Kaiten's meaning: this device needs what its selection asks for;
/// a peer needs every live path whose global version it does not hold.
struct FolderCompletionTests {
    func local(_ fixture: Fixture) throws -> FolderCompletion {
        let file = try SelectionFile.parse(fixture.selection, file: "sel.txt")
        return FolderCompletion.local(global: fixture.global, selection: Selection(file, global: fixture.global), tree: fixture.local)
    }

    @Test func onlyTheSelectedPathsNotHereInTheirGlobalVersionAreNeeded() throws {
        var f = Fixture()
        f.announce("docs", type: .directory)
        f.announce("docs/a.txt", "a")
        f.announce("docs/b.txt", "b")
        f.announce("other/c.txt", "c")
        f.selection = "docs\n"
        f.onDisk("docs", kind: .directory)
        f.onDisk("docs/a.txt", "a")
        f.onDisk("docs/b.txt", "an older b")
        let c = try local(f)
        #expect(c.global.files == 3 && c.global.directories == 1 && c.global.bytes == 300)
        #expect(c.wanted.files == 2 && c.wanted.bytes == 200)
        // b differs in content; c is not selected; a and the directory are here.
        #expect(c.need.files == 1 && c.need.directories == 0 && c.need.bytes == 100)
        #expect(c.local.files == 2 && c.local.directories == 1)
        #expect(c.percent == 50)
    }

    @Test func nothingNeededIsAHundredAndOnlyDeletionsLeftIsNot() throws {
        var f = Fixture()
        f.announce("docs/a.txt", "a")
        f.announce("docs/gone.txt", "g", version: 2, deleted: true)
        f.selection = "docs\n"
        f.onDisk("docs/a.txt", "a")
        #expect(try local(f).percent == 100)
        f.onDisk("docs/gone.txt", "g")
        let c = try local(f)
        #expect(c.need.deleted == 1 && c.need.files == 0 && c.percent == 95)
    }

    @Test func aPeerNeedsTheGlobalVersionsItDoesNotHold() {
        var f = Fixture()
        f.announce("a.txt", "a", version: 2, by: Fixture.peerA)
        f.announce("a.txt", "a-old", version: 1, by: Fixture.peerB)
        f.announce("b.txt", "b", by: Fixture.peerA)
        f.announce("b.txt", "b", by: Fixture.peerB)
        let b = FolderCompletion.remote(global: f.global, device: Fixture.peerB)
        #expect(b.need.files == 1 && b.need.bytes == 100 && b.local.files == 1 && b.percent == 50)
        #expect(FolderCompletion.remote(global: f.global, device: Fixture.peerA).percent == 100)
    }

    @Test func theNeededPathsAreTheOnesCounted() throws {
        var f = Fixture()
        f.announce("docs", type: .directory)
        f.announce("docs/a.txt", "a")
        f.announce("docs/b.txt", "b")
        f.announce("docs/gone.txt", "g", version: 2, deleted: true)
        f.announce("other/c.txt", "c")
        f.selection = "docs\n"
        f.onDisk("docs/a.txt", "a")
        f.onDisk("docs/gone.txt", "g")
        let file = try SelectionFile.parse(f.selection, file: "sel.txt")
        var listed: [String] = []
        let c = FolderCompletion.local(global: f.global, selection: Selection(file, global: f.global), tree: f.local) { listed.append($0.path) }
        #expect(listed.sorted() == ["docs", "docs/b.txt", "docs/gone.txt"])
        #expect(c.need.items == listed.count)
        var remote: [String] = []
        let r = FolderCompletion.remote(global: f.global, device: Fixture.peerA) { remote.append($0.path) }
        #expect(r.need.items == remote.count)
    }

    @Test func aFileNoPeerHoldsInThisContentIsALastCopy() {
        var f = Fixture()
        f.announce("shared.txt", "s")
        f.announce("edited.txt", "before")
        f.onDisk("shared.txt", "s")
        f.onDisk("edited.txt", "after")
        f.onDisk("mine.txt", "only here")
        let me = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")
        let copies = LastCopies.find(global: f.global, tree: f.local, me: me)
        #expect(copies.map(\.path) == ["edited.txt", "mine.txt"])
        #expect(copies.map(\.reason) == ["local-version", "local-only"])
    }
}
