import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenScan
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenSync

/// After an edit of the selection alone, the local index is brought in line by comparing only
/// the paths the old or the new selection reaches: what it announces then is what comparing
/// every path announces.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct SelectionEditRefreshTests {
    static let peer = LocalIndexSnapshotTests.peer

    /// A home with a folder of 3,000 files a peer announced, and its global log.
    static func home(_ directory: TemporaryDirectory, _ name: String) throws -> (KaitenHome, [String: IndexLog]) {
        let opened = try LocalIndexSnapshotTests.home(in: directory, name: name)
        let logs = try IndexSync.openLogs(home: opened, folders: ["f"], warn: { _ in })
        try logs["f"]!.apply(device: Self.peer, indexID: 7, files: LocalIndexSnapshotTests.peerFiles(3000), isFullIndex: true)
        return (opened, logs)
    }

    static func select(_ text: String, in home: KaitenHome) throws {
        try FileManager.default.createDirectory(atPath: home.home.selectionsDirectory, withIntermediateDirectories: true)
        try text.write(toFile: home.home.selectionPath(folderID: "f"), atomically: true, encoding: .utf8)
    }

    /// What the local index announces for every path, sequence numbers aside.
    static func announced(_ announcer: LocalAnnouncer) -> [String] {
        (0..<3000).map { n in
            let path = "d\(n % 30)/f\(n).bin"
            guard let e = announcer.announced(folder: "f", path: path) else { return "\(path) -" }
            return "\(path) i\(e.isInvalid) d\(e.isDeleted) [\(e.version.counters.map { "\($0.id):\($0.value)" }.joined(separator: ","))]"
        }
    }

    @Test func anEditedSelectionIsAnnouncedAsAComparisonOfEveryPathAnnouncesIt() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var results: [[String]] = []
        for name in ["partial", "whole"] {
            let (home, logs) = try Self.home(directory, name)
            let log = logs["f"]!
            defer { log.close() }
            let announcer = try LocalAnnouncer(home: home, folders: ["f"])
            defer { announcer.close() }
            try Self.select("d1\nd2\n", in: home)
            #expect(try announcer.refresh(folder: "f", log: log) == 2800, "not held: every path but d1's and d2's")
            try Self.select("d2\nd3/f3.bin\nd3/f33.bin\n", in: home)
            let basisPath = home.home.stateDirectory + "/announced-basis/f"
            if name == "whole" { try FileManager.default.removeItem(atPath: basisPath + ".selection") }
            let paths = LocalAnnouncer.pathsAnEditedSelectionMoves(
                recordedBasis: try #require(FileManager.default.contents(atPath: basisPath)),
                basis: LocalAnnouncer.basis(home: home.home, folder: "f", type: "receiveonly", log: log, index: try #require(announcer.index("f"))),
                recordedSelection: FileManager.default.contents(atPath: basisPath + ".selection"), log: log, local: LocalTree(),
                home: home, folder: "f")
            if name == "partial" {
                // d1's and d2's files, and the two of d3.
                #expect(paths?.count == 202)
            } else {
                #expect(paths == nil)
            }
            // d1's files go back to "not held" (100), d3's two become needed; d2's stay as they were.
            #expect(try announcer.refresh(folder: "f", log: log) == 102)
            #expect(try announcer.refresh(folder: "f", log: log) == 0)
            results.append(Self.announced(announcer))
        }
        #expect(results[0] == results[1])
        #expect(results[0].contains("d1/f1.bin itrue dfalse [\(Self.peer.shortID):2]"))
        #expect(results[0].contains("d3/f3.bin itrue dfalse []"))
    }

    /// An apply's refresh puts off announcing newly selected paths as needed, and leaves the
    /// basis unrecorded: the refresh at its end compares again and announces them.
    @Test func anApplysRefreshLeavesNeedsToTheNextOne() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (home, logs) = try Self.home(directory, "deferring")
        let log = logs["f"]!
        defer { log.close() }
        let announcer = try LocalAnnouncer(home: home, folders: ["f"])
        defer { announcer.close() }
        try Self.select("d1\n", in: home)
        #expect(try announcer.refresh(folder: "f", log: log) == 2900)
        try Self.select("d2\n", in: home)
        // d1's files go back to "not held"; d2's stay announced as not held for now.
        #expect(try announcer.refresh(folder: "f", log: log, deferringNeeds: true) == 100)
        let d2 = { Self.announced(announcer).first { $0.hasPrefix("d2/f2.bin ") } }
        #expect(d2() == "d2/f2.bin itrue dfalse [\(Self.peer.shortID):3]", "not held, at the global version")
        #expect(try announcer.refresh(folder: "f", log: log, deferringNeeds: true) == 0)
        // The apply's end: d2's files become needed.
        #expect(try announcer.refresh(folder: "f", log: log) == 100)
        #expect(d2() == "d2/f2.bin itrue dfalse []", "needed")
        #expect(try announcer.refresh(folder: "f", log: log) == 0)
    }
}
