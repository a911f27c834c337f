import Foundation
import KaitenApply
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenSync
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// The pulls end with their last file: nothing the apply keeps beside them (the progress tick)
/// is waited out once no file is left to pull.
@Suite(.ownThread, .timeLimit(.minutes(2)))
struct PullEndTests {
    static let peer = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")

    /// Three files a peer announced, selected; the peer counts as refreshed but no connection
    /// is open, so each pull fails at once, as a pull from a peer gone in the meantime does.
    @Test func anApplyEndsWithItsLastPullNotAtTheNextProgressTick() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let opened = try TestHomes.receiveOnly(in: directory, peer: Self.peer)
        // Three files with one block each, and the directories above them.
        let files = SyntheticIndex.photos(count: 3)
        let logs = try IndexSync.openLogs(home: opened, folders: ["f"], warn: { _ in })
        try logs["f"]!.apply(device: Self.peer, indexID: 7, files: files, isFullIndex: true)
        for log in logs.values { log.close() }
        try FileManager.default.createDirectory(atPath: opened.home.selectionsDirectory, withIntermediateDirectories: true)
        try "photos\n".write(toFile: opened.home.selectionPath(folderID: "f"), atomically: true, encoding: .utf8)

        let session = PeerSession(connections: [:], refreshed: ["f": [Self.peer]])
        let prepared = try Applier.prepare(on: session, home: opened, folders: ["f"], requirePeers: 1, warn: { _ in })
        #expect(prepared.plan.folders.flatMap(\.actions).filter { $0.action == .pull }.count == 3)
        // A tick far longer than the test's limit: waited out, the apply would not end in time.
        let started = ContinuousClock.now
        let report = await Applier.execute(
            prepared.plan, prepared: prepared, home: opened, requirePeers: 1, progressInterval: .seconds(3_600), events: { _ in })
        #expect(ContinuousClock.now - started < .seconds(60))
        #expect(report.failed.map(\.path).sorted() == (0..<3).map(SyntheticIndex.path(of:)))
    }
}
