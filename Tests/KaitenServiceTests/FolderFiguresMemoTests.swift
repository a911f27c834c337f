import Foundation
import KaitenConfig
import KaitenHTTPAPI
import KaitenIndex
import KaitenProtocol
import KaitenTestSupport
import Synchronization
import Testing

@testable import KaitenService

/// A folder's figures are walked again only when a file they come from changed: a status poll
/// and a round that changed nothing read no index.
@Suite(.timeLimit(.minutes(2)))
struct FolderFiguresMemoTests {
    static let peer = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")

    struct Fixture {
        let directory: TemporaryDirectory
        let home: KaitenHome
        var folder: FolderConfiguration { home.config.folder(id: "f")! }

        init() throws {
            directory = try TemporaryDirectory()
            home = try TestHomes.receiveOnly(in: directory, peer: FolderFiguresMemoTests.peer)
            try FileManager.default.createDirectory(atPath: home.home.selectionsDirectory, withIntermediateDirectories: true)
            try Data("a\n".utf8).write(to: URL(fileURLWithPath: home.home.selectionPath(folderID: "f")))
        }

        /// Appends one peer's entry to the folder's log.
        func announce(_ name: String, sequence: Int64) throws {
            try FileManager.default.createDirectory(atPath: home.home.indexDirectory, withIntermediateDirectories: true)
            let log = try IndexLog.open(path: home.home.indexLogPath(folderID: "f"), folderID: "f")
            defer { log.close() }
            var file = BEPFileInfo()
            file.name = name
            file.size = 10
            file.sequence = sequence
            file.permissions = 0o644
            var counter = BEPCounter()
            counter.id = FolderFiguresMemoTests.peer.shortID
            counter.value = UInt64(sequence)
            file.version.counters = [counter]
            try log.apply(device: FolderFiguresMemoTests.peer, indexID: 1, files: [file], isFullIndex: sequence == 1)
        }
    }

    @Test func figuresAreComputedAgainOnlyWhenTheirFilesChange() throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        try fixture.announce("a", sequence: 1)
        let memo = FolderFiguresMemo()
        var computed = 0
        func ask(_ device: DeviceID? = nil) -> APIFolderSummary {
            memo.summary(fixture.folder, device: device, home: fixture.home) {
                computed += 1
                var summary = APIFolderSummary()
                summary.completion = Double(computed)
                return summary
            }
        }
        #expect(ask().completion == 1)
        #expect(ask().completion == 1, "nothing changed: the kept figures")
        #expect(ask(Self.peer).completion == 2, "a peer's figures are their own")
        #expect(ask(Self.peer).completion == 2)

        try fixture.announce("b", sequence: 2)
        #expect(ask().completion == 3, "the log grew")
        #expect(ask().completion == 3)

        // The same size, written in place at once: the stamp may not move, the bytes do.
        let selection = fixture.home.home.selectionPath(folderID: "f")
        let handle = try #require(FileHandle(forWritingAtPath: selection))
        try handle.write(contentsOf: Data("b\n".utf8))
        try handle.close()
        #expect(ask().completion == 4, "the selection changed")

        try Data("scan".utf8).write(to: URL(fileURLWithPath: fixture.home.home.scanCachePath(folderID: "f")))
        #expect(ask().completion == 5, "the scan changed")
        #expect(computed == 5)
    }

    /// Polls that come while a walk runs wait for it and take its figures.
    @Test func requestsDuringAComputationShareIt() async throws {
        let fixture = try Fixture()
        defer { fixture.directory.remove() }
        try fixture.announce("a", sequence: 1)
        let memo = FolderFiguresMemo()
        final class Count: Sendable { let value = Atomic(0) }
        let computed = Count()
        let folder = fixture.folder
        nonisolated(unsafe) let home = fixture.home  // read-only after load, as the service holds it
        await withTaskGroup(of: Double.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    memo.summary(folder, device: nil, home: home) {
                        let n = computed.value.add(1, ordering: .relaxed).newValue
                        usleep(200_000)
                        var summary = APIFolderSummary()
                        summary.completion = Double(n)
                        return summary
                    }.completion
                }
            }
            for await completion in group { #expect(completion == 1) }
        }
        #expect(computed.value.load(ordering: .relaxed) == 1)
    }
}
