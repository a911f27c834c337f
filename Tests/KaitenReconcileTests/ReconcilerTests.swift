import KaitenIndex
import KaitenProtocol
import KaitenScan
import Testing

@testable import KaitenReconcile

/// One case per rule of the plan (issue 5 §4).
@Suite(.timeLimit(.minutes(5)))
struct PullRuleTests {
    @Test func aSelectedFileAbsentLocallyIsPulledWithItsParents() throws {
        var f = Fixture()
        f.announce("photos", type: .directory)
        f.announce("photos/2025", type: .directory)
        f.announce("photos/2025/a.jpg", size: 3_100_000)
        f.announce("photos/2024/b.jpg")
        f.selection = "photos/2025\n"
        let plan = try f.plan()
        #expect(plan.lines == ["mkdir photos", "mkdir photos/2025", "pull photos/2025/a.jpg"])
        #expect(plan.actions.last?.size == 3_100_000)
        #expect(plan.actions.last?.peers == [Fixture.peerA.description])
        #expect(plan.conflicts.isEmpty)
    }

    @Test func aSelectedFileEqualToTheGlobalVersionIsInSync() throws {
        var f = Fixture()
        f.announce("a.txt", "same")
        f.onDisk("a.txt", "same")
        f.selection = "a.txt\n"
        f.stignore = "!/a.txt\n*\n"
        let plan = try f.plan()
        #expect(plan.actions.isEmpty && plan.conflicts.isEmpty && !plan.stignore.changed)
    }

    @Test func anUnchangedSyncedFileIsUpdatedWhenTheGlobalVersionMoves() throws {
        var f = Fixture()
        f.announce("a.txt", "new", version: 2)
        f.onDisk("a.txt", "old", synced: (1, "old"))
        f.selection = "a.txt\n"
        #expect(try f.plan().lines == ["pull a.txt"])
    }

    @Test func selectingAPathAbsentLocallyIsNeverADeletion() throws {
        var f = Fixture()
        f.announce("gone.txt", deleted: true)
        f.announce("here.txt")
        f.selection = "gone.txt\nhere.txt\n"
        let plan = try f.plan()
        #expect(plan.lines == ["pull here.txt"])
    }

    @Test func aFileNoPeerHoldsValidlyIsNotPulled() throws {
        var f = Fixture()
        f.announce("a.txt", invalid: true)
        f.selection = "a.txt\n"
        let plan = try f.plan()
        #expect(plan.actions.isEmpty)
        #expect(plan.warnings.contains { $0.contains("no peer holds a valid copy") })
    }

    @Test func aSymlinkIsPulledAsASymlink() throws {
        var f = Fixture()
        f.announce("link", type: .symlink)
        f.selection = "link\n"
        #expect(try f.plan().actions.map(\.type) == [.symlink])
    }
}

@Suite(.timeLimit(.minutes(5)))
struct DeleteRuleTests {
    @Test func aDeselectedCopyEqualToTheGlobalVersionIsDeletedWhenAPeerHoldsIt() throws {
        var f = Fixture()
        f.announce("old/b.mkv", "movie")
        f.announce("old", type: .directory)
        f.onDisk("old", kind: .directory)
        f.onDisk("old/b.mkv", "movie")
        let plan = try f.plan()
        #expect(plan.lines == ["delete old/b.mkv", "rmdir old"])
    }

    @Test func fewerHoldersThanRequiredIsALastCopyConflict() throws {
        var f = Fixture()
        f.announce("b.mkv", "movie")
        f.onDisk("b.mkv", "movie")
        f.requirePeers = 2
        let plan = try f.plan()
        #expect(plan.actions.isEmpty)
        #expect(plan.conflictLines == ["last-copy b.mkv"])
        f.announce("b.mkv", "movie", by: Fixture.peerB)
        #expect(try f.plan().lines == ["delete b.mkv"])
    }

    @Test func aDeselectedCopyOfTheVersionKaitenSyncedIsDeletedEvenIfTheGlobalMovedOn() throws {
        var f = Fixture()
        f.announce("b.txt", "v2", version: 2)
        f.onDisk("b.txt", "v1", synced: (1, "v1"))
        #expect(try f.plan().lines == ["delete b.txt"])
    }

    @Test func aSelectedFileDeletedGloballyIsDeletedWhenUnchangedSinceSync() throws {
        var f = Fixture()
        f.announce("docs", type: .directory)
        f.announce("docs/a.txt", version: 2, deleted: true)  // a deletion bumps the version
        f.onDisk("docs", kind: .directory)
        f.onDisk("docs/a.txt", "v1", synced: (1, "v1"))
        f.selection = "docs\n"
        #expect(try f.plan().lines == ["delete docs/a.txt"])
    }

    @Test func aSelectedDirectoryDeletedGloballyIsRemovedOnceEmpty() throws {
        var f = Fixture()
        f.announce("docs", type: .directory, deleted: true)
        f.announce("docs/a.txt", version: 2, deleted: true)
        f.onDisk("docs", kind: .directory)
        f.onDisk("docs/a.txt", "v1", synced: (1, "v1"))
        f.selection = "docs\n"
        #expect(try f.plan().lines == ["delete docs/a.txt", "rmdir docs"])
    }

    @Test func aDirectoryHoldingAnythingElseIsKept() throws {
        var f = Fixture()
        f.announce("old/b.mkv", "movie")
        f.onDisk("old", kind: .directory)
        f.onDisk("old/b.mkv", "movie")
        f.onDisk("old/mine.txt", "local")
        let plan = try f.plan()
        #expect(plan.lines == ["delete old/b.mkv"])
        #expect(plan.conflictLines == ["extraneous old/mine.txt"])
    }

    @Test func deletionsWaitForAKnownIndexFromSomePeer() throws {
        var f = Fixture()
        f.checkpoints = []
        f.onDisk("a.txt")
        let plan = try f.plan()
        #expect(plan.actions.isEmpty)
        #expect(plan.warnings.contains { $0.contains("no peer's index is known yet") })
    }
}

@Suite(.timeLimit(.minutes(5)))
struct ConflictRuleTests {
    @Test func aLocalFileAbsentFromTheGlobalIndexIsExtraneousAndJunkIsListedApart() throws {
        var f = Fixture()
        f.onDisk("notes.txt")
        f.onDisk("photos/.DS_Store")
        f.onDisk("photos", kind: .directory)
        let plan = try f.plan()
        #expect(plan.conflictLines == ["extraneous notes.txt"])
        #expect(plan.conflicts.first?.choices == [.select, .deleteLocal, .keep])
        #expect(plan.junk == ["photos/.DS_Store"])
        #expect(plan.actions.isEmpty)
    }

    @Test func aLocalFileKaitenNeverSyncedDifferentFromTheGlobalOneIsShadowed() throws {
        var f = Fixture()
        f.announce("a.txt", "theirs")
        f.onDisk("a.txt", "mine")
        #expect(try f.plan().conflictLines == ["shadowed a.txt"])
        f.selection = "a.txt\n"
        let plan = try f.plan()
        #expect(plan.conflictLines == ["shadowed a.txt"])
        #expect(plan.actions.isEmpty)
        #expect(plan.conflicts.first?.choices.contains(.useGlobal) == true)
    }

    @Test func aSyncedFileEditedLocallyWhileTheGlobalChangedIsALocalEdit() throws {
        var f = Fixture()
        f.announce("a.txt", "theirs v2", version: 2)
        f.onDisk("a.txt", "my edit", synced: (1, "v1"))
        f.selection = "a.txt\n"
        let plan = try f.plan()
        #expect(plan.conflictLines == ["local-edit a.txt"])
        #expect(plan.actions.isEmpty)
    }

    @Test func aSyncedFileEditedLocallyAndDeselectedIsALocalEdit() throws {
        var f = Fixture()
        f.announce("a.txt", "v1", version: 1)
        f.onDisk("a.txt", "my edit", synced: (1, "v1"))
        let plan = try f.plan()
        #expect(plan.conflictLines == ["local-edit a.txt"])
        #expect(plan.actions.isEmpty)
    }

    @Test func aSyncedFileEditedLocallyAndDeletedGloballyIsALocalEdit() throws {
        var f = Fixture()
        f.announce("a.txt", deleted: true)
        f.onDisk("a.txt", "my edit", synced: (1, "v1"))
        f.selection = "a.txt\n"
        #expect(try f.plan().conflictLines == ["local-edit a.txt"])
    }

    @Test func aSyncedFileEditedLocallyIsNeverOverwrittenEvenIfTheGlobalDidNotMove() throws {
        var f = Fixture()
        f.announce("a.txt", "v1", version: 1)
        f.onDisk("a.txt", "my edit", synced: (1, "v1"))
        f.selection = "a.txt\n"
        let plan = try f.plan()
        #expect(plan.conflictLines == ["local-edit a.txt"])
        #expect(plan.actions.isEmpty)
    }

    @Test func aDeselectedFileDeletedEverywhereElseIsKeptAsALastCopy() throws {
        var f = Fixture()
        f.announce("a.txt", deleted: true)
        f.onDisk("a.txt", "v1", synced: (1, "v1"))
        #expect(try f.plan().conflictLines == ["last-copy a.txt"])
    }

    @Test func aLocalFileWhereSelectedFilesNeedADirectoryBlocksThem() throws {
        var f = Fixture()
        f.announce("d", type: .directory)
        f.announce("d/x.txt")
        f.onDisk("d", "i am a file")
        f.selection = "d\n"
        let plan = try f.plan()
        #expect(plan.actions.isEmpty)
        #expect(plan.conflictLines == ["shadowed d"])
    }
}

@Suite(.timeLimit(.minutes(5)))
struct StIgnoreAndSelectionTests {
    @Test func theStIgnoreFollowsSushitrainsGrammar() throws {
        var f = Fixture()
        for p in ["b/c.txt", "a [1].txt", "x*y", "!bang", "with space", "café", "z"] { f.announce(p) }
        f.announce("b", type: .directory)
        f.selection = """
            # comment
            (?d).DS_Store
            z
            b
            b/c.txt
            a \\[1\\].txt
            x\\*y
            !bang
            with space
            café
            """ + "\n"
        let plan = try f.plan()
        #expect(plan.stignore.changed)
        #expect(plan.stignore.managed)
        #expect(
            plan.stignore.content == """
                (?d).DS_Store
                !/\\!bang
                !/a \\[1\\].txt
                !/b
                !/café
                !/with space
                !/x\\*y
                !/z
                *
                """ + "\n")
        #expect(Set(plan.lines) == Set(["pull a [1].txt", "pull x*y", "pull !bang", "pull with space", "pull café", "pull z", "mkdir b", "pull b/c.txt"]))
    }

    @Test func anUnchangedStIgnoreIsNotRewritten() throws {
        var f = Fixture()
        f.announce("a")
        f.selection = "a\n"
        f.stignore = "!/a\n*\n"
        #expect(try f.plan().stignore.changed == false)
    }

    @Test func globsExpandAgainstTheGlobalIndexAndUnmatchedLinesWarn() throws {
        var f = Fixture()
        for p in ["docs/a.pdf", "docs/b.pdf", "docs/c.txt", "docs/sub/d.pdf"] { f.announce(p) }
        f.selection = "docs/*.pdf\nmissing.txt\nnope/**\n"
        let plan = try f.plan()
        #expect(plan.lines == ["mkdir docs", "pull docs/a.pdf", "pull docs/b.pdf"])
        #expect(plan.stignore.content == "!/docs/a.pdf\n!/docs/b.pdf\n!/missing.txt\n*\n")
        #expect(plan.warnings.contains { $0.contains("\"missing.txt\" matches nothing") })
        #expect(plan.warnings.contains { $0.contains("\"nope/**\" matches nothing") })
    }

    @Test func globalIgnoreLinesKeepMatchingFilesOutOfTheSelection() throws {
        var f = Fixture()
        f.announce("photos/a.jpg")
        f.announce("photos/a.json")
        f.selection = "(?d)*.json\nphotos\n"
        #expect(try f.plan().lines == ["mkdir photos", "pull photos/a.jpg"])
    }

    @Test func anUnmanagedStIgnoreStopsEverythingButTheReport() throws {
        var f = Fixture()
        f.announce("a.txt")
        f.announce("b.txt", "same")
        f.onDisk("b.txt", "same")
        f.selection = "a.txt\n"
        f.stignore = "*.tmp\n!/a.txt\n*\n"
        let plan = try f.plan()
        #expect(plan.actions.isEmpty)
        #expect(!plan.stignore.managed && !plan.stignore.changed)
        #expect(plan.stignore.content == f.stignore)
        #expect(plan.warnings.contains { $0.contains("kaiten adopt f") && $0.contains("\"*.tmp\"") })
    }
}

@Suite(.timeLimit(.minutes(5)))
struct BaselineTests {
    @Test func theLocalDigestCoversEveryTouchedPath() throws {
        var f = Fixture()
        f.announce("a.txt")
        f.announce("b.txt", "v2", version: 2)
        f.onDisk("b.txt", "v1", synced: (1, "v1"))
        f.selection = "a.txt\nb.txt\n"
        let first = try f.baseline()
        #expect(try f.baseline() == first)
        f.local["b.txt"]?.modifiedNs = 2
        #expect(try f.baseline().localDigest != first.localDigest)
        f.local["b.txt"]?.modifiedNs = 1
        f.onDisk("a.txt", "appeared")
        #expect(try f.baseline().localDigest != first.localDigest)
    }

    @Test func theBaselineNamesEachPeersIndexAndTheInputsHashes() throws {
        var f = Fixture()
        f.selection = "a\n"
        f.stignore = "*\n"
        let baseline = try f.baseline()
        #expect(baseline.peers == [.init(device: Fixture.peerA.description, indexID: "1", sequence: 10)])
        #expect(baseline.selectionSHA256 == Reconciler.sha256Hex(Array("a\n".utf8)))
        #expect(baseline.stignoreSHA256 == Reconciler.sha256Hex(Array("*\n".utf8)))
    }

    @Test func confirmingRecordsTheGlobalVersionOfEqualContent() {
        var f = Fixture()
        f.announce("a.txt", "same", version: 7)
        f.announce("b.txt", "theirs")
        f.onDisk("a.txt", "same")
        f.onDisk("b.txt", "mine")
        #expect(Reconciler.confirmSynced(&f.local, global: f.global) == 1)
        #expect(f.local["a.txt"]?.synced?.version == Fixture.version(7))
        #expect(f.local["b.txt"]?.synced == nil)
        #expect(Reconciler.confirmSynced(&f.local, global: f.global) == 0)
    }

    @Test func summaryCountsAndBytes() throws {
        var f = Fixture()
        f.announce("a", size: 10)
        f.announce("b", size: 5)
        f.onDisk("c")
        f.announce("c")
        f.selection = "a\nb\n"
        let plan = Plan(lineage: "l", planID: "p", createdAt: "t", deviceID: "d", baseline: .init(configSHA256: "", folders: []), folders: [try f.plan()])
        #expect(plan.summary.pull == 2 && plan.summary.pullBytes == 15)
        #expect(plan.summary.delete == 1 && plan.summary.deleteBytes == 100)
        #expect(plan.summary.hasChanges)
    }
}

/// A service's round plans only the paths a peer's update named (issue 12, latency): what it
/// plans for them must be what the whole plan says of them, and a plan that needs more than
/// its own paths must say so (``FolderPlan/isPathLocal``) so that the service plans whole.
@Suite(.timeLimit(.minutes(5)))
struct ScopedPlanTests {
    func fixture() -> Fixture {
        var f = Fixture()
        f.announce("photos", type: .directory)
        f.announce("photos/a.jpg", "a2", version: 2)  // changed on the peer
        f.onDisk("photos", kind: .directory)
        f.onDisk("photos/a.jpg", "a1", synced: (1, "a1"))
        f.announce("photos/b.jpg", "b")  // in sync
        f.onDisk("photos/b.jpg", "b", synced: (1, "b"))
        f.announce("photos/new/c.jpg", "c")  // new, under a directory not here yet
        f.announce("other/d.txt", "d", version: 3)  // not selected
        f.selection = "photos\n"
        f.stignore = "!/photos\n*\n"
        return f
    }

    @Test func aScopedPlanIsTheWholePlanOfItsPaths() throws {
        var f = fixture()
        let whole = try f.plan()
        #expect(whole.lines == ["mkdir photos/new", "pull photos/a.jpg", "pull photos/new/c.jpg"])
        for scope: Set<String> in [["photos/a.jpg"], ["photos/new/c.jpg"], ["photos/b.jpg", "other/d.txt"], ["photos/a.jpg", "photos/new/c.jpg", "other/d.txt"]] {
            f.scope = scope
            let scoped = try f.plan()
            #expect(scoped.isPathLocal, "\(scope)")
            // The whole plan's actions on these paths, and the parents their pulls need.
            let expected = whole.actions.filter { action in
                scope.contains(action.path) || (action.action == .mkdir && scope.contains { $0.hasPrefix(action.path + "/") })
            }
            #expect(scoped.actions == expected, "\(scope)")
        }
    }

    @Test func aPlanThatReachesAcrossPathsIsNotPathLocal() throws {
        // Deleted on the peer (a rename is found across paths).
        var f = fixture()
        f.announce("photos/b.jpg", "b", version: 2, deleted: true)
        f.scope = ["photos/b.jpg"]
        #expect(try f.plan().lines == ["delete photos/b.jpg"])
        #expect(try !f.plan().isPathLocal)

        // A local edit of a file the peer changed too: a conflict.
        f = fixture()
        f.onDisk("photos/a.jpg", "mine", synced: (1, "a1"))
        f.scope = ["photos/a.jpg"]
        #expect(try !f.plan().conflicts.isEmpty && !f.plan().isPathLocal)

        // A new .stignore (the selection changed).
        f = fixture()
        f.stignore = nil
        f.scope = ["photos/a.jpg"]
        #expect(try f.plan().stignore.changed && !f.plan().isPathLocal)
    }
}
