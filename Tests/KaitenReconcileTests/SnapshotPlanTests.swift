import Foundation
import KaitenIndex
import KaitenProtocol
import KaitenScan
import Testing

@testable import KaitenReconcile

/// A plan reads only the selected part of the index and the paths on disk (issue 13, item 2):
/// over an index read from a snapshot it says exactly what it says over the same index held in
/// memory, whatever the selection (nested roots, names outside ASCII, globs, nothing).
@Suite(.timeLimit(.minutes(5)))
struct SnapshotPlanTests {
    /// Every announcement of the fixture, also written to an index log whose view is then read
    /// from its snapshot.
    static func announcements() -> [(String, String, UInt64, BEPFileInfoType, Bool)] {
        var list: [(String, String, UInt64, BEPFileInfoType, Bool)] = []
        for top in ["a", "a-b", "b", "fotos", "été", "z"] {
            list.append((top, "", 1, .directory, false))
            for sub in ["x", "y", "été"] {
                list.append(("\(top)/\(sub)", "", 1, .directory, false))
                for n in 0..<4 {
                    list.append(("\(top)/\(sub)/f\(n).jpg", "\(top)\(sub)\(n)", UInt64(n + 1), .file, n == 3))
                }
            }
        }
        list.append(("a/b", "", 1, .directory, false))
        list.append(("a/b/deep.txt", "deep", 2, .file, false))
        return list
    }

    static func file(_ a: (String, String, UInt64, BEPFileInfoType, Bool), sequence: Int64) -> BEPFileInfo {
        var file = BEPFileInfo()
        file.name = a.0
        file.type = a.3
        file.deleted = a.4
        file.size = a.3 == .file && !a.4 ? 100 : 0
        file.permissions = a.3 == .directory ? 0o755 : 0o644
        file.version = Fixture.version(a.2)
        file.sequence = sequence
        file.modifiedS = 1_700_000_000
        file.blockSize = 131072
        if a.3 == .file && !a.4 { file.blocksHash = Data(Fixture.content(a.1).bytes) }
        return file
    }

    @Test func aPlanOverASnapshotIsThePlanOverTheWholeIndex() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("kaiten-snapplan-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var fixture = Fixture()
        let files = Self.announcements().enumerated().map { Self.file($0.element, sequence: Int64($0.offset + 1)) }
        for file in files { fixture.global.announce(file, by: Fixture.peerA) }
        let log = try IndexLog.open(path: dir + "/f.log", folderID: "f")
        try log.apply(device: Fixture.peerA, indexID: 1, files: Array(files.prefix(60)), isFullIndex: true)
        try log.writeSnapshot()
        // The rest after the snapshot: the view is part snapshot, part log tail.
        try log.apply(device: Fixture.peerA, indexID: 1, files: Array(files.dropFirst(60)), isFullIndex: false)
        #expect(log.index.hasSnapshot)
        let snapshotIndex = log.index

        // On disk: selected copies, deselected copies, a local edit, files no peer has.
        for top in ["a", "b", "fotos", "été"] {
            fixture.onDisk(top, kind: .directory)
            fixture.onDisk("\(top)/x", kind: .directory)
            fixture.onDisk("\(top)/x/f0.jpg", "\(top)x0", synced: (1, "\(top)x0"))
            fixture.onDisk("\(top)/x/f1.jpg", "edited", synced: (2, "\(top)x1"))
            fixture.onDisk("\(top)/x/f3.jpg", "\(top)x3", synced: (3, "\(top)x3"))
            fixture.onDisk("\(top)/x/new.txt", "mine")
        }
        let selections = [
            "", "a\n", "a\na/b\n", "a/b\n", "a-b\nb/x\n", "fotos/été\n", "été\n", "été/x\n", "*/x/f0.jpg\n", "a\n(?d)f1.jpg\n",
            "z\nnothing\n",
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        for selection in selections {
            fixture.selection = selection
            var inMemory = fixture
            inMemory.global = fixture.global
            var snapshotted = fixture
            snapshotted.global = snapshotIndex
            let expectedPlan = try inMemory.plan()
            let actualPlan = try snapshotted.plan()
            let expected = try encoder.encode(expectedPlan)
            let actual = try encoder.encode(actualPlan)
            #expect(actual == expected, "selection \(selection.debugDescription): \(actualPlan.lines) vs \(expectedPlan.lines)")
            #expect(!expectedPlan.actions.isEmpty || !expectedPlan.conflicts.isEmpty || selection == "z\nnothing\n")
        }
        log.close()
    }
}
