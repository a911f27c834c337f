import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenIndex

/// The snapshot beside an index log (issue 13, item 2): a view read from it plus the log's tail
/// is the view a full replay gives, in every state the log can be in; a snapshot that is torn,
/// damaged or from another generation of the log is never used.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct IndexSnapshotTests {
    static let peerA = IndexLogTests.peerA
    static let peerB = IndexLogTests.peerB

    /// Everything a view says, in a comparable form.
    struct View: Equatable, CustomStringConvertible {
        var entries: [String]
        var checkpoints: [String]
        var liveBytes: Int64
        var pathCount: Int
        var globals: [String]

        init(_ log: IndexLog) {
            var entries: [String] = []
            log.index.forEachEntry { path, device, entry in
                entries.append("\(path)|\(device.shortDescription)|\(entry)")
            }
            self.entries = entries.sorted()
            checkpoints = log.checkpoints.map { "\($0.key.shortDescription) \($0.value.indexID) \($0.value.maxSequence)" }.sorted()
            liveBytes = log.liveBytes
            pathCount = log.index.pathCount
            globals = log.index.allGlobal().map { "\($0.path) \($0.holders.map(\.shortDescription)) \($0.file.version.descriptions)" }
        }

        var description: String {
            "\(pathCount) paths, \(entries.count) entries, live \(liveBytes)"
        }

        /// The first difference, for a failure message.
        func difference(from other: View) -> String {
            if let i = zip(entries, other.entries).enumerated().first(where: { $0.element.0 != $0.element.1 })?.offset { return "entry: \(entries[i]) vs \(other.entries[i])" }
            if let i = zip(globals, other.globals).enumerated().first(where: { $0.element.0 != $0.element.1 })?.offset { return "global: \(globals[i]) vs \(other.globals[i])" }
            if checkpoints != other.checkpoints { return "checkpoints: \(checkpoints) vs \(other.checkpoints)" }
            return "counts"
        }
    }

    /// The view of a full replay: the log opened with its snapshot out of the way.
    static func fullReplay(_ path: String, folder: String = "photos") throws -> View {
        let dir = try TemporaryDirectory(prefix: "kaiten-replay")
        defer { dir.remove() }
        let copy = dir.file("copy.log")
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        let log = try IndexLog.open(path: copy, folderID: folder, readOnly: true)
        defer { log.close() }
        #expect(!log.index.hasSnapshot)
        return View(log)
    }

    /// A log with some of everything: two peers, several versions, a deletion, a directory, a
    /// symlink, an invalid entry, a name outside ASCII.
    static func fill(_ log: IndexLog, from first: Int, count: Int, peer: DeviceID = peerA, indexID: UInt64 = 11, full: Bool = false) throws {
        var files: [BEPFileInfo] = []
        for i in first..<(first + count) {
            let name = i % 7 == 0 ? "dir\(i % 5)/é\(i).jpg" : "dir\(i % 5)/f\(i).bin"
            files.append(IndexLogTests.file(name, size: Int64(i + 1), sequence: Int64(i + 1), version: [(1, UInt64(i)), (2, 3)], deleted: i % 11 == 0, invalid: i % 13 == 0))
        }
        files.append(IndexLogTests.file("dir\(first % 5)", sequence: Int64(first + count + 1), version: [(1, 1)], type: .directory))
        var link = IndexLogTests.file("link\(first)", sequence: Int64(first + count + 2), version: [(1, 2)], type: .symlink)
        link.symlinkTarget = "dir0/f1.bin"
        files.append(link)
        try log.apply(device: peer, indexID: indexID, files: files, isFullIndex: full)
    }

    /// Closes the writer's log; its view must be a full replay's, and that of the log reopened
    /// with its snapshot (replaying more than `replayedOver` records of tail).
    static func expectReopenedViewIsTheWritersAndAFullReplays(_ log: IndexLog, path: String, replayedOver: Int) throws {
        let writer = View(log)
        log.close()
        let full = try fullReplay(path)
        #expect(writer == full, "\(writer.difference(from: full))")
        let again = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
        defer { again.close() }
        #expect(again.index.hasSnapshot)
        #expect(again.recordsReplayed > replayedOver)
        #expect(View(again) == writer, "\(View(again).difference(from: writer))")
    }

    func withLog(_ body: (String) throws -> Void) throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-snapshot")
        defer { dir.remove() }
        try body(dir.file("photos.log"))
    }

    /// Two devices' full indexes, a snapshot of them, then a tail: changes to snapshotted
    /// paths, new paths, a peer's full index that voids what the snapshot holds of it, then
    /// more changes (paths changed twice, by one device and by both; replay searches the
    /// snapshot for them together at the end). With `reordering`, paths both devices
    /// announced change on the one that announced first: a view lists its announcements in
    /// another order than a full replay does (the order says nothing; the bytes differ).
    static func fillASnapshotAndATail(_ log: IndexLog, reordering: Bool = true) throws {
        try fill(log, from: 0, count: 300, full: true)
        try fill(log, from: 0, count: 100, peer: peerB, indexID: 22, full: true)
        try log.writeSnapshot()
        try fill(log, from: 250, count: 100)
        try fill(log, from: 40, count: 10, peer: peerB, indexID: 23, full: true)
        try fill(log, from: 260, count: 5)
        if reordering { try fill(log, from: 30, count: 20) }
        try fill(log, from: 45, count: 10, peer: peerB, indexID: 23)
    }

    @Test func aSnapshotPlusTheTailIsTheViewOfAFullReplay() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try Self.fillASnapshotAndATail(log)
            #expect(log.index.hasSnapshot)
            #expect(FileManager.default.fileExists(atPath: log.snapshotPath))
            let expected = try Self.fullReplay(path)
            #expect(View(log) == expected, "the writer's own view: \(View(log).difference(from: expected))")
            log.close()

            for readOnly in [true, false] {
                let again = try IndexLog.open(path: path, folderID: "photos", readOnly: readOnly)
                #expect(again.index.hasSnapshot)
                #expect(again.snapshotRejection == nil)
                #expect(again.snapshotCovers > 0 && again.snapshotCovers < again.fileSize)
                #expect(View(again) == expected)
                // Block lists are read from the log at the offsets the snapshot kept.
                let entry = try #require(again.index.entry("dir1/f1.bin", from: Self.peerA))
                #expect(try again.blocks(of: entry).first?.size == 2)
                again.close()
            }
        }
    }

    /// The snapshot a full replay of the log at `path` writes (of a copy, its snapshot unused).
    static func snapshotOfAFullReplay(_ path: String) throws -> Data {
        let dir = try TemporaryDirectory(prefix: "kaiten-replay")
        defer { dir.remove() }
        let copy = dir.file("photos.log")
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        try IndexLog.$snapshotThreshold.withValue(.max) {
            let replayed = try IndexLog.open(path: copy, folderID: "photos")
            #expect(!replayed.index.hasSnapshot)
            try replayed.writeSnapshot()
            replayed.close()
        }
        return try Data(contentsOf: URL(fileURLWithPath: IndexLog.snapshotPath(of: copy)))
    }

    /// A snapshot written over a snapshot and its tail (the records nothing changed copied as
    /// they are, the others merged and encoded, the paths added since merged in by name) is,
    /// byte for byte, the snapshot written from a full replay of the same log (with a tail that
    /// keeps each path's announcements in the order they came).
    @Test func aSnapshotOverASnapshotIsTheOneAFullReplayWrites() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try Self.fillASnapshotAndATail(log, reordering: false)
            try log.writeSnapshot()
            let overSnapshot = try Data(contentsOf: URL(fileURLWithPath: log.snapshotPath))
            log.close()
            let fromReplay = try Self.snapshotOfAFullReplay(path)
            #expect(overSnapshot.count > 300 * IndexSnapshot.announcementFixedSize)
            #expect(overSnapshot == fromReplay)
        }
    }

    /// Thirty thousand paths of one device, five hundred of them also of a second, and their
    /// snapshot; its size.
    static func snapshotThirtyThousandPaths(_ log: IndexLog) throws -> Int {
        for first in stride(from: 0, to: 30_000, by: 1000) {
            try fill(log, from: first, count: 1000, full: first == 0)
        }
        try fill(log, from: 0, count: 500, peer: peerB, indexID: 22, full: true)
        try log.writeSnapshot()
        return try #require(FileManager.default.attributesOfItem(atPath: log.snapshotPath)[.size] as? Int)
    }

    /// The same over a snapshot many runs long (``GlobalIndex/snapshotRunBytes``): the paths
    /// nothing changed go over as runs of their records' bytes, cut where a path changed,
    /// where a new name goes among them and at a run's bound, then the names after the last
    /// one; the file is byte for byte the one a full replay writes.
    @Test func aSnapshotOverALargeSnapshotIsTheOneAFullReplayWrites() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            let firstSize = try Self.snapshotThirtyThousandPaths(log)
            #expect(firstSize > 8 * GlobalIndex.snapshotRunBytes)
            // Paths only the first device holds, changed here and there (each batch also
            // announces dir1 and a link again: the second device never announced them, so the
            // view keeps the order a replay has), names that sort among the snapshot's
            // (dir1/f30001.bin comes before dir1/f3001.bin), and names after all of them.
            for start in stride(from: 1001, to: 30_000, by: 3000) { try Self.fill(log, from: start, count: 3) }
            try Self.fill(log, from: 30_001, count: 700)
            let after = (0..<300).map { i in
                IndexLogTests.file("zz/\(i).bin", size: Int64(i), sequence: Int64(40_000 + i), version: [(1, UInt64(i))])
            }
            try log.apply(device: Self.peerA, indexID: 11, files: after, isFullIndex: false)
            try log.writeSnapshot()
            let overSnapshot = try Data(contentsOf: URL(fileURLWithPath: log.snapshotPath))
            log.close()
            let fromReplay = try Self.snapshotOfAFullReplay(path)
            #expect(overSnapshot.count > firstSize)
            #expect(overSnapshot == fromReplay)
        }
    }

    /// A snapshot of several times the writer's buffer (it goes to the file in chunks, the CRC
    /// and the path table's offsets carried across them) is used on open, whole, and is the
    /// view of a full replay.
    @Test func aSnapshotLargerThanTheWritersBufferIsWholeAndUsed() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            let size = try Self.snapshotThirtyThousandPaths(log)
            #expect(size > 3 * IndexSnapshot.chunkSize)
            let writer = View(log)
            log.close()
            let again = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            defer { again.close() }
            #expect(again.snapshotRejection == nil)
            #expect(again.index.hasSnapshot && again.recordsReplayed == 0)
            #expect(View(again) == writer, "\(View(again).difference(from: writer))")
            let full = try Self.fullReplay(path)
            #expect(writer == full, "\(writer.difference(from: full))")
        }
    }

    /// The same with a tail long enough for its paths to be searched for in the snapshot in two
    /// halves, on two cores: the reopened view is the writer's own and that of a full replay,
    /// live bytes included.
    @Test func aLongTailIsTheViewOfTheWriterAndOfAFullReplay() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try Self.fill(log, from: 0, count: 6000, full: true)
            try Self.fill(log, from: 0, count: 2000, peer: Self.peerB, indexID: 22, full: true)
            try log.writeSnapshot()
            try Self.fill(log, from: 3000, count: 5000)
            try Self.fill(log, from: 40, count: 1000, peer: Self.peerB, indexID: 23, full: true)
            try Self.fill(log, from: 500, count: 100, peer: Self.peerB, indexID: 23)
            try Self.fill(log, from: 100, count: 5000)
            try Self.expectReopenedViewIsTheWritersAndAFullReplays(log, path: path, replayedOver: 10_000)
        }
    }

    /// The tail's names are sorted by their first 16 bytes as numbers, then by the rest; a
    /// device the snapshot never heard of has nothing in it to weigh. Names alike far into
    /// their bytes, names that begin others, names outside ASCII, and a new device's full index
    /// in the tail: the reopened view is the writer's and a full replay's, live bytes included.
    @Test func aTailOfAlikeNamesAndOfANewDeviceIsTheViewOfAFullReplay() throws {
        let peerC = try DeviceID(bytes: Array(repeating: 0xC0, count: 32))
        func names(_ range: Range<Int>) -> [String] {
            range.flatMap { i in
                [
                    "photos/2024/summer-trip/IMG_\(i).jpg", "photos/2024/summer-trip/IMG_\(i)", "photos/2024/summer-tripé/\(i)",
                    "photos/2024/summer-tri\(i)", "p\(i)", "p\(i)/é", "\(i)",
                ]
            }
        }
        func files(_ names: [String], from first: Int) -> [BEPFileInfo] {
            names.enumerated().map { k, name in
                IndexLogTests.file(name, size: Int64(k + 1), sequence: Int64(first + k + 1), version: [(1, UInt64(first + k))], mtime: Int64(first + k))
            }
        }
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try log.apply(device: Self.peerA, indexID: 1, files: files(names(0..<1000), from: 0), isFullIndex: true)
            try log.apply(device: Self.peerB, indexID: 2, files: files(names(200..<600), from: 0), isFullIndex: true)
            try log.writeSnapshot()
            try log.apply(device: peerC, indexID: 3, files: files(names(0..<1200), from: 0), isFullIndex: true)
            try log.apply(device: Self.peerA, indexID: 1, files: files(names(900..<1100), from: 10_000), isFullIndex: false)
            try log.apply(device: Self.peerB, indexID: 2, files: files(names(300..<400), from: 20_000), isFullIndex: false)
            try Self.expectReopenedViewIsTheWritersAndAFullReplays(log, path: path, replayedOver: 8400)
        }
    }

    @Test func listingsAndLookupsReadOnlyWhatTheyName() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try Self.fill(log, from: 0, count: 200, full: true)
            try log.writeSnapshot()
            try Self.fill(log, from: 190, count: 20)  // f190…f209: ten of them new after the snapshot
            let all = log.index.allGlobal()
            for directory in ["", "dir1", "dir3", "nothing"] {
                for recursive in [false, true] {
                    var listed: [String] = []
                    log.index.forEachGlobal(below: directory, recursive: recursive) { listed.append($0.path) }
                    let prefix = directory.isEmpty ? "" : directory + "/"
                    let expected = all.map(\.path).filter {
                        $0.hasPrefix(prefix) && $0 != directory && (recursive || !$0.dropFirst(prefix.count).contains("/"))
                    }
                    #expect(listed.sorted() == expected.sorted(), "\(directory) recursive: \(recursive)")
                }
            }
            var picked: [String] = []
            log.index.forEachGlobal(exact: ["dir0", "link0", "missing"], prefixes: ["dir2/"]) { picked.append($0.path) }
            #expect(picked.sorted() == all.map(\.path).filter { $0 == "dir0" || $0 == "link0" || $0.hasPrefix("dir2/") }.sorted())
            log.close()
        }
    }

    @Test func aTornDamagedOrStaleSnapshotIsNotUsedAndAWriterReplacesIt() throws {
        try IndexLog.$snapshotThreshold.withValue(1) {
            try withLog { path in
                let log = try IndexLog.open(path: path, folderID: "photos")
                try Self.fill(log, from: 0, count: 200, full: true)
                try log.writeSnapshot()
                try Self.fill(log, from: 150, count: 100)
                log.close()
                let expected = try Self.fullReplay(path)
                let snapshot = IndexLog.snapshotPath(of: path)
                let good = try Data(contentsOf: URL(fileURLWithPath: snapshot))

                // Stale: a snapshot of this log before a compaction gave it a new generation.
                let compacting = try IndexLog.open(path: path, folderID: "photos")
                try compacting.compact()
                compacting.close()
                let compacted = try Self.fullReplay(path)
                let damages: [(String, Data, String)] = [
                    ("torn", good.prefix(good.count / 2), "torn"),
                    ("flipped", { var d = good; d[d.count - 40] ^= 0x55; return d }(), "checksum"),
                    ("stale", good, "generation"),
                    ("empty", Data(), "shorter"),
                ]
                for (what, bytes, reason) in damages {
                    try bytes.write(to: URL(fileURLWithPath: snapshot))
                    var warnings: [String] = []
                    let reader = try IndexLog.open(path: path, folderID: "photos", readOnly: true, warn: { warnings.append($0) })
                    #expect(!reader.index.hasSnapshot, "\(what)")
                    #expect(reader.snapshotRejection?.contains(reason) == true, "\(what): \(reader.snapshotRejection ?? "used")")
                    #expect(warnings.contains { $0.contains(snapshot) }, "\(what): the warning names the file")
                    #expect(View(reader) == compacted, "\(what): the view is the full replay's")
                    reader.close()
                    #expect(try Data(contentsOf: URL(fileURLWithPath: snapshot)) == bytes, "\(what): a reader writes nothing")

                    // A writer replays in full and writes a good snapshot again.
                    let writer = try IndexLog.open(path: path, folderID: "photos")
                    #expect(View(writer) == compacted)
                    writer.close()
                    let after = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
                    #expect(after.index.hasSnapshot, "\(what): rebuilt")
                    #expect(View(after) == compacted)
                    after.close()
                }
                _ = expected
            }
        }
    }

    @Test func aLongLivedReaderTakesUpANewerSnapshotOnRefresh() throws {
        try IndexLog.$snapshotThreshold.withValue(1) {
            try withLog { path in
                let writer = try IndexLog.open(path: path, folderID: "photos")
                try Self.fill(writer, from: 0, count: 10, full: true)
                // A service's view, opened before the big sync: everything it reads is in memory.
                let reader = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
                #expect(!reader.index.hasSnapshot)
                try Self.fill(writer, from: 10, count: 300)
                try writer.writeSnapshot()
                try Self.fill(writer, from: 200, count: 20)
                try reader.refresh()
                #expect(reader.index.hasSnapshot, "the view is read from the writer's snapshot")
                #expect(reader.index.pathsOutsideSnapshot <= 22, "only the last batch (20 files, a directory, a link) is in memory")
                #expect(View(reader) == View(writer))
                // Nothing newer: a refresh keeps the view and reads only what was appended.
                try Self.fill(writer, from: 400, count: 5)
                try reader.refresh()
                #expect(View(reader) == View(writer))
                reader.close()
                writer.close()
            }
        }
    }

    @Test func maintainSnapshotsAGrowingLogAFewTimesNotAtEveryBatch() throws {
        try IndexLog.$snapshotThreshold.withValue(8 << 10) {
            try withLog { path in
                let log = try IndexLog.open(path: path, folderID: "photos")
                var writes = 0
                var covered: Int64 = 0
                for batch in 0..<60 {
                    try Self.fill(log, from: batch * 50, count: 50, full: batch == 0)
                    log.maintain(warn: { Issue.record("unexpected warning: \($0)") })
                    if log.snapshotCovers != covered {
                        writes += 1
                        covered = log.snapshotCovers
                    }
                }
                #expect(writes >= 2 && writes <= 12, "\(writes) snapshots for 60 batches")
                #expect(log.bytesAfterSnapshot < max(8 << 10, log.snapshotCovers / 4))
                let expected = try Self.fullReplay(path)
                #expect(View(log) == expected)
                log.close()
                let again = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
                #expect(View(again) == expected)
                again.close()
            }
        }
    }

    /// A directory where writing a snapshot fails as it does in the field: a full filesystem
    /// (a 1 MiB tmpfs, when this process may mount one) or, for a user who may not mount, a
    /// directory made read-only under an open log. `makeRoom` undoes it.
    struct UnwritableDirectory {
        let path: String
        let makeRoom: () -> Void
        let remove: () -> Void

        static func make(in parent: TemporaryDirectory, logSize: Int64) throws -> UnwritableDirectory? {
            let path = parent.file("index")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            if geteuid() == 0 {
                guard mount("tmpfs", path, "tmpfs", 0, "size=1m,mode=0700") == 0 else { return nil }
                return UnwritableDirectory(
                    path: path,
                    makeRoom: { unlink(path + "/filler") },
                    remove: { umount2(path, Int32(MNT_DETACH)) })
            }
            return UnwritableDirectory(path: path, makeRoom: { chmod(path, 0o700) }, remove: { chmod(path, 0o700) })
        }

        /// Takes away what is left: the filesystem filled up but for `spare` bytes, or the
        /// directory made read-only.
        func fill(leaving spare: Int) {
            if geteuid() != 0 {
                chmod(path, 0o500)
                return
            }
            let fd = open(path + "/filler", O_WRONLY | O_CREAT, 0o600)
            let chunk = [UInt8](repeating: 1, count: 4096)
            while write(fd, chunk, chunk.count) == chunk.count {}
            var info = stat()
            fstat(fd, &info)
            ftruncate(fd, max(0, info.st_size - off_t(spare)))
            close(fd)
        }
    }

    /// A log of 30,000 paths with its snapshot, opened again for reading (its view is the
    /// snapshot's, nothing of it resident yet).
    func withSnapshotOfThirtyThousandPaths(_ body: (IndexLog) throws -> Void) throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            for first in stride(from: 0, to: 30_000, by: 1000) {
                try Self.fill(log, from: first, count: 1000, full: first == 0)
            }
            try log.writeSnapshot()
            log.close()
            let again = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            defer { again.close() }
            #expect(again.index.hasSnapshot)
            try body(again)
        }
    }

    /// A walk of every path gives back the snapshot's pages it passed: what stays resident of
    /// the mapping afterwards is a page or two, not the file (a plan of ten million paths held
    /// gigabytes of it).
    @Test func aWalkOfEveryPathLeavesTheSnapshotNotResident() throws {
        try withSnapshotOfThirtyThousandPaths { again in
            var entries = 0
            again.index.forEachEntry { _, _, _ in entries += 1 }
            #expect(entries > 30_000)
            let resident = try #require(Self.residentKiB(ofMapping: again.snapshotPath))
            #expect(resident <= 16, "\(resident) KiB of the snapshot still resident after the walk")
        }
    }

    /// A batch of paths new to a view with a snapshot searches the snapshot for each of them;
    /// what the searches mapped is given back once the batch is in: a full index's intake held
    /// most of the snapshot resident (82 of 150 MB at a million paths).
    @Test func aBatchOfNewPathsLeavesTheSnapshotNotResident() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            defer { log.close() }
            for first in stride(from: 0, to: 30_000, by: 1000) {
                try Self.fill(log, from: first, count: 1000, full: first == 0)
            }
            try log.writeSnapshot()
            log.index.releaseSnapshotPages()
            #expect(try #require(Self.residentKiB(ofMapping: log.snapshotPath)) <= 16)
            // New names between the snapshot's, all through it: each search ends somewhere else.
            let files = stride(from: 0, to: 30_000, by: 30).map { i in
                IndexLogTests.file("dir\(i % 5)/f\(i).bin.new", sequence: Int64(40_000 + i), version: [(1, 1)])
            }
            try log.apply(device: Self.peerB, indexID: 12, files: files, isFullIndex: true)
            #expect(log.index.pathsOutsideSnapshot == files.count)
            let resident = try #require(Self.residentKiB(ofMapping: log.snapshotPath))
            #expect(resident <= 16, "\(resident) KiB of the snapshot still resident after a batch of \(files.count) new paths")
        }
    }

    /// A search (every descendant of the root) and a listing below one directory holding most
    /// paths walk ranges of the snapshot, not the whole: each gives back what it passed too.
    @Test func aWalkBelowADirectoryLeavesTheSnapshotNotResident() throws {
        try withSnapshotOfThirtyThousandPaths { again in
            var everything = 0
            again.index.forEachGlobal(below: "", recursive: true) { _ in everything += 1 }
            #expect(everything > 20_000)
            var resident = try #require(Self.residentKiB(ofMapping: again.snapshotPath))
            #expect(resident <= 16, "\(resident) KiB of the snapshot still resident after a walk of every descendant of the root")
            var below = 0
            again.index.forEachGlobal(exact: [], prefixes: ["dir1/"]) { _ in below += 1 }
            #expect(below > 4_000)
            resident = try #require(Self.residentKiB(ofMapping: again.snapshotPath))
            #expect(resident <= 16, "\(resident) KiB of the snapshot still resident after a walk of dir1/")
        }
    }

    /// A later reader of the same snapshot file in one process shares the mapping checked first
    /// (no second check of every byte); a new snapshot (another file) is mapped and checked
    /// anew, and the shared one still answers only for its own log.
    @Test func readersOfOneSnapshotFileShareItsMapping() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try Self.fill(log, from: 0, count: 500, full: true)
            try log.writeSnapshot()
            log.close()
            let first = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            defer { first.close() }
            let second = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            defer { second.close() }
            let snapshotPath = first.snapshotPath
            let generation = first.generation
            let a = try #require(try IndexSnapshot.open(path: snapshotPath, folderID: "photos", generation: generation, logSize: Int64.max))
            let b = try #require(try IndexSnapshot.open(path: snapshotPath, folderID: "photos", generation: generation, logSize: Int64.max))
            #expect(a === b)
            #expect(Self.mappings(of: snapshotPath) == 1)
            // Shared, and still refused for another log, another folder, or a shorter log.
            #expect(throws: IndexSnapshot.Rejection.self) { try IndexSnapshot.open(path: snapshotPath, folderID: "photos", generation: generation &+ 1, logSize: Int64.max) }
            #expect(throws: IndexSnapshot.Rejection.self) { try IndexSnapshot.open(path: snapshotPath, folderID: "music", generation: generation, logSize: Int64.max) }
            #expect(throws: IndexSnapshot.Rejection.self) { try IndexSnapshot.open(path: snapshotPath, folderID: "photos", generation: generation, logSize: 10) }

            // A new snapshot is another file: mapped and checked on its own.
            let writer = try IndexLog.open(path: path, folderID: "photos")
            try Self.fill(writer, from: 500, count: 100)
            try writer.writeSnapshot()
            writer.close()
            let c = try #require(try IndexSnapshot.open(path: snapshotPath, folderID: "photos", generation: generation, logSize: Int64.max))
            #expect(c !== a)
            #expect(c.pathCount > a.pathCount)
        }
    }

    /// A reader that comes after every other one closed (the service's rounds after its first
    /// exchange) still finds the mapping checked: it is held until a newer snapshot replaces it.
    @Test func aSnapshotStaysCheckedAfterItsReadersCloseUntilANewerOne() throws {
        try withLog { path in
            // Each reader and writer in a scope of its own: a closed log still holds its view.
            do {
                let log = try IndexLog.open(path: path, folderID: "photos")
                try Self.fill(log, from: 0, count: 500, full: true)
                try log.writeSnapshot()
                log.close()
            }
            weak var held: IndexSnapshot?
            do {
                let reader = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
                held = try IndexSnapshot.open(path: reader.snapshotPath, folderID: "photos", generation: reader.generation, logSize: Int64.max)
                reader.close()
            }
            #expect(held != nil, "let go with its last reader: the next reader checks every byte again")
            do {
                let writer = try IndexLog.open(path: path, folderID: "photos")
                try Self.fill(writer, from: 500, count: 100)
                try writer.writeSnapshot()
                writer.close()
            }
            #expect(held == nil, "a replaced snapshot stays mapped (its blocks stay allocated)")
        }
    }

    /// The summaries the folder figures walk are the global versions forEachGlobal decodes,
    /// whether read in place (one announcement, untouched by the tail) or decoded: with two
    /// peers, deletions, invalid entries, symlinks, a tail that changes snapshotted paths and a
    /// peer's full index that voids what the snapshot holds of it.
    @Test func summariesAreTheGlobalVersionsWhetherReadInPlaceOrDecoded() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try Self.fill(log, from: 0, count: 300, full: true)
            try Self.fill(log, from: 0, count: 100, peer: Self.peerB, indexID: 22, full: true)
            try log.writeSnapshot()
            try Self.fill(log, from: 250, count: 100)
            try Self.fill(log, from: 40, count: 10, peer: Self.peerB, indexID: 23, full: true)
            func row(_ path: String, _ type: BEPFileInfoType, _ size: Int64, _ deleted: Bool, _ invalid: Bool, _ hash: ContentHash?, _ holds: [Bool], _ live: [Bool]) -> String {
                "\(path) \(type) \(size) d\(deleted) i\(invalid) \(hash.map { "\($0)" } ?? "-") holds \(holds) live \(live)"
            }
            let peers = [Self.peerA, Self.peerB]
            var decoded: [String] = []
            log.index.forEachGlobal { e in
                decoded.append(row(
                    e.path, e.file.type, e.file.size, e.file.isDeleted, e.file.isInvalid, e.file.type == .file ? e.file.contentHash : nil,
                    peers.map { e.holders.contains($0) },
                    peers.map { p in e.versions[p].map { !$0.isDeleted && !$0.isInvalid } ?? false }))
            }
            var summarised: [String] = []
            var inPlace = 0
            log.index.forEachGlobalSummary { s in
                if s.entry == nil { inPlace += 1 }
                summarised.append(row(
                    s.path, s.type, s.size, s.isDeleted, s.isInvalid, s.fileHash, peers.map { s.holds(log.index.device($0)) },
                    peers.map { s.announcesLive(log.index.device($0)) }))
            }
            #expect(inPlace > 100, "read in place: \(inPlace)")
            #expect(decoded.count > 300)
            #expect(summarised.sorted() == decoded.sorted())
            // A device's valid announcements, the invalid ones passed over in place.
            for peer in peers {
                var all: [String] = []
                log.index.forEachEntry { path, owner, entry in
                    if owner == peer && !entry.isInvalid { all.append("\(path) \(entry.sequence)") }
                }
                var valid: [String] = []
                log.index.forEachValidEntry(from: peer) { path, entry in valid.append("\(path) \(entry.sequence)") }
                #expect(!all.isEmpty)
                #expect(valid.sorted() == all.sorted())
            }
            log.close()
        }
    }

    /// A snapshot checked once (by its writer reading it back) is taken by a later process
    /// with its header and tables checked only: opening it reads next to none of it (every
    /// `kaiten` command at ten million paths read 1.7 GB first). Any change to the file since
    /// (here a byte flipped in place, its size kept) means a full check again, which finds it.
    @Test func aCheckedSnapshotIsTakenLaterWithoutReadingItAgainUnlessItChanged() throws {
        try withSnapshotOfThirtyThousandPaths { first in
            let snapshot = first.snapshotPath
            let expected = View(first)
            #expect(FileManager.default.fileExists(atPath: IndexSnapshot.CheckStamp.path(of: snapshot)))
            first.close()

            // A new process, the file no longer in the page cache.
            IndexSnapshot.forgetChecked(path: snapshot)
            try Self.dropFromPageCache(snapshot)
            #expect(try Self.cachedFraction(of: snapshot) < 0.05, "the page cache kept the file: the test cannot tell")
            let later = try IndexLog.open(path: first.path, folderID: "photos", readOnly: true)
            #expect(later.index.hasSnapshot)
            let read = try Self.cachedFraction(of: snapshot)
            #expect(read < 0.25, "opening read \(Int(read * 100)) % of a snapshot checked before")
            #expect(View(later) == expected)
            later.close()

            // Changed in place, same size (and a tick later: coarse clocks move every few ms).
            usleep(20_000)
            let fd = open(snapshot, O_RDWR)
            var info = stat()
            fstat(fd, &info)
            var byte: UInt8 = 0
            pread(fd, &byte, 1, off_t(info.st_size) - 40)
            byte ^= 0x55
            pwrite(fd, &byte, 1, off_t(info.st_size) - 40)
            close(fd)
            IndexSnapshot.forgetChecked(path: snapshot)
            let damaged = try IndexLog.open(path: first.path, folderID: "photos", readOnly: true)
            #expect(!damaged.index.hasSnapshot)
            #expect(damaged.snapshotRejection?.contains("checksum mismatch") == true, "\(damaged.snapshotRejection ?? "used")")
            #expect(View(damaged) == expected)
            damaged.close()
        }
    }

    /// A walk of every path from a cold page cache has the kernel read ahead of it: the
    /// mapping is advised random, and without that each page it touched was a read of its own
    /// (a status at ten million paths took 81 s from a cold disk, 2 s of sequential reading).
    @Test func aWalkFromAColdPageCacheReadsAheadOfItself() throws {
        try withSnapshotOfThirtyThousandPaths { first in
            let snapshot = first.snapshotPath
            first.close()
            IndexSnapshot.forgetChecked(path: snapshot)
            try Self.dropFromPageCache(snapshot)
            #expect(try Self.cachedFraction(of: snapshot) < 0.05, "the page cache kept the file: the test cannot tell")
            let later = try IndexLog.open(path: first.path, folderID: "photos", readOnly: true)
            defer { later.close() }
            var info = stat()
            stat(snapshot, &info)
            let pages = Int(info.st_size) / Int(sysconf(Int32(_SC_PAGESIZE)))
            let before = Self.majorFaultsOfThisThread()
            var files = 0
            later.index.forEachGlobalSummary { _ in files += 1 }
            let faults = Self.majorFaultsOfThisThread() - before
            #expect(files > 30_000)
            #expect(faults * 4 < pages, "\(faults) reads from the disk for a walk of \(pages) pages")
        }
    }

    /// Page faults of the calling thread that waited for the disk.
    static func majorFaultsOfThisThread() -> Int {
        var usage = rusage()
        getrusage(__rusage_who_t(1) /* RUSAGE_THREAD */, &usage)
        return usage.ru_majflt
    }

    /// Drops `path`'s pages from the page cache (they are clean: the writer fsynced them).
    static func dropFromPageCache(_ path: String) throws {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw POSIXError(.ENOENT) }
        defer { close(fd) }
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
    }

    /// The share of `path`'s pages in the page cache, from mincore(2) over a mapping of it.
    static func cachedFraction(of path: String) throws -> Double {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw POSIXError(.ENOENT) }
        defer { close(fd) }
        var info = stat()
        fstat(fd, &info)
        let size = Int(info.st_size)
        guard let mapped = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), mapped != MAP_FAILED else { throw POSIXError(.ENOMEM) }
        defer { munmap(mapped, size) }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        var vector = [UInt8](repeating: 0, count: (size + page - 1) / page)
        guard mincore(mapped, size, &vector) == 0 else { throw POSIXError(.EINVAL) }
        return Double(vector.filter { $0 & 1 == 1 }.count) / Double(vector.count)
    }

    /// How many times this process maps `path`, from /proc/self/maps.
    static func mappings(of path: String) -> Int {
        guard let handle = FileHandle(forReadingAtPath: "/proc/self/maps"), let data = try? handle.readToEnd() else { return -1 }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").filter { $0.hasSuffix(" " + path) }.count
    }

    /// The `Rss:` of this process's mapping of `path`, in KiB, from /proc/self/smaps.
    static func residentKiB(ofMapping path: String) -> Int? {
        // Read to its end: procfs files say they are empty, and Foundation believes them.
        guard let handle = FileHandle(forReadingAtPath: "/proc/self/smaps"), let data = try? handle.readToEnd() else { return nil }
        let smaps = String(decoding: data, as: UTF8.self)
        var inside = false
        var total: Int?
        for line in smaps.split(separator: "\n") {
            if let first = line.first, first.isHexDigit, line.contains("-") {
                inside = line.hasSuffix(" " + path)
            } else if inside, line.hasPrefix("Rss:") {
                total = (total ?? 0) + (Int(line.split(separator: " ")[1]) ?? 0)
            }
        }
        return total
    }

    /// A batch of more than one chunk is written as it is encoded: when the disk fills up
    /// part-way through it, the batch is refused and the log ends where it ended before (no
    /// half of it left for a reader or the next open), and it takes the next batch once there
    /// is room.
    @Test func aBatchThatDoesNotFitPartWayLeavesTheLogAsItWas() throws {
        let parent = try TemporaryDirectory(prefix: "kaiten-full")
        defer { parent.remove() }
        guard geteuid() == 0, let dir = try UnwritableDirectory.make(in: parent, logSize: 0) else {
            try Test.cancel("needs a full filesystem: a 1 MiB tmpfs, which only root may mount (root in CI can)")
        }
        defer { dir.remove() }
        let path = dir.path + "/photos.log"
        let log = try IndexLog.open(path: path, folderID: "photos")
        try Self.fill(log, from: 0, count: 100, full: true)
        let before = View(log)
        let size = log.fileSize
        dir.fill(leaving: 256 << 10)
        // In chunks of 64 KiB: several are written before the disk is full.
        IndexLog.PendingAppend.$chunk.withValue(64 << 10) {
            #expect(throws: IndexLogError.self) { try Self.fill(log, from: 100, count: 12_000) }
        }
        var info = stat()
        stat(path, &info)
        #expect(Int64(info.st_size) == size && log.fileSize == size, "the log ends where it did")
        #expect(View(log) == before)
        dir.makeRoom()
        try Self.fill(log, from: 100, count: 50)
        let writer = View(log)
        log.close()
        var warnings: [String] = []
        let again = try IndexLog.open(path: path, folderID: "photos", readOnly: true, warn: { warnings.append($0) })
        defer { again.close() }
        #expect(warnings.isEmpty, "\(warnings)")
        #expect(View(again) == writer)
    }

    /// A snapshot that cannot be written (a full disk) is a warning, not an error: the batch
    /// before it is durable in the log, the old snapshot and the log stay whole, nothing is
    /// left half-written, and it is tried again only after another threshold's worth of
    /// records (not at every batch), and then succeeds once there is room.
    @Test func aSnapshotThatCannotBeWrittenIsAWarningAndTheBatchStands() throws {
        try IndexLog.$snapshotThreshold.withValue(16 << 10) {
            let parent = try TemporaryDirectory(prefix: "kaiten-full")
            defer { parent.remove() }
            guard let dir = try UnwritableDirectory.make(in: parent, logSize: 0) else {
                try Test.cancel("cannot mount a small tmpfs here (mount: \(String(cString: strerror(errno)))); root in CI can")
            }
            defer { dir.remove() }
            let path = dir.path + "/photos.log"
            let log = try IndexLog.open(path: path, folderID: "photos")
            var warnings: [String] = []
            try Self.fill(log, from: 0, count: 150, full: true)
            log.maintain(warn: { warnings.append($0) })
            #expect(warnings.isEmpty && log.snapshotCovers > 0, "a first snapshot while there is room")
            let firstCovers = log.snapshotCovers

            dir.fill(leaving: 48 << 10)
            try Self.fill(log, from: 150, count: 150)
            #expect(log.bytesAfterSnapshot >= 16 << 10)
            log.maintain(warn: { warnings.append($0) })
            #expect(warnings.count == 1, "\(warnings)")
            #expect(warnings.first?.contains(path + ".snap") == true, "the warning names the snapshot: \(warnings)")
            #expect(log.snapshotCovers == firstCovers, "the old snapshot is still the one in use")
            #expect(View(log) == (try Self.fullReplay(path)), "the batch is in the log and in the view")
            let leftovers = (try FileManager.default.contentsOfDirectory(atPath: dir.path)).filter { $0.hasSuffix(".tmp") || $0.hasSuffix(".compact") }
            #expect(leftovers.isEmpty, "no half-written file left: \(leftovers)")

            // Not tried again at the next small batch.
            try Self.fill(log, from: 300, count: 5)
            log.maintain(warn: { warnings.append($0) })
            #expect(warnings.count == 1, "not retried at every batch: \(warnings)")

            // Room again: tried again once another threshold's worth is in, and it works.
            dir.makeRoom()
            var batch = 310
            while log.snapshotCovers == firstCovers && batch < 2000 {
                try Self.fill(log, from: batch, count: 20)
                log.maintain(warn: { warnings.append($0) })
                batch += 25
            }
            #expect(warnings.count == 1, "\(warnings)")
            #expect(log.snapshotCovers > firstCovers, "a new snapshot once there is room")
            let expected = try Self.fullReplay(path)
            #expect(View(log) == expected)
            log.close()
            let again = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            #expect(again.index.hasSnapshot)
            #expect(View(again) == expected)
            again.close()
        }
    }

    @Test func aSnapshotNamingAPathOutsideTheFolderIsRefused() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try log.apply(device: Self.peerA, indexID: 1, files: [IndexLogTests.file("a/bb.jpg", sequence: 1, version: [(1, 1)])], isFullIndex: true)
            try log.writeSnapshot()
            log.close()
            // Rewrite the name to "a/../x" with a correct checksum: the structure check refuses it.
            let snapshot = IndexLog.snapshotPath(of: path)
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: snapshot)))
            let name = Array("a/bb.jpg".utf8)
            let at = try #require((0..<(bytes.count - name.count)).first { Array(bytes[$0..<($0 + name.count)]) == name })
            bytes.replaceSubrange(at..<(at + name.count), with: Array("../b.jpg".utf8))
            let crc = bytes.withUnsafeBytes { CRC32.checksum(UnsafeRawBufferPointer(rebasing: $0[16...])) }
            bytes.replaceLE(crc, at: 12)
            try Data(bytes).write(to: URL(fileURLWithPath: snapshot))
            let reader = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            #expect(!reader.index.hasSnapshot)
            #expect(reader.snapshotRejection?.contains("malformed") == true)
            #expect(reader.index.global("a/bb.jpg") != nil)
            #expect(reader.index.global("../b.jpg") == nil)
            reader.close()
        }
    }
}
