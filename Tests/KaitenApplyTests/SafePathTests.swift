import Foundation
import Synchronization
import KaitenReconcile
import KaitenScan
import KaitenTestSupport
import Testing

@testable import KaitenApply
@testable import KaitenTransfer

@Suite(.timeLimit(.minutes(5)))
struct SafePathTests {
    @Test(arguments: ["../x", "a/../b", "/etc/passwd", "a//b", "a/", ".", "..", "", "./a", ".stfolder", ".stignore",
        ".stversions/x", "d/.syncthing.f.tmp", "~syncthing~f", "cafe\u{301}", "a/./b", "a/..", "../", "/", "//", "a\u{0}b",
        "d/~syncthing~x", "../\u{301}x", "a//\u{301}b", "/\u{301}etc"])
    func refusesNamesThatAreNotCleanOrAreReserved(_ name: String) {
        #expect(throws: ApplyError.self) { try SafePath.validate(name) }
    }

    @Test(arguments: ["a", "a/b c/d [1].txt", "café", "x/.stfolder", "!bang", "a*b?", "...", "a/.../b", ".a/..b/c..", "a.", ".x"])
    func acceptsOrdinaryNames(_ name: String) throws {
        try SafePath.validate(name)
    }

    @Test func theLastComponentIsAfterTheLastSlash() {
        #expect(SafePath.lastComponent("a/b/c.txt") == "c.txt")
        #expect(SafePath.lastComponent("c.txt") == "c.txt")
        #expect(SafePath.lastComponent("dir/café") == "café")
    }

    @Test func temporaryNamesFollowSyncthing() {
        #expect(SafePath.temporaryName(for: "a/b.txt") == "a/.syncthing.b.txt.tmp")
        #expect(SafePath.temporaryName(for: "b.txt") == ".syncthing.b.txt.tmp")
        let long = String(repeating: "x", count: 146)
        let temp = SafePath.temporaryName(for: "d/" + long)
        #expect(temp.hasPrefix("d/.syncthing.") && temp.hasSuffix(".tmp"))
        #expect(temp.count == "d/.syncthing.".count + 64 + 4)
        #expect(SafePath.temporaryName(for: String(repeating: "y", count: 145)).contains("yyyy"))
    }

    @Test func conflictNamesFollowSyncthing() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .current
        let date = calendar.date(from: DateComponents(year: 2026, month: 11, day: 22, hour: 3, minute: 48, second: 54))!
        #expect(SafePath.conflictName(for: "dir/hello.txt", date: date, shortID: "B6HUSE6") == "dir/hello.sync-conflict-20261122-034854-B6HUSE6.txt")
        #expect(SafePath.conflictName(for: "Makefile", date: date, shortID: "B6HUSE6") == "Makefile.sync-conflict-20261122-034854-B6HUSE6")
        #expect(SafePath.conflictName(for: ".bashrc", date: date, shortID: "B6HUSE6") == ".sync-conflict-20261122-034854-B6HUSE6.bashrc")
    }

    @Test func parentsThroughASymlinkAreRefused() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-safe")
        defer { dir.remove() }
        let outside = try TemporaryDirectory(prefix: "kaiten-outside")
        defer { outside.remove() }
        try FileManager.default.createSymbolicLink(atPath: dir.file("link"), withDestinationPath: outside.path)
        let error = #expect(throws: ApplyError.self) { try SafePath.prepareParents(root: dir.path, name: "link/x.txt") }
        #expect(error?.hint.contains("a symlink") == true)
        // A combining mark after the slash makes "/\u{301}" one Character; the file system
        // still sees "link" as the parent.
        let hidden = #expect(throws: ApplyError.self) { try SafePath.prepareParents(root: dir.path, name: "link/\u{301}x.txt") }
        #expect(hidden?.hint.contains("a symlink") == true)
        #expect(throws: ApplyError.self) { try SafePath.prepareParentsExisting(root: dir.path, name: "link/\u{301}x.txt") }
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside.path).isEmpty)
        try SafePath.prepareParents(root: dir.path, name: "new/deeper/x.txt")
        var isDirectory: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: dir.file("new/deeper"), isDirectory: &isDirectory) && isDirectory.boolValue)
    }
}

@Suite(.timeLimit(.minutes(5)))
struct DeleteLimitTests {
    @Test func parsesCountsAndShares() {
        #expect(DeleteLimit("10") == .count(10))
        #expect(DeleteLimit("50%") == .percent(50))
        #expect(DeleteLimit("x") == nil)
        #expect(DeleteLimit("-1") == nil)
        #expect(DeleteLimit("50%")!.allows(5, of: 10))
        #expect(!DeleteLimit("50%")!.allows(6, of: 10))
        #expect(DeleteLimit("3")!.allows(3, of: 3))
        #expect(!DeleteLimit("0")!.allows(1, of: 100))
    }
}

@Suite(.timeLimit(.minutes(5)))
struct LocalCheckTests {
    @Test func aPathChangedSinceThePlanIsLeftAlone() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-check")
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.file(".stfolder"), withIntermediateDirectories: true)
        try TestFiles.write(dir.file("a.txt"), "planned\n")
        let (tree, _) = try FolderScanner(root: dir.path).scan(previous: LocalTree())
        try Applier.checkUnchanged(root: dir.path, name: "a.txt", planned: tree["a.txt"])
        // Touched but the same content: still fine.
        var times = [timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2), timespec(tv_sec: 1_000, tv_nsec: 0)]
        utimensat(AT_FDCWD, dir.file("a.txt"), &times, 0)
        try Applier.checkUnchanged(root: dir.path, name: "a.txt", planned: tree["a.txt"])
        try TestFiles.write(dir.file("a.txt"), "edited!\n")
        #expect(throws: ApplyError.self) { try Applier.checkUnchanged(root: dir.path, name: "a.txt", planned: tree["a.txt"]) }
        // Planned absent, now present.
        #expect(throws: ApplyError.self) { try Applier.checkUnchanged(root: dir.path, name: "a.txt", planned: nil) }
        try Applier.checkUnchanged(root: dir.path, name: "absent.txt", planned: nil)
    }
}

/// syncthing's version names (lib/versioner TagFilename): the tag before the extension.
@Suite(.timeLimit(.minutes(5)))
struct VersionNameTests {
    @Test func theTagGoesBeforeTheExtension() {
        let date = Date(timeIntervalSince1970: 1_700_000_000)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyyMMdd-HHmmss"
        let tag = formatter.string(from: date)
        #expect(Versioner.versionName("a/b/photo.jpg", kind: .simple, at: date) == "a/b/photo~\(tag).jpg")
        #expect(Versioner.versionName("archive.tar.gz", kind: .staggered, at: date) == "archive.tar~\(tag).gz")
        #expect(Versioner.versionName("README", kind: .simple, at: date) == "README~\(tag)")
        #expect(Versioner.versionName("d/.hidden", kind: .simple, at: date) == "d/.hidden~\(tag)")
        #expect(Versioner.versionName("a/b/photo.jpg", kind: .trashcan, at: date) == "a/b/photo.jpg")
    }
}

/// Deletions run in batches on every core (`Blocking.map`): results come back in the items'
/// order whatever order the work finished in, every item runs exactly once, and the sequential
/// mode (archiving into .stversions) runs them one at a time.
@Suite(.timeLimit(.minutes(5)))
struct BlockingMapTests {
    @Test func resultsKeepTheItemsOrderAndEachRunsOnce() async {
        let runs = Mutex<[Int: Int]>([:])
        let items = Array(0..<2_000)
        let mapped = await Blocking.map(items) { item in
            // Later items finish first, so that the order has to be restored.
            if item % 7 == 0 { usleep(UInt32(2_000 - item) / 100) }
            runs.withLock { $0[item, default: 0] += 1 }
            return item * 3
        }
        #expect(mapped == items.map { $0 * 3 })
        #expect(runs.withLock { $0.count == items.count && $0.values.allSatisfy { $0 == 1 } })
    }

    @Test func sequentiallyNoTwoRunAtOnce() async {
        let state = Mutex((running: 0, most: 0))
        let mapped = await Blocking.map(Array(0..<200), concurrently: false) { item in
            state.withLock { $0.running += 1; $0.most = max($0.most, $0.running) }
            usleep(100)
            state.withLock { $0.running -= 1 }
            return item
        }
        #expect(mapped == Array(0..<200))
        #expect(state.withLock { $0.most } == 1)
    }
}

/// Pulls in flight spread over directories (their creates take the directory's lock).
@Suite(.timeLimit(.minutes(5)))
struct PullOrderTests {
    @Test func pullsAreTakenInTurnFromEachDirectoryKeepingEachDirectorysOrder() {
        let paths = ["a/1", "a/2", "a/3", "b/1", "top", "b/2", "c/d/1"]
        let pulls = paths.map { Action(action: .pull, path: $0, reason: "", type: .file) }
        let order = Applier.interleavedByDirectory(pulls).map(\.path)
        #expect(order == ["a/1", "b/1", "top", "c/d/1", "a/2", "b/2", "a/3"])
        #expect(Applier.interleavedByDirectory(Array(pulls.prefix(3))).map(\.path) == ["a/1", "a/2", "a/3"])
        #expect(Applier.interleavedByDirectory([]).isEmpty)
    }
}
