import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenSync

/// A one-shot sync leaves this device's local index with a snapshot once it grew big (a fresh
/// home records a "not held" entry per path of the folder): `plan` and `kaiten run` then read it
/// in place instead of replaying every entry into memory.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct LocalIndexSnapshotTests {
    static let peer = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")

    /// A home under `directory` with a receive-only folder `f` shared with ``peer``.
    static func home(in directory: TemporaryDirectory, name: String = "home") throws -> KaitenHome {
        try TestHomes.receiveOnly(in: directory, name: name, data: "\(name)-data", peer: Self.peer)
    }

    /// `count` files of 4 KiB in 30 directories, as ``peer`` announces them.
    static func peerFiles(_ count: Int) -> [BEPFileInfo] {
        (0..<count).map { n -> BEPFileInfo in
            var file = BEPFileInfo()
            file.name = "d\(n % 30)/f\(n).bin"
            file.size = 4096
            file.sequence = Int64(n + 1)
            file.modifiedS = 1_790_000_000
            file.permissions = 0o644
            var counter = BEPCounter()
            counter.id = Self.peer.shortID
            counter.value = UInt64(n + 1)
            file.version.counters = [counter]
            return file
        }
    }

    @Test func closingAfterASyncSnapshotsABigLocalIndexAndItIsReadFromIt() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let opened = try Self.home(in: directory)
        try IndexLog.$snapshotThreshold.withValue(64 << 10) {
            let logs = try IndexSync.openLogs(home: opened, folders: ["f"], warn: { _ in })
            let log = try #require(logs["f"])
            let files = Self.peerFiles(3000)
            try log.apply(device: Self.peer, indexID: 7, files: files, isFullIndex: true)
            let announcer = try LocalAnnouncer(home: opened, folders: ["f"])
            try announcer.refresh(logs: logs)
            let recorded = announcer.state["f"]?.maxSequence ?? 0
            #expect(recorded >= 3000, "a not-held entry per path")
            announcer.close(maintaining: { Issue.record("warning: \($0)") })
            log.close()

            let local = opened.home.localIndexPath(folderID: "f")
            #expect(FileManager.default.fileExists(atPath: IndexLog.snapshotPath(of: local)))
            let again = try IndexLog.open(path: local, folderID: "f", readOnly: true)
            defer { again.close() }
            #expect(again.index.hasSnapshot && again.recordsReplayed == 0, "read from the snapshot, nothing replayed")
            #expect(again.checkpoints[opened.identity.deviceID]?.maxSequence == recorded)
            var entries = 0
            again.index.forEachEntry { _, owner, entry in
                if owner == opened.identity.deviceID && entry.isInvalid { entries += 1 }
            }
            #expect(entries >= 3000)
        }
    }
}
