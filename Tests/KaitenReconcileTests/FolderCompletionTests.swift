import KaitenIndex
import KaitenProtocol
import KaitenScan
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

    /// The figures counted the slow way: every global version against the selection.
    static func walked(_ global: GlobalIndex, _ selection: Selection, _ tree: LocalTree) -> FolderCompletion {
        var result = FolderCompletion()
        for file in tree.files where file.kind == .file {
            result.local.files += 1
            result.local.bytes += file.size
        }
        result.local.directories = tree.files.filter { $0.kind == .directory }.count
        result.local.symlinks = tree.files.filter { $0.kind == .symlink }.count
        global.forEachGlobal { e in
            guard !e.file.isInvalid else { return }
            let selected = selection.isSelected(e.path)
            if e.file.isDeleted {
                if selected, tree[e.path] != nil { result.need.deleted += 1 }
                return
            }
            result.global.add(e.file.type, size: e.file.size)
            guard selected else { return }
            result.wanted.add(e.file.type, size: e.file.size)
            if let mine = tree[e.path],
                e.file.type == .directory ? mine.kind == .directory : Reconciler.contentHash(of: mine) == Reconciler.contentHash(of: e.file)
            {
                return
            }
            result.need.add(e.file.type, size: e.file.size)
        }
        return result
    }

    /// Only the selection's coverage is walked, the folder's figures taken from the index's
    /// tally: the result is the walk of every path's, for roots whose coverage is byte ranges
    /// and for one outside ASCII (whose coverage is everything); a peer's, from the tally, is
    /// the one its need list is counted with.
    @Test func theCoverageAndTheTallyCountWhatAWalkOfEveryPathCounts() throws {
        var f = Fixture()
        f.announce("docs", type: .directory)
        for name in ["docs/a.txt", "docs/b.txt", "docs-old/c.txt", "docsx", "other/d.txt", "other/deep/e.txt", "Zeta/f.txt"] {
            f.announce(name, name)
        }
        f.announce("docs/gone.txt", "g", version: 2, deleted: true)
        f.announce("docs/gone.txt", "g", version: 1, by: Fixture.peerB)
        f.announce("other/gone.txt", "h", version: 2, deleted: true)
        f.announce("docs/bad.txt", "x", invalid: true)
        f.announce("caf\u{E9}/g.txt", "g")
        f.announce("docs/b.txt", "b-old", version: 0, by: Fixture.peerB)
        f.onDisk("docs", kind: .directory)
        f.onDisk("docs/a.txt", "docs/a.txt")
        f.onDisk("docs/b.txt", "an older b")
        f.onDisk("docs/gone.txt", "g")
        f.onDisk("other/gone.txt", "h")
        for selection in ["docs\nother/deep\n", "docs/a.txt\nZeta\n", "cafe\u{301}\ndocs\n", "other\n"] {
            let file = try SelectionFile.parse(selection, file: "sel.txt")
            let chosen = Selection(file, global: f.global)
            var listed = 0
            let counted = FolderCompletion.local(global: f.global, selection: chosen, tree: f.local) { _ in listed += 1 }
            #expect(counted == Self.walked(f.global, chosen, f.local), "selection \(selection.debugDescription)")
            #expect(counted.need.items == listed)
        }
        for peer in [Fixture.peerA, Fixture.peerB] {
            var needed = 0
            let walked = FolderCompletion.remote(global: f.global, device: peer) { _ in needed += 1 }
            #expect(FolderCompletion.remote(global: f.global, device: peer) == walked)
            #expect(walked.need.items == needed)
        }
        #expect(FolderCompletion.remote(global: f.global, device: Fixture.peerB).need.deleted == 1)
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
