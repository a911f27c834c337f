import Foundation
import KaitenIndex
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenSync

/// What the intake does with a peer's batches on an open connection: stored under the index ID
/// its exchange noted, a new ID starting the peer over, a batch from a peer never exchanged with
/// refused. On a log in a directory, without a connection.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct IntakeLogsTests {
    static let peer = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")

    func file(_ name: String, sequence: Int64) -> BEPFileInfo {
        var info = BEPFileInfo()
        info.name = name
        info.sequence = sequence
        info.size = 1
        var counter = BEPCounter()
        counter.id = Self.peer.shortID
        counter.value = UInt64(sequence)
        info.version.counters = [counter]
        return info
    }

    func withIntake(_ body: (IntakeLogs, String) throws -> Void) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("f.log")
        let intake = IntakeLogs(open: { try IndexLog.open(path: path, folderID: $0) }, warn: { _ in })
        defer { intake.closeAll() }
        try body(intake, path)
    }

    @Test func aBatchIsStoredOnlyUnderTheIndexIDTheExchangeNoted() throws {
        try withIntake { intake, path in
            #expect(throws: IndexLogError.self) { try intake.store(folder: "f", device: Self.peer, files: [file("a", sequence: 1)], isFull: false) }
            #expect(try intake.begin(folder: "f", device: Self.peer, indexID: 7) == 0)
            #expect(try intake.store(folder: "f", device: Self.peer, files: [file("a", sequence: 1), file("b", sequence: 2)], isFull: false) == 2)
            // The same ID again (a reconnection): what is held stays.
            #expect(try intake.begin(folder: "f", device: Self.peer, indexID: 7) == 2)
            let names = try intake.with("f") { log in log.index.global("a") != nil && log.index.global("b") != nil }
            #expect(names)
            // Written through: another reader of the file sees it.
            let reader = try IndexLog.open(path: path, folderID: "f", readOnly: true)
            defer { reader.close() }
            #expect(reader.checkpoints[Self.peer]?.maxSequence == 2)
        }
    }

    @Test func aNewIndexIDStartsThePeerOver() throws {
        try withIntake { intake, _ in
            _ = try intake.begin(folder: "f", device: Self.peer, indexID: 7)
            _ = try intake.store(folder: "f", device: Self.peer, files: [file("a", sequence: 1)], isFull: false)
            #expect(try intake.begin(folder: "f", device: Self.peer, indexID: 8) == 0)
            let gone = try intake.with("f") { log in log.index.global("a") == nil }
            #expect(gone)
            #expect(try intake.store(folder: "f", device: Self.peer, files: [file("c", sequence: 1)], isFull: false) == 1)
            // Settling between rounds keeps what is held.
            intake.settle()
            let held = try intake.with("f") { log in log.index.global("c") != nil }
            #expect(held)
        }
    }
}
