import Crypto
import Foundation
import KaitenConfig
import KaitenPeer
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Kaiten's BEP implementation against the real syncthing 1.19.2.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct BEPInteropTests {
    /// A syncthing peer sharing `folder` with a Kaiten device, started and stopped around `body`.
    struct Setup: Sendable {
        let dir: TemporaryDirectory
        let syncthing: SyncthingInstance
        let kaiten: KaitenDevice
        let folderPath: String
        let folderID = "shared"

        var folderConfiguration: FolderConfiguration {
            FolderConfiguration(id: folderID, label: "Shared", path: "/unused", devices: [kaiten.deviceID, syncthing.deviceID])
        }

        func clusterConfig(remote: [String: RemoteIndexState] = [:]) throws -> BEPClusterConfig {
            let ids = try LocalIndexIDs(home: kaiten.home).ids(for: [folderID])
            return ClusterConfigBuilder.make(
                folders: [folderConfiguration],
                devices: [DeviceConfiguration(id: kaiten.deviceID, name: "kaiten"), DeviceConfiguration(id: syncthing.deviceID, name: "st")],
                me: kaiten.deviceID, peer: syncthing.deviceID, localIndexIDs: ids, remote: remote)
        }

        func connect(settings: PeerSettings = PeerSettings()) async throws -> PeerConnection {
            try await PeerDialer.connect(
                to: PeerAddress(host: "127.0.0.1", port: syncthing.listenPort), expecting: syncthing.deviceID,
                identity: kaiten.identity, hello: Self.hello, settings: settings)
        }

        static var hello: BEPHello {
            var hello = BEPHello()
            hello.deviceName = "kaiten-test"
            hello.clientName = "kaiten"
            hello.clientVersion = "v0.1.0"
            return hello
        }

        func scan() async throws {
            try await syncthing.post("/rest/db/scan?folder=\(folderID)")
            try await syncthing.waitIdle(folder: folderID)
        }

        func status() async throws -> [String: Any] {
            try await syncthing.get("/rest/db/status?folder=\(folderID)") as? [String: Any] ?? [:]
        }
    }

    static func withPeer(
        compression: String = "metadata", populate: (String) throws -> Void = { _ in },
        _ body: (Setup) async throws -> Void
    ) async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-bep")
        defer { dir.remove() }
        let syncthing = try SyncthingInstance.generate(in: dir.path)
        let kaiten = try KaitenDevice(in: dir.path)
        let folderPath = dir.file("st-folder")
        try FileManager.default.createDirectory(atPath: folderPath, withIntermediateDirectories: true)
        try populate(folderPath)
        let setup = Setup(dir: dir, syncthing: syncthing, kaiten: kaiten, folderPath: folderPath)
        try await withSyncthing(syncthing) { st in
            try await st.addDevice(kaiten.deviceID, name: "kaiten", compression: compression)
            try await st.addFolder(id: setup.folderID, path: folderPath, devices: [kaiten.deviceID])
            // Idle is not enough: a folder just added can look idle before its first scan starts
            // (2.x does), and a file removed then was never indexed. Wait for every file.
            var regular = 0
            let walker = FileManager.default.enumerator(atPath: folderPath)
            while let name = walker?.nextObject() as? String {
                var info = stat()
                if lstat(folderPath + "/" + name, &info) == 0, info.st_mode & S_IFMT == S_IFREG, !name.hasPrefix(".stfolder") { regular += 1 }
            }
            try await st.waitUntil("the first scan indexed \(regular) files", timeout: 120) {
                let status = try await setup.status()
                return status["state"] as? String == "idle" && status["localFiles"] as? Int == regular
            }
            try await body(setup)
        }
    }

    @Test func handshakeAndEmptyFolderNeverWaitsForAnIndex() async throws {
        try await Self.withPeer { setup in
            let connection = try await setup.connect()
            #expect(connection.hello.clientName == "syncthing")
            #expect(connection.hello.clientVersion.hasPrefix(SyncthingInstance.versionTag))
            #expect(!connection.hello.deviceName.isEmpty)  // it names itself only to devices it knows
            try await connection.sendClusterConfig(setup.clusterConfig())
            // An empty folder sends no Index at all; completion comes from the ClusterConfig.
            let receiver = try await connection.receiveIndexes(
                wanted: [setup.folderID], me: setup.kaiten.deviceID, timeout: 20) { _, _, _ in }
            #expect(receiver.isComplete)
            #expect(receiver.folders[setup.folderID]?.target == 0)
            await connection.close(reason: "test done")
        }
    }

    /// The names and kinds the issue lists, on the peer's disk.
    static func populate(_ root: String) throws {
        func path(_ name: String) -> String { (root as NSString).appendingPathComponent(name) }
        try TestFiles.random(path("empty.bin"), size: 0)
        try TestFiles.random(path("one.bin"), size: 1)
        try TestFiles.random(path("exact-131072.bin"), size: 131_072)
        try TestFiles.random(path("multi-300k.bin"), size: 300_000)
        try TestFiles.random(path("big-270M.bin"), size: 270_000_000)
        for name in ["café.txt", "with space.txt", "br[ack]et.txt", "star*.txt", "bang!.txt", "#hash.txt", "a/b/c/deep.txt",
            "a/b/sibling.txt", "to-delete.txt", "ignored.tmp"]
        {
            try TestFiles.write(path(name), "content of \(name)\n")
        }
        try FileManager.default.createSymbolicLink(atPath: path("link"), withDestinationPath: "one.bin")
    }

    /// Receives the whole index of a populated folder and checks every entry against what
    /// syncthing's REST API says; then requests every block and checks its SHA-256.
    @Test func fullIndexMatchesRESTAndEveryBlockVerifies() async throws {
        try await Self.withPeer(populate: Self.populate) { setup in
            // A deleted file and a file the peer ignores after having indexed it.
            try FileManager.default.removeItem(atPath: setup.folderPath + "/to-delete.txt")
            try await setup.scan()
            try await setup.syncthing.post("/rest/db/ignores?folder=\(setup.folderID)", json: ["ignore": ["ignored.tmp"]])
            try await setup.scan()

            let connection = try await setup.connect()
            try await connection.sendClusterConfig(setup.clusterConfig())
            var entries: [String: BEPFileInfo] = [:]
            var sawFullIndex = false
            let receiver = try await connection.receiveIndexes(wanted: [setup.folderID], me: setup.kaiten.deviceID) {
                folder, files, isFull in
                #expect(folder == setup.folderID)
                if isFull { sawFullIndex = true }
                for file in files { entries[file.name] = file }
            }
            #expect(sawFullIndex)
            let status = try await setup.status()
            #expect(receiver.folders[setup.folderID]?.received == status["sequence"] as? Int64 ?? Int64(status["sequence"] as? Int ?? -1))
            #expect(connection.stats.compressedFramesReceived > 0)  // compression="metadata": LZ4 indexes

            // Every entry agrees with /rest/db/file (syncthing's local record is what it announces).
            for (name, file) in entries {
                let encoded = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? name
                let info = try #require(
                    try await setup.syncthing.get("/rest/db/file?folder=\(setup.folderID)&file=\(encoded)") as? [String: Any])
                let local = try #require(info["local"] as? [String: Any], "no local record for \(name)")
                #expect(local["deleted"] as? Bool == file.deleted, "\(name)")
                #expect(local["invalid"] as? Bool == file.invalid, "\(name)")
                #expect((local["sequence"] as? NSNumber)?.int64Value == file.sequence, "\(name)")
                let version = file.version.counters.map { "\(DeviceID.shortIDString($0.id)):\($0.value)" }
                #expect(local["version"] as? [String] == version, "\(name)")
                if file.type == .file && !file.deleted && !file.invalid {
                    #expect((local["size"] as? NSNumber)?.int64Value == file.size, "\(name)")
                    #expect((local["numBlocks"] as? Int) == file.blocks.count, "\(name)")
                }
            }
            #expect(entries["to-delete.txt"]?.deleted == true)
            #expect(entries["ignored.tmp"]?.invalid == true)
            #expect(entries["link"]?.type == .symlink)
            #expect(entries["link"]?.symlinkTarget == "one.bin")
            #expect(entries["a/b/c"]?.type == .directory)
            #expect(entries["empty.bin"]?.blocks.count == 1)
            #expect(entries["exact-131072.bin"]?.blocks.count == 1)
            #expect(entries["multi-300k.bin"]?.blocks.count == 3)
            #expect(entries["big-270M.bin"]?.blockSize == 262_144)
            // The name on the wire is NFC, byte for byte (a dictionary lookup by String would
            // also find an NFD spelling).
            #expect(entries.keys.contains { Array($0.utf8) == Array("caf\u{E9}.txt".utf8) })
            #expect(!entries.keys.contains { Array($0.utf8) == Array("cafe\u{301}.txt".utf8) })

            // The live tree equals /rest/db/browse (which omits deleted and invalid entries).
            let browse = try #require(try await setup.syncthing.get("/rest/db/browse?folder=\(setup.folderID)") as? [[String: Any]])
            var restTree: [String: (type: String, size: Int64)] = [:]
            func walk(_ nodes: [[String: Any]], prefix: String) {
                for node in nodes {
                    let name = prefix + (node["name"] as? String ?? "")
                    restTree[name] = (node["type"] as? String ?? "", (node["size"] as? NSNumber)?.int64Value ?? -1)
                    walk(node["children"] as? [[String: Any]] ?? [], prefix: name + "/")
                }
            }
            walk(browse, prefix: "")
            let live = entries.values.filter { !$0.deleted && !$0.invalid }
            #expect(Set(live.map(\.name)) == Set(restTree.keys))
            for file in live where file.type == .file {
                #expect(restTree[file.name]?.size == file.size, "\(file.name)")
                #expect(restTree[file.name]?.type == "FILE_INFO_TYPE_FILE")
            }

            // Every block of every live file, many requests in flight, each SHA-256 verified.
            let files = live.filter { $0.type == .file }
            let connectionRef = connection
            let bytes = try await withThrowingTaskGroup(of: Int.self) { group in
                for file in files {
                    for block in file.blocks {
                        group.addTask {
                            try await connectionRef.fetchBlock(folder: setup.folderID, file: file, block: block).count
                        }
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(Int64(bytes) == files.reduce(0) { $0 + $1.size })
            #expect(connection.stats.maxOutstandingRequestBytes <= 32 << 20)
            #expect(connection.stats.maxOutstandingRequestBytes > 256 << 10)  // more than one in flight

            // Asking for what we were not announced: a proper error, not a crash.
            var bogus = BEPFileInfo()
            bogus.name = "nope.bin"
            var block = BEPBlockInfo()
            block.size = 10
            block.hash = Data(repeating: 0, count: 32)
            await #expect(throws: PeerError.self) {
                _ = try await connection.fetchBlock(folder: setup.folderID, file: bogus, block: block)
            }
            await connection.close(reason: "test done")
        }
    }

    /// Live changes arrive as IndexUpdates; a reconnect with the saved index ID and sequence
    /// gets only what changed meanwhile.
    @Test func indexUpdatesAndDeltaReconnect() async throws {
        try await Self.withPeer(populate: { root in
            for i in 0..<20 { try TestFiles.write(root + "/f\(i).txt", "file \(i)\n") }
        }) { setup in
            let connection = try await setup.connect()
            try await connection.sendClusterConfig(setup.clusterConfig())
            var first: [String: BEPFileInfo] = [:]
            let receiver = try await connection.receiveIndexes(wanted: [setup.folderID], me: setup.kaiten.deviceID) {
                _, files, _ in for file in files { first[file.name] = file }
            }
            #expect(first.count == 20)

            // Change on the peer while connected: an update, an addition, a deletion.
            try TestFiles.write(setup.folderPath + "/f1.txt", "changed\n")
            try TestFiles.write(setup.folderPath + "/new.txt", "new\n")
            try FileManager.default.removeItem(atPath: setup.folderPath + "/f2.txt")
            try await setup.syncthing.post("/rest/db/scan?folder=\(setup.folderID)")
            var updated: [String: BEPFileInfo] = [:]
            var state = receiver.state
            for await event in connection.events {
                if case .index(_, let files, let isFull) = event {
                    #expect(!isFull)
                    for file in files {
                        updated[file.name] = file
                        let held = state[setup.folderID]?.maxSequence ?? 0
                        state[setup.folderID]?.maxSequence = max(held, file.sequence)
                    }
                }
                if Set(updated.keys).isSuperset(of: ["f1.txt", "new.txt", "f2.txt"]) { break }
            }
            #expect(updated["f2.txt"]?.deleted == true)
            #expect(updated["f1.txt"]?.size == 8)
            await connection.close(reason: "going away")

            // Changes while disconnected, then reconnect with what we hold.
            try TestFiles.write(setup.folderPath + "/while-away.txt", "hi\n")
            try await setup.scan()
            let again = try await setup.connect()
            try await again.sendClusterConfig(setup.clusterConfig(remote: state))
            var delta: [BEPFileInfo] = []
            var fullIndexes = 0
            _ = try await again.receiveIndexes(wanted: [setup.folderID], me: setup.kaiten.deviceID, since: state) {
                _, files, isFull in
                if isFull { fullIndexes += 1 }
                delta += files
            }
            #expect(fullIndexes == 0)
            #expect(delta.map(\.name) == ["while-away.txt"])
            await again.close(reason: "done")

            // Up to date: the index is complete at once and nothing is sent.
            let third = try await setup.connect()
            let latest = RemoteIndexState(indexID: state[setup.folderID]!.indexID, maxSequence: delta.map(\.sequence).max()!)
            try await third.sendClusterConfig(setup.clusterConfig(remote: [setup.folderID: latest]))
            var none = 0
            _ = try await third.receiveIndexes(
                wanted: [setup.folderID], me: setup.kaiten.deviceID, since: [setup.folderID: latest], timeout: 20
            ) { _, files, _ in none += files.count }
            #expect(none == 0)
            await third.close(reason: "done")
        }
    }

    @Test func uncompressedPeerWorksToo() async throws {
        try await Self.withPeer(compression: "never", populate: { root in
            for i in 0..<50 { try TestFiles.write(root + "/n\(i).txt", String(repeating: "x", count: i)) }
        }) { setup in
            let connection = try await setup.connect()
            try await connection.sendClusterConfig(setup.clusterConfig())
            var count = 0
            _ = try await connection.receiveIndexes(wanted: [setup.folderID], me: setup.kaiten.deviceID) {
                _, files, _ in count += files.count
            }
            #expect(count == 50)
            #expect(connection.stats.compressedFramesReceived == 0)
            await connection.close(reason: "done")
        }
    }

    /// Dialling accepts only the expected device; syncthing refuses a device it does not know.
    @Test func wrongDevicesAreRefusedWhenDialling() async throws {
        try await Self.withPeer { setup in
            let impostor = try DeviceID(bytes: Array(repeating: 9, count: 32))
            let error = await #expect(throws: PeerError.self) {
                _ = try await PeerDialer.connect(
                    to: PeerAddress(host: "127.0.0.1", port: setup.syncthing.listenPort), expecting: impostor,
                    identity: setup.kaiten.identity, hello: Setup.hello)
            }
            #expect(error?.code == .unexpectedDevice)
            #expect(error?.description.contains(setup.syncthing.deviceID.description) == true)

            // A Kaiten device syncthing has never heard of: Hello, then syncthing hangs up.
            let stranger = try KaitenDevice(in: setup.dir.path, name: "stranger")
            let connection = try await PeerDialer.connect(
                to: PeerAddress(host: "127.0.0.1", port: setup.syncthing.listenPort), expecting: setup.syncthing.deviceID,
                identity: stranger.identity, hello: Setup.hello)
            try? await connection.sendClusterConfig(BEPClusterConfig())
            let refused = await #expect(throws: PeerError.self) {
                _ = try await connection.receiveIndexes(wanted: [setup.folderID], me: stranger.deviceID, timeout: 20) { _, _, _ in }
            }
            #expect(refused?.description.contains("does the peer know this device") == true)
            try await setup.syncthing.waitUntil("syncthing logs the rejection") {
                setup.syncthing.log.contains(SyncthingInstance.unknownDeviceLogLine)
            }
        }
    }

    /// Listening: syncthing dials Kaiten. Unknown devices are refused and logged with their ID;
    /// a configured one gets through and its index arrives.
    @Test func listenerAcceptsOnlyConfiguredDevices() async throws {
        try await Self.withPeer(populate: { root in try TestFiles.write(root + "/x.txt", "x\n") }) { setup in
            let rejected = AsyncStream<DeviceID?>.makeStream()
            let refusing = try await PeerListener.bind(
                to: PeerAddress(host: "127.0.0.1", port: 0), identity: setup.kaiten.identity, hello: Setup.hello,
                isAllowed: { _ in false }, onRejected: { id, _ in rejected.continuation.yield(id) },
                onConnection: { _ in Issue.record("an unknown device got through") })
            try await setup.syncthing.addDevice(
                setup.kaiten.deviceID, name: "kaiten", addresses: ["tcp://127.0.0.1:\(refusing.localPort)"])
            var iterator = rejected.stream.makeAsyncIterator()
            let who = await iterator.next()
            #expect(who == setup.syncthing.deviceID)
            await refusing.close()

            let accepted = AsyncStream<PeerConnection>.makeStream()
            let syncthingID = setup.syncthing.deviceID
            let listener = try await PeerListener.bind(
                to: PeerAddress(host: "127.0.0.1", port: 0), identity: setup.kaiten.identity, hello: Setup.hello,
                isAllowed: { $0 == syncthingID }, onConnection: { accepted.continuation.yield($0) })
            try await setup.syncthing.addDevice(
                setup.kaiten.deviceID, name: "kaiten", addresses: ["tcp://127.0.0.1:\(listener.localPort)"])
            var connections = accepted.stream.makeAsyncIterator()
            let connection = try #require(await connections.next())
            #expect(connection.deviceID == syncthingID)
            try await connection.sendClusterConfig(setup.clusterConfig())
            var names: [String] = []
            _ = try await connection.receiveIndexes(wanted: [setup.folderID], me: setup.kaiten.deviceID) { _, files, _ in
                names += files.map(\.name)
            }
            #expect(names == ["x.txt"])
            await connection.close(reason: "done")
            await listener.close()
        }
    }
}

/// Close reasons travel both ways.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct CloseReasonInteropTests {
    /// Waits for the peer's first ClusterConfig on `connection` (or its end).
    static func untilClusterConfig(on connection: PeerConnection) async {
        for await event in connection.events {
            if case .clusterConfig = event { return }
        }
    }

    @Test func closeReasonsAreSentAndSurfaced() async throws {
        try await BEPInteropTests.withPeer { setup in
            // Ours: syncthing reads the reason and answers with its own Close quoting it.
            let first = try await setup.connect()
            try await first.sendClusterConfig(setup.clusterConfig())
            // Once its own ClusterConfig has come: syncthing 1.25+ writes nothing on a connection
            // before it (sent ~1 s after the Hello), its answering Close included, and a Close
            // that arrives earlier ends the connection without one (2.1.3 in CI, once).
            await Self.untilClusterConfig(on: first)
            await first.close(reason: "kaiten says goodbye")
            #expect(first.stats.peerCloseReason == "closed by remote: kaiten says goodbye")

            // Theirs: an Index for a folder our ClusterConfig did not list gets a Close with a reason.
            let second = try await setup.connect()
            try await second.sendClusterConfig(BEPClusterConfig())
            await Self.untilClusterConfig(on: second)
            var index = BEPIndex()
            index.folder = setup.folderID
            try await second.send(.index(index))
            let reason = await second.waitUntilClosed()
            guard case .byPeer(let text) = reason else {
                Issue.record("want a Close from the peer, got \(reason)")
                return
            }
            #expect(text.contains("no such folder"))
        }
    }
}
