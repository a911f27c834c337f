import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenIndex

/// A duration one thread sets and another reads.
final class NIOLockedDuration: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: TimeInterval?
    var value: TimeInterval? { lock.withLock { stored } }
    func set(_ value: TimeInterval) { lock.withLock { stored = value } }
}

@Suite(.ownThread, .timeLimit(.minutes(5)))
struct IndexLogTests {
    static let peerA = try! DeviceID(bytes: Array(repeating: 0xA0, count: 32))
    static let peerB = try! DeviceID(bytes: Array(repeating: 0xB0, count: 32))

    static func file(
        _ name: String, size: Int64 = 10, sequence: Int64, version: [(UInt64, UInt64)], deleted: Bool = false,
        invalid: Bool = false, mtime: Int64 = 1000, type: BEPFileInfoType = .file
    ) -> BEPFileInfo {
        var file = BEPFileInfo()
        file.name = name
        file.type = type
        file.size = deleted || type != .file ? 0 : size
        file.sequence = sequence
        file.deleted = deleted
        file.invalid = invalid
        file.modifiedS = mtime
        var vector = BEPVector()
        vector.counters = version.map { var c = BEPCounter(); c.id = $0.0; c.value = $0.1; return c }
        file.version = vector
        if type == .file && !deleted && !invalid {
            var block = BEPBlockInfo()
            block.size = Int32(size)
            block.hash = Data(repeating: UInt8(sequence & 0xFF), count: 32)
            block.weakHash = 7
            file.blocks = [block]
        }
        return file
    }

    func withLog(_ body: (String) throws -> Void) throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-index")
        defer { dir.remove() }
        try body(dir.file("photos.log"))
    }

    @Test func appendThenReplayGivesTheSameView() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try log.apply(
                device: Self.peerA, indexID: 11,
                files: [Self.file("a.jpg", sequence: 1, version: [(1, 100)]), Self.file("b.jpg", sequence: 2, version: [(1, 101)])],
                isFullIndex: true)
            try log.apply(device: Self.peerA, indexID: 11, files: [Self.file("a.jpg", size: 20, sequence: 3, version: [(1, 102)])], isFullIndex: false)
            log.close()
            let again = try IndexLog.open(path: path, folderID: "photos")
            #expect(again.checkpoints[Self.peerA] == IndexLog.Checkpoint(indexID: 11, maxSequence: 3))
            #expect(again.index.global("a.jpg")?.file.size == 20)
            #expect(again.index.global("b.jpg")?.holders == [Self.peerA])
            let entry = try #require(again.index.global("a.jpg")?.file)
            #expect(try again.blocks(of: entry).first?.size == 20)
            #expect(again.fileSize == log.fileSize)
            #expect(again.liveBytes == log.liveBytes)
        }
    }

    @Test func aFullIndexVoidsEverythingEarlierFromThatPeer() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try log.apply(device: Self.peerA, indexID: 1, files: [Self.file("old.txt", sequence: 1, version: [(1, 1)])], isFullIndex: true)
            try log.apply(device: Self.peerB, indexID: 2, files: [Self.file("old.txt", sequence: 1, version: [(1, 1)])], isFullIndex: true)
            try log.apply(device: Self.peerA, indexID: 3, files: [Self.file("new.txt", sequence: 1, version: [(1, 2)])], isFullIndex: true)
            log.close()
            for view in [log, try IndexLog.open(path: path, folderID: "photos")] {
                #expect(view.index.global("old.txt")?.holders == [Self.peerB])
                #expect(view.index.global("new.txt")?.holders == [Self.peerA])
                #expect(view.checkpoints[Self.peerA]?.indexID == 3)
            }
        }
    }

    /// A crash mid-append: every possible cut of the last record is a torn tail, cut back with a
    /// warning, and appending afterwards works.
    @Test func tornTailIsCutBackAtEveryOffset() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try log.apply(device: Self.peerA, indexID: 1, files: [Self.file("keep.txt", sequence: 1, version: [(1, 1)])], isFullIndex: true)
            let good = log.fileSize
            try log.apply(device: Self.peerA, indexID: 1, files: [Self.file("torn.txt", sequence: 2, version: [(1, 2)])], isFullIndex: false)
            log.close()
            let full = try Data(contentsOf: URL(fileURLWithPath: path))
            for cut in Int(good)..<full.count {
                try full.prefix(cut).write(to: URL(fileURLWithPath: path))
                var warnings: [String] = []
                let reopened = try IndexLog.open(path: path, folderID: "photos") { warnings.append($0) }
                #expect(reopened.index.global("keep.txt") != nil, "cut at \(cut)")
                // A cut on a record boundary is a clean (shorter) log; anywhere else it is torn.
                #expect(warnings.isEmpty == (reopened.fileSize == Int64(cut)), "cut at \(cut)")
                #expect(reopened.fileSize >= good)
                try reopened.apply(device: Self.peerA, indexID: 1, files: [Self.file("after.txt", sequence: 3, version: [(1, 3)])], isFullIndex: false)
                reopened.close()
                let third = try IndexLog.open(path: path, folderID: "photos")
                #expect(third.index.global("after.txt") != nil)
                #expect(third.index.global("keep.txt") != nil)
                third.close()
            }
        }
    }

    /// A flipped bit in the length field of a record in the middle makes it run past the end,
    /// like a torn tail; but whole records follow, so it is damage, not a tail to cut.
    @Test func aDamagedLengthInTheMiddleIsNotMistakenForATornTail() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try log.apply(device: Self.peerA, indexID: 1, files: [Self.file("f0", sequence: 1, version: [(1, 1)])], isFullIndex: true)
            let second = log.fileSize
            for i in 1..<5 {
                try log.apply(device: Self.peerA, indexID: 1, files: [Self.file("f\(i)", sequence: Int64(i + 1), version: [(1, UInt64(i + 1))])], isFullIndex: false)
            }
            log.close()
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            bytes[Int(second)] ^= 0x40  // the high byte of the next record's length
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            var warnings: [String] = []
            let error = #expect(throws: IndexLogError.self) { try IndexLog.open(path: path, folderID: "photos") { warnings.append($0) } }
            #expect(error?.code == .corruptRecord)
            #expect(error?.offset == second)
            #expect(warnings.isEmpty)
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)).count == bytes.count, "nothing cut")
        }
    }

    @Test func aFlippedByteInTheMiddleNamesTheOffsetAndTheRemedy() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            for i in 0..<5 {
                try log.apply(device: Self.peerA, indexID: 1, files: [Self.file("f\(i)", sequence: Int64(i + 1), version: [(1, UInt64(i + 1))])], isFullIndex: i == 0)
            }
            log.close()
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            let middle = bytes.count / 2
            bytes[middle] ^= 0xFF
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let error = #expect(throws: IndexLogError.self) { try IndexLog.open(path: path, folderID: "photos") }
            #expect(error?.code == .corruptRecord)
            #expect(error?.offset != nil && error!.offset! <= Int64(middle))
            #expect(error?.description.contains("kaiten index rebuild photos") == true)
        }
    }

    /// In a long batch, damage is found at the record that holds it, and a torn last batch is
    /// cut back with everything before it kept.
    @Test func inALongLogDamageIsFoundWhereItIsAndATornEndIsCut() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            let files = (0..<3000).map { Self.file("d\($0 % 9)/f\($0)", sequence: Int64($0 + 1), version: [(1, UInt64($0 + 1))]) }
            try log.apply(device: Self.peerA, indexID: 1, files: files, isFullIndex: true)
            let last = log.fileSize
            try log.apply(device: Self.peerA, indexID: 1, files: [Self.file("late", sequence: 3001, version: [(1, 3001)])], isFullIndex: false)
            log.close()
            let whole = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))

            // Torn: the last batch cut short. Everything before it stands.
            try Data(whole.prefix(whole.count - 3)).write(to: URL(fileURLWithPath: path))
            var warnings: [String] = []
            let torn = try IndexLog.open(path: path, folderID: "photos") { warnings.append($0) }
            #expect(!warnings.isEmpty)
            #expect(torn.index.global("d1/f2998") != nil)
            #expect(torn.fileSize >= last && torn.fileSize < Int64(whole.count))
            torn.close()

            // Damaged: a byte flipped in the middle of the long batch.
            var damaged = whole
            let middle = Int(last) / 2
            damaged[middle] ^= 0xFF
            try Data(damaged).write(to: URL(fileURLWithPath: path))
            let error = #expect(throws: IndexLogError.self) { try IndexLog.open(path: path, folderID: "photos") }
            #expect(error?.code == .corruptRecord)
            #expect(error?.offset != nil && error!.offset! <= Int64(middle) && error!.offset! > Int64(middle) - 200)
        }
    }

    /// Nothing that escapes the folder is stored, and a log that holds such a name anyway
    /// (edited by something other than Kaiten) is refused as damaged, naming the offset.
    @Test func aNameThatEscapesTheFolderIsNeverStoredNorReplayed() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            try log.apply(device: Self.peerA, indexID: 1, files: [Self.file("ok", sequence: 1, version: [(1, 1)])], isFullIndex: true)
            let refused = #expect(throws: IndexLogError.self) {
                try log.apply(device: Self.peerA, indexID: 1, files: [Self.file("../outside", sequence: 2, version: [(1, 2)])], isFullIndex: false)
            }
            #expect(refused?.description.contains("../outside") == true)
            #expect(log.index.global("../outside") == nil)
            let size = log.fileSize
            log.close()
            #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int64 == size, "nothing written")

            // Forge the record the way apply would have written it, with a valid checksum.
            var record: [UInt8] = []
            try IndexLog.appendFileRecord(device: Self.peerA, file: Self.file("a/../../outside", sequence: 2, version: [(1, 2)]), to: &record)
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(record))
            try handle.close()
            let error = #expect(throws: IndexLogError.self) { try IndexLog.open(path: path, folderID: "photos") }
            #expect(error?.code == .corruptRecord)
            #expect(error?.offset == size)
            #expect(error?.description.contains("a/../../outside") == true)
            #expect(error?.description.contains("kaiten index rebuild photos") == true)
        }
    }

    @Test func randomBytesAreNotALog() throws {
        try withLog { path in
            var generator = SystemRandomNumberGenerator()
            for size in [1, 17, 100, 4096] {
                try Data((0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }).write(to: URL(fileURLWithPath: path))
                #expect(throws: IndexLogError.self) { try IndexLog.open(path: path, folderID: "photos") }
            }
        }
    }

    /// Two writers (a running service and a one-shot verb) share the log batch by batch: each
    /// batch sees what the other appended, a compaction by one is followed by the other, and a
    /// writer in the middle of a batch makes the other wait for it, not fail.
    @Test func twoWritersShareTheLogBatchByBatch() throws {
        try withLog { path in
            let service = try IndexLog.open(path: path, folderID: "photos")
            let oneShot = try IndexLog.open(path: path, folderID: "photos")
            try service.apply(device: Self.peerA, indexID: 1, files: [Self.file("a.jpg", sequence: 1, version: [(1, 1)])], isFullIndex: true)
            try oneShot.apply(device: Self.peerB, indexID: 2, files: [Self.file("b.jpg", sequence: 1, version: [(2, 1)])], isFullIndex: true)
            #expect(oneShot.index.global("a.jpg") != nil, "the second writer read the first one's batch before appending")
            try service.apply(device: Self.peerA, indexID: 1, files: [Self.file("a.jpg", size: 30, sequence: 2, version: [(1, 2)])], isFullIndex: false)
            #expect(service.index.global("b.jpg") != nil)
            #expect(service.checkpoints[Self.peerB]?.maxSequence == 1 && service.checkpoints[Self.peerA]?.maxSequence == 2)

            // The one-shot writer compacts (a new file renamed over the path); the service follows.
            try oneShot.compact()
            try service.apply(device: Self.peerA, indexID: 1, files: [Self.file("c.jpg", sequence: 3, version: [(1, 3)])], isFullIndex: false)
            try oneShot.apply(device: Self.peerB, indexID: 2, files: [Self.file("d.jpg", sequence: 2, version: [(2, 2)])], isFullIndex: false)
            for log in [service, oneShot] {
                try log.catchUp()  // a writer's view moves at its batches, or when asked
                #expect(Set(["a.jpg", "b.jpg", "c.jpg", "d.jpg"]).allSatisfy { log.index.global($0) != nil })
                #expect(log.index.global("a.jpg")?.file.size == 30)
                let a = try #require(log.index.global("a.jpg")?.file)
                #expect(try log.blocks(of: a).first?.size == 30, "entries point into the file the writer holds")
            }

            // A batch in progress holds the other writer back until it ends.
            let waited = NIOLockedDuration()
            let other = Thread {
                let start = Date()
                guard let third = try? IndexLog.open(path: path, folderID: "photos") else { return }
                defer { third.close() }
                try? third.apply(device: Self.peerB, indexID: 2, files: [Self.file("e.jpg", sequence: 3, version: [(2, 3)])], isFullIndex: false)
                waited.set(Date().timeIntervalSince(start))
            }
            try service.exclusively {
                other.start()
                Thread.sleep(forTimeInterval: 0.4)
            }
            while waited.value == nil { Thread.sleep(forTimeInterval: 0.01) }
            #expect((waited.value ?? 0) >= 0.3, "it waited for the batch")
            service.close()
            oneShot.close()
            let reopened = try IndexLog.open(path: path, folderID: "photos")
            #expect(Set(["a.jpg", "b.jpg", "c.jpg", "d.jpg", "e.jpg"]).allSatisfy { reopened.index.global($0) != nil })
            #expect(reopened.checkpoints[Self.peerB]?.maxSequence == 3 && reopened.checkpoints[Self.peerA]?.maxSequence == 3)
            reopened.close()
        }
    }

    @Test func aLogOfAnotherFolderIsRefused() throws {
        try withLog { path in
            try IndexLog.open(path: path, folderID: "photos").close()
            let error = #expect(throws: IndexLogError.self) { try IndexLog.open(path: path, folderID: "music") }
            #expect(error?.code == .wrongFolder)
        }
    }

    @Test func compactionKeepsOnlyLiveStateAndTheSameView() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            for round in 0..<30 {
                let files = (0..<200).map { i in
                    Self.file("f\(i)", size: Int64(round * 10 + i), sequence: Int64(round * 200 + i + 1), version: [(1, UInt64(round + 1))])
                }
                try log.apply(device: Self.peerA, indexID: 5, files: files, isFullIndex: round == 0)
            }
            #expect(log.liveFraction < 0.1)
            let before = log.index.allGlobal().map { ($0.path, $0.file.size) }
            let oldSize = log.fileSize
            try log.compact()
            #expect(log.fileSize < oldSize / 10)
            #expect(log.liveFraction > 0.99)
            #expect(log.index.allGlobal().map { ($0.path, $0.file.size) }.elementsEqual(before, by: ==))
            #expect(log.checkpoints[Self.peerA] == IndexLog.Checkpoint(indexID: 5, maxSequence: 6000))
            let entry = try #require(log.index.global("f7")?.file)
            #expect(try log.blocks(of: entry).first?.size == Int32(297))
            log.close()
            let reopened = try IndexLog.open(path: path, folderID: "photos")
            #expect(reopened.index.allGlobal().map { ($0.path, $0.file.size) }.elementsEqual(before, by: ==))
            reopened.close()
            // A leftover temporary file from a compaction that crashed before its rename is ignored.
            try Data([1, 2, 3]).write(to: URL(fileURLWithPath: path + ".compact"))
            _ = try IndexLog.open(path: path, folderID: "photos")
            #expect(!FileManager.default.fileExists(atPath: path + ".compact"))
        }
    }

    /// A long-lived reader (`kaiten run`'s view of a folder) follows a writer: only what was
    /// appended is read; after a compaction or a removal it reads the file at the path again,
    /// and every refresh gives the view a fresh open would.
    @Test func aReaderRefreshesToWhatAFreshOpenSees() throws {
        try withLog { path in
            // Created before the log exists: an empty view, filled once the file appears.
            let reader = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            #expect(reader.index.pathCount == 0)
            let writer = try IndexLog.open(path: path, folderID: "photos")
            try writer.apply(device: Self.peerA, indexID: 5, files: (0..<50).map { Self.file("f\($0)", sequence: Int64($0 + 1), version: [(1, 1)]) }, isFullIndex: true)
            func same() throws -> Bool {
                let fresh = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
                defer { fresh.close() }
                return fresh.index.allGlobal().map { "\($0.path) \($0.file.size) \($0.file.version.counters.map(\.value))" }
                    == reader.index.allGlobal().map { "\($0.path) \($0.file.size) \($0.file.version.counters.map(\.value))" }
                    && fresh.checkpoints == reader.checkpoints && fresh.fileSize == reader.fileSize
            }
            #expect(try reader.refresh())
            #expect(reader.index.pathCount == 50)
            #expect(try same())

            // Appended: only the tail is read.
            let replayed = reader.recordsReplayed
            for round in 1...20 {
                try writer.apply(device: Self.peerA, indexID: 5, files: [Self.file("f\(round)", size: 99, sequence: Int64(50 + round), version: [(1, UInt64(round + 1))])], isFullIndex: false)
            }
            #expect(try reader.refresh())
            #expect(reader.recordsReplayed - replayed == 40)  // 20 batches: a file record and a checkpoint each
            #expect(reader.index.global("f7")?.file.size == 99)
            #expect(try same())

            // Compacted by the writer (a new file renamed over the path), then appended to again.
            for round in 21...200 {
                try writer.apply(device: Self.peerA, indexID: 5, files: [Self.file("f\(round % 50)", size: Int64(round), sequence: Int64(50 + round), version: [(1, UInt64(round + 1))])], isFullIndex: false)
            }
            try writer.compact()
            try writer.apply(device: Self.peerB, indexID: 6, files: [Self.file("g", sequence: 1, version: [(2, 1)])], isFullIndex: true)
            #expect(try reader.refresh())
            #expect(try same())
            let entry = try #require(reader.index.global("g")?.file)
            #expect(try reader.blocks(of: entry).count == 1)

            // Removed (`index rebuild`): nothing is known.
            writer.close()
            try FileManager.default.removeItem(atPath: path)
            #expect(try reader.refresh())
            #expect(reader.index.pathCount == 0 && reader.checkpoints.isEmpty)
        }
    }
}

/// syncthing's global-version rule, one case per row (bep-brief §5.4-5.5).
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct GlobalVersionTests {
    struct Case: CustomTestStringConvertible, Sendable {
        let label: String
        let a: BEPFileInfo
        let b: BEPFileInfo
        let winner: String  // "a" or "b"
        var testDescription: String { label }
    }

    static let f = IndexLogTests.file

    @Test(arguments: [
        Case(label: "newer version wins", a: f("x", 10, 1, [(1, 2)], false, false, 1000, .file), b: f("x", 20, 1, [(1, 1)], false, false, 2000, .file), winner: "a"),
        Case(label: "concurrent: newer mtime wins", a: f("x", 10, 1, [(1, 2)], false, false, 1000, .file), b: f("x", 20, 1, [(2, 2)], false, false, 2000, .file), winner: "b"),
        Case(label: "concurrent: modification beats deletion", a: f("x", 10, 1, [(1, 2)], true, false, 3000, .file), b: f("x", 20, 1, [(2, 2)], false, false, 2000, .file), winner: "b"),
        Case(label: "concurrent: valid beats invalid", a: f("x", 10, 1, [(1, 2)], false, true, 3000, .file), b: f("x", 20, 1, [(2, 2)], false, false, 2000, .file), winner: "b"),
        Case(label: "concurrent, same mtime: vector tie-break", a: f("x", 10, 1, [(1, 2)], false, false, 1000, .file), b: f("x", 20, 1, [(2, 2)], false, false, 1000, .file), winner: "a"),
        Case(label: "a newer deletion wins over an older modification", a: f("x", 0, 1, [(1, 3)], true, false, 1000, .file), b: f("x", 20, 1, [(1, 2)], false, false, 2000, .file), winner: "a"),
    ])
    func winner(_ c: Case) throws {
        var index = GlobalIndex()
        index.set(FileEntry(c.a, recordOffset: 0, recordLength: 0), for: IndexLogTests.peerA)
        index.set(FileEntry(c.b, recordOffset: 0, recordLength: 0), for: IndexLogTests.peerB)
        let global = try #require(index.global("x"))
        #expect(global.holders == [c.winner == "a" ? IndexLogTests.peerA : IndexLogTests.peerB])
    }

    @Test func equalVersionsShareHoldersButInvalidOnesDoNotHold() throws {
        var index = GlobalIndex()
        let valid = Self.f("x", 10, 1, [(1, 2)], false, false, 1000, .file)
        let ignored = Self.f("x", 0, 1, [(1, 2)], false, true, 1000, .file)
        index.set(FileEntry(valid, recordOffset: 0, recordLength: 0), for: IndexLogTests.peerA)
        index.set(FileEntry(ignored, recordOffset: 0, recordLength: 0), for: IndexLogTests.peerB)
        let global = try #require(index.global("x"))
        #expect(global.holders == [IndexLogTests.peerA])
        #expect(!global.file.isInvalid)
        #expect(global.file.size == 10)
    }
}

/// This device's own index (issue 11, item 1): sequences strictly increasing, durable, never
/// reused; a fresh log comes with a fresh index ID.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct LocalIndexTests {
    static let me = try! DeviceID(bytes: Array(repeating: 0xC0, count: 32))

    static func entry(_ name: String, version: UInt64, invalid: Bool = false) -> BEPFileInfo {
        IndexLogTests.file(name, sequence: 0, version: [(9, version)], invalid: invalid)
    }

    @Test func sequencesIncreaseSurviveReopeningAndAreNeverReused() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-local-index")
        defer { dir.remove() }
        let path = dir.file("f.local")
        var renewed = 0
        let index = try LocalIndex.open(path: path, folderID: "f", me: Self.me, indexID: 5, renewIndexID: { renewed += 1; return 77 })
        #expect(renewed == 1 && index.indexID == 77, "a fresh log gets a fresh index ID")
        let first = try index.update([Self.entry("a", version: 1), Self.entry("b", version: 1, invalid: true)]) { _ in [] }
        #expect(first.map(\.sequence) == [1, 2])
        #expect(try index.update([Self.entry("a", version: 1), Self.entry("b", version: 1, invalid: true)]) { _ in [] }.isEmpty, "nothing changed, nothing spent")
        let second = try index.update([Self.entry("a", version: 2)]) { _ in [] }
        #expect(second.map(\.sequence) == [3])
        index.close()  // as after kill -9: every update was fsynced before it returned

        let reopened = try LocalIndex.open(path: path, folderID: "f", me: Self.me, indexID: 77, renewIndexID: { renewed += 1; return 99 })
        #expect(renewed == 1 && reopened.indexID == 77 && reopened.maxSequence == 3)
        let third = try reopened.update([Self.entry("c", version: 1)]) { _ in [] }
        #expect(third.map(\.sequence) == [4])
        #expect(try reopened.entries(after: 0).map(\.name) == ["b", "a", "c"], "ascending sequence, one entry per name")
        #expect(try reopened.entries(after: 2).map(\.sequence) == [3, 4])
        reopened.close()

        // The log lost: a new one, a new ID (peers must not pair old sequences with it).
        try FileManager.default.removeItem(atPath: path)
        let fresh = try LocalIndex.open(path: path, folderID: "f", me: Self.me, indexID: 77, renewIndexID: { renewed += 1; return 123 })
        #expect(fresh.indexID == 123 && fresh.maxSequence == 0)
        fresh.close()
    }

    /// What the last update recorded is sent as it was recorded, without reading it back from
    /// the log: the same entries, byte for byte, as the log gives back; a peer that holds less
    /// than all before it is answered from the log.
    @Test func theLastUpdateIsSentAsTheLogWouldGiveItBack() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-local-index")
        defer { dir.remove() }
        let path = dir.file("f.local")
        let index = try LocalIndex.open(path: path, folderID: "f", me: Self.me, indexID: 5, renewIndexID: { 7 })
        _ = try index.update([Self.entry("old", version: 1)]) { _ in [] }
        var held = Self.entry("held", version: 3)
        held.blocks = []
        held.blocksHash = Data(repeating: 1, count: 32)  // not what the log keeps
        let blocks = IndexLogTests.file("x", sequence: 9, version: [(1, 1)]).blocks
        _ = try index.update([held, Self.entry("not-held", version: 2, invalid: true)]) { _ in blocks }
        let fresh = try index.entries(after: 1)
        let reopened = try LocalIndex.open(path: path, folderID: "f", me: Self.me, indexID: 7, renewIndexID: { 8 })
        defer { reopened.close() }
        #expect(fresh == (try reopened.entries(after: 1)))
        #expect(fresh.map(\.name) == ["held", "not-held"] && fresh.first?.blocks == blocks)
        #expect(try index.entries(after: 0).map(\.name) == ["old", "held", "not-held"], "before the update: from the log")
        index.forgetRecent()
        #expect(try index.entries(after: 1) == fresh)
        index.close()
    }

    /// A fresh home's first update records an entry per path: coming in name order, the entries
    /// are recorded a batch at a time, each durable, with the log's snapshots written as it
    /// grows (its view in memory stays a part of it); an update too long to keep for sending is
    /// read back from the log, the same entries. Out of name order, they are recorded at once,
    /// their sequences in name order.
    @Test func aLongUpdateInNameOrderIsRecordedABatchAtATime() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-local-index")
        defer { dir.remove() }
        let path = dir.file("f.local")
        let names = (0..<100).map { String(format: "p%03d", $0) }
        try IndexLog.$snapshotThreshold.withValue(1) {
            try LocalIndex.$batchSize.withValue(10) {
                try LocalIndex.$recentLimit.withValue(25) {
                    let index = try LocalIndex.open(path: path, folderID: "f", me: Self.me, indexID: 5, renewIndexID: { 7 })
                    // The 35th entry is a held file whose block list cannot be read: the three
                    // batches before it stay recorded, nothing after them is.
                    var held = Self.entry("p034", version: 1)
                    held.blocks = []
                    struct Unreadable: Error {}
                    #expect(throws: Unreadable.self) {
                        _ = try index.update(each: { body in for name in names { try body(name == "p034" ? held : Self.entry(name, version: 1, invalid: true)) } }) {
                            _ in throw Unreadable()
                        }
                    }
                    #expect(index.maxSequence == 30)
                    let reopened = try LocalIndex.open(path: path, folderID: "f", me: Self.me, indexID: 7, renewIndexID: { 8 })
                    #expect(try reopened.entries(after: 0).map(\.name) == Array(names.prefix(30)), "durable batch by batch")
                    reopened.close()

                    var overlayPeak = 0
                    let count = try index.update(
                        each: { body in
                            for name in names {
                                overlayPeak = max(overlayPeak, index.log.index.pathsOutsideSnapshot)
                                try body(Self.entry(name, version: 1, invalid: true))
                            }
                        }, blocks: { _ in [] })
                    #expect(count == 70)
                    #expect(index.log.index.hasSnapshot && overlayPeak < 50, "snapshots as it grew: at most \(overlayPeak) paths in memory")
                    #expect(index.log.index.pathsOutsideSnapshot == 0, "and one at its end: a later open replays nothing")
                    let all = try index.entries(after: 0)
                    #expect(all.map(\.name) == names && all.map(\.sequence) == Array(1...100))
                    #expect(try index.entries(after: 30).map(\.name) == Array(names.dropFirst(30)), "more than kept: from the log")
                    // Sent a batch at a time, each read from the log when it is made.
                    var pending = index.pending(after: 0)
                    var batches: [[Int64]] = []
                    while let batch = try pending.next(maxCount: 40, maxBytes: .max) { batches.append(batch.map(\.sequence)) }
                    #expect(batches == [Array(1...40), Array(41...80), Array(81...100)])
                    var small = index.pending(after: 95)
                    #expect(try small.next(maxCount: 40, maxBytes: 450)?.map(\.sequence) == [96, 97, 98], "about 200 bytes an entry")

                    // Out of name order: at once, sequences in name order.
                    let late = (0..<30).map { String(format: "q%03d", 29 - $0) }
                    #expect(try index.update(each: { body in for name in late { try body(Self.entry(name, version: 1, invalid: true)) } }, blocks: { _ in [] }) == 30)
                    #expect(try index.entries(after: 100).map(\.name) == late.reversed())
                    index.close()
                }
            }
        }
    }

    /// Two processes recording this device's changes (a service and a one-shot apply beside
    /// it) never give two entries one sequence number.
    @Test func twoWritersOfTheLocalIndexNeverShareASequence() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-local-index")
        defer { dir.remove() }
        let path = dir.file("f.local")
        let service = try LocalIndex.open(path: path, folderID: "f", me: Self.me, indexID: 5, renewIndexID: { 41 })
        let oneShot = try LocalIndex.open(path: path, folderID: "f", me: Self.me, indexID: 41, renewIndexID: { 42 })
        #expect(oneShot.indexID == 41, "the second open found the first one's index")
        #expect(try service.update([Self.entry("a", version: 1)]) { _ in [] }.map(\.sequence) == [1])
        #expect(try oneShot.update([Self.entry("b", version: 1)]) { _ in [] }.map(\.sequence) == [2])
        #expect(try service.update([Self.entry("b", version: 1), Self.entry("c", version: 1)]) { _ in [] }.map(\.sequence) == [3],
            "b is already announced as the other writer recorded it")
        try oneShot.log.catchUp()
        #expect(try oneShot.entries(after: 0).map(\.sequence) == [1, 2, 3])
        service.close()
        oneShot.close()
    }
}
