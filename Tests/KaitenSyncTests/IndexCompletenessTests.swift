import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenSync

/// A peer's index behind what it announced is partial only once its exchange has ended: a
/// service's round that looks while the peer's batches are still coming in says nothing.
@Suite(.ownThread, .timeLimit(.minutes(1)))
struct IndexCompletenessTests {
    @Test func aPeerIsPartialOnlyOnceItsExchangeEnded() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let home = Home(path: directory.file("home"))
        let peer = try DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")
        try FileManager.default.createDirectory(atPath: directory.file("index"), withIntermediateDirectories: true)
        let log = try IndexLog.open(path: directory.file("index/f.log"), folderID: "f")
        defer { log.close() }
        var file = BEPFileInfo()
        file.name = "a.txt"
        file.sequence = 34
        try log.apply(device: peer, indexID: 7, files: [file], isFullIndex: true)

        IndexCompleteness.expect(home, folder: "f", device: peer, indexID: 7, maxSequence: 65)
        #expect(IndexCompleteness.partial(home, folder: "f", log: log).isEmpty, "still coming in")
        IndexCompleteness.exchangeEnded(home, folders: ["f"], device: peer)
        let partial = IndexCompleteness.partial(home, folder: "f", log: log)
        #expect(partial.count == 1 && partial.first?.have == 34 && partial.first?.expected == 65, "\(partial)")
    }
}
