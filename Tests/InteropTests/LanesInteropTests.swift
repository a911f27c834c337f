import Crypto
import Foundation
import KaitenConfig
import KaitenPeer
import KaitenProtocol
import KaitenSync
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Several connections to one peer (`num_connections`, syncthing 1.25+): a pulling session asks
/// for them, syncthing 2.x agrees and they carry block requests; 1.19.2 ignores the field and
/// one connection does everything.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct LanesInteropTests {
    /// Waits until `count` lanes are open beside `primary`, or `seconds` have passed.
    static func waitForLanes(_ count: Int, beside primary: PeerConnection, seconds: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while primary.laneCount < count, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
    }

    /// A file of 64 blocks on a real peer, fetched block by block through a session that asked
    /// for three connections: against 2.x the requests are spread over the lanes and every block
    /// is verified; a lane that closes mid-way costs nothing (its requests go to the primary);
    /// against 1.19.2 there are no lanes and the same fetches work.
    @Test func requestsSpreadOverTheConnectionsThePeerAgreesTo() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-lanes")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let size = 64 << 17  // 8 MiB: 64 blocks of 128 KiB
        try TestFiles.random(world.peerData + "/big.bin", size: size)
        let content = try Data(contentsOf: URL(fileURLWithPath: world.peerData + "/big.bin"))
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            let home = try KaitenHome.open(Home(path: world.home))
            let (reports, session) = try await IndexSync.runKeepingConnections(
                home: home, folders: [ApplyInteropTests.folder], lanes: .pulling(standard: 3))
            let synced = reports.allSatisfy { $0.ok }
            #expect(synced, "\(reports.map { $0.problem ?? "ok" })")
            guard let primary = session.connections[st.deviceID] else {
                Issue.record("no connection to the peer")
                return
            }
            let twoX = SyncthingInstance.majorVersion >= 2
            // Lanes open in the background; the peer's ClusterConfig on each comes ~1 s after its
            // Hello. (Generous: beside other suites, this process's task pool can be held for
            // long stretches by their synchronous waits on child processes.)
            try await Self.waitForLanes(2, beside: primary, seconds: twoX ? 120 : 3)
            #expect(primary.laneCount == (twoX ? 2 : 0), "lanes beside the primary with \(SyncthingInstance.versionLine)")

            let file = {
                var file = BEPFileInfo()
                file.name = "big.bin"
                file.size = Int64(size)
                file.blockSize = 128 << 10
                return file
            }()
            let blocks = stride(from: 0, to: size, by: 128 << 10).map { offset in
                var block = BEPBlockInfo()
                block.offset = Int64(offset)
                block.size = Int32(128 << 10)
                block.hash = Data(SHA256.hash(data: content[offset..<(offset + (128 << 10))]))
                return block
            }
            func fetchAll() async throws -> Data {
                let parts = try await withThrowingTaskGroup(of: (Int64, Data).self) { group in
                    for block in blocks {
                        group.addTask { (block.offset, try await primary.fetchBlock(folder: ApplyInteropTests.folder, file: file, block: block)) }
                    }
                    return try await group.reduce(into: [Int64: Data]()) { $0[$1.0] = $1.1 }
                }
                return parts.keys.sorted().reduce(into: Data()) { $0 += parts[$1]! }
            }
            #expect(try await fetchAll() == content)
            let lanes = primary.lanesInUse
            let onLanes = lanes.map(\.stats.requestsSent)
            if twoX {
                // In turn over the primary and its two lanes: each lane carried its third.
                #expect(onLanes.count == 2 && onLanes.allSatisfy { $0 >= blocks.count / 4 }, "requests per lane: \(onLanes)")
                await lanes[0].close(reason: "test: a lane goes away")
                #expect(try await fetchAll() == content)
                #expect(primary.laneCount == 1)
            }
            await session.close(reason: "test done")
            #expect(lanes.allSatisfy { !$0.isOpen }, "the lanes close with their session")

            // The next session (the next `kaiten apply`) gets the peer's index on its first
            // connection, again: the peer has dropped the lanes with the session.
            for round in 1...2 {
                let (again, next) = try await IndexSync.runKeepingConnections(
                    home: home, folders: [ApplyInteropTests.folder], timeout: 30, lanes: .pulling(standard: 3))
                let ok = again.allSatisfy { $0.ok }
                #expect(ok, "session \(round + 1): \(again.map { $0.problem ?? "ok" })")
                if twoX, let primary = next.connections[st.deviceID] {
                    try await Self.waitForLanes(1, beside: primary, seconds: 120)
                    #expect(primary.laneCount >= 1)
                }
                await next.close(reason: "test done")
            }
        }
    }

    /// A peer that answers a session's first connection with a `secondary` ClusterConfig still
    /// holds an earlier connection of this device as its primary, and would send the indexes
    /// there: the connection is closed at once (not after the 120 s index timeout) and, for a
    /// peer met before, dialled again until the peer takes it as the primary; a peer never met
    /// is named with what it did.
    @Test func aSessionThePeerTakesAsSecondaryIsDialledAgain() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-secondary")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let peer = try await ScriptedPeer(in: dir.path, folder: ApplyInteropTests.folder, contents: [:], allowed: world.me)
        defer { Task { await peer.stop() } }
        #expect(try await world.kaitenDetached("peer", "add", peer.deviceID.description, "--name", "scripted", "--address", peer.address).status == 0)
        try world.addFolder(sharedWith: [peer.deviceID])
        peer.announce([peer.file("a.txt", Data("a\n".utf8), sequence: 1)])

        // Never met: said at once.
        peer.secondaryOnly.withLockedValue { $0 = 1 }
        let started = ContinuousClock.now
        let first = try await world.kaitenDetached("index", "sync")
        #expect(first.status != 0, "\(first.stdout)\(first.stderr)")
        #expect((first.stdout + first.stderr).contains("treats this connection as a secondary one"), "\(first.stdout)\(first.stderr)")
        #expect(ContinuousClock.now - started < .seconds(60), "not left to the index timeout")

        // Met before (this sync), then taken as secondary twice: dialled again, synced.
        #expect(try await world.kaitenDetached("index", "sync").status == 0)
        peer.secondaryOnly.withLockedValue { $0 = 2 }
        let again = try await world.kaitenDetached("index", "sync")
        #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
        #expect(peer.secondaryOnly.withLockedValue { $0 } == 0, "both secondary answers were used")
    }
}
