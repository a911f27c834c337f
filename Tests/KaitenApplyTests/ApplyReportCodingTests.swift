import Foundation
import KaitenApply
import KaitenProtocol
import Testing

/// The report a service sends to the client whose apply it ran (the control socket): the client
/// says what was done, failed, kept and sent, so every field must arrive.
@Suite struct ApplyReportCodingTests {
    @Test func aReportCrossesTheControlSocketWhole() throws {
        var report = ApplyReport(conflicts: 2)
        report.done = 7
        report.failed = [.init("f", "a.txt", "disk full")]
        report.pulledBytes = 1 << 20
        report.freedBytes = 4096
        report.blocksFetched = 9
        report.blocksRejected = 1
        report.interruptedBy = 15
        report.notDone = 3
        report.keptForSafety = [.init("f", "b.txt")]
        var version = BEPVector()
        var counter = BEPCounter()
        counter.id = 0xABCD_EF01_2345_6789
        counter.value = 42
        version.counters = [counter]
        report.sent = [SentChange(folder: "f", path: "c.txt", version: version, deleted: true)]
        report.notHeld = [.init("f", "c.txt")]
        report.conflictCopies = [.init("f", "d.sync-conflict-20261126-120000-ABCDEFG.txt")]

        let decoded = try JSONDecoder().decode(ApplyReport.self, from: JSONEncoder().encode(report))
        #expect(decoded.done == 7 && decoded.conflicts == 2 && decoded.notDone == 3 && decoded.interruptedBy == 15)
        #expect(decoded.failed == report.failed && decoded.keptForSafety == report.keptForSafety)
        #expect(decoded.notHeld == report.notHeld && decoded.conflictCopies == report.conflictCopies)
        #expect(decoded.pulledBytes == 1 << 20 && decoded.freedBytes == 4096 && decoded.blocksFetched == 9 && decoded.blocksRejected == 1)
        let sent = try #require(decoded.sent.first)
        #expect(sent.folder == "f" && sent.path == "c.txt" && sent.deleted)
        #expect(sent.version.counters.map(\.id) == [0xABCD_EF01_2345_6789] && sent.version.counters.map(\.value) == [42])
    }
}
