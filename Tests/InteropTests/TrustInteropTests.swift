import Foundation
import KaitenConfig
import KaitenPeer
import KaitenProtocol
import KaitenStream
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Who may get or change what (issue 42, item 1), each check against a peer that tries.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct TrustInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    /// Folder f is shared with a syncthing peer, folder g with a scripted one. The scripted peer
    /// claims f anyway: its ClusterConfig lists f with both devices and it sends an Index of f
    /// planting a file and a deletion newer than anything (which `--apply all` would act on).
    /// Kaiten stores none of it and deletes nothing; and asked for a block of f (a file Kaiten
    /// holds and announces there), Kaiten refuses it as not shared.
    @Test func aPeerGetsAndChangesNothingOfAFolderNotSharedWithIt() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-trust")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        let secret = "held here, shared with a only\n"
        try TestFiles.write(world.peerData + "/docs/a.txt", secret)
        let peer = try await ScriptedPeer(in: dir.path, folder: "g", contents: [:], allowed: world.me)
        defer { Task { await peer.stop() } }
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(RunInteropTests.content(world.local + "/docs/a.txt") == secret)

            #expect(try await world.kaitenDetached("peer", "add", peer.deviceID.description, "--name", "scripted", "--address", peer.address).status == 0)
            let g = try await world.kaitenDetached("folder", "add", "g", "--path", dir.file("g"), "--share", peer.deviceID.description)
            #expect(g.status == 0, "\(g.stderr)")

            // A deletion of docs/a.txt that dominates a's version, and a new file.
            let reply = try await st.get("/rest/db/file?folder=\(Self.folder)&file=docs/a.txt") as? [String: Any]
            let version = ((reply?["global"] as? [String: Any])?["version"] as? [String]) ?? []
            var deletion = peer.file("docs/a.txt", Data(), sequence: 2)
            deletion.deleted = true
            deletion.blocks = []
            deletion.size = 0
            for counter in version {
                let parts = counter.split(separator: ":")
                guard parts.count == 2, let value = UInt64(parts[1]) else { continue }
                let device = try #require(try? DeviceID(st.deviceID.description))
                #expect(parts[0] == device.description.prefix(7))
                var wire = BEPCounter()
                wire.id = device.shortID
                wire.value = value
                deletion.version.counters.insert(wire, at: 0)
            }
            #expect(deletion.version.counters.count == 2, "\(version)")
            peer.planted.withLockedValue { $0 = [Self.folder: [peer.file("planted.txt", Data("planted\n".utf8), sequence: 1), deletion]] }
            // g's own index comes after the planted one: the exchange is still taking batches in.
            peer.announce([peer.file("g.txt", Data("g\n".utf8), sequence: 1)])

            let sync = try await world.kaitenDetached("index", "sync")
            #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
            let ls = try await world.kaitenDetached("ls", Self.folder, "--json")
            #expect(!ls.stdout.contains("planted.txt"), "\(ls.stdout)")
            let plan = try await world.kaitenDetached("plan", "--json")
            let folders = (try JSONSerialization.jsonObject(with: Data(plan.stdout.utf8)) as? [String: Any])?["folders"] as? [[String: Any]] ?? []
            let actions = folders.first { $0["id"] as? String == Self.folder }?["actions"] as? [[String: Any]]
            #expect(actions?.isEmpty == true, "\(plan.stdout)")
            let apply = try await world.kaitenDetached("apply", "--yes", "--max-delete", "100%")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            #expect(RunInteropTests.content(world.local + "/docs/a.txt") == secret)

            // Blocks: with the service holding both connections, the scripted peer asks for f, on
            // the service's connection: the one-shot verbs' last one may not be seen closed yet.
            let oneShots = peer.latest.withLockedValue { $0.map(ObjectIdentifier.init) }
            let serve = try KaitenCLI.start(
                ["serve", "--home", world.home, "--listen", "127.0.0.1:\(try FreePort.next())"], logPath: dir.file("serve.log"))
            defer { if serve.isRunning { kill(serve.processIdentifier, SIGKILL) } }
            try await st.waitUntil("kaiten serve holds the scripted peer", timeout: 60) {
                peer.latest.withLockedValue { latest in
                    latest.map { $0.isOpen && ObjectIdentifier($0) != oneShots && peer.configured.withLockedValue { [id = ObjectIdentifier($0)] in $0.contains(id) } } ?? false
                }
            }
            let denied = try await peer.request(folder: Self.folder, "docs/a.txt", offset: 0, size: Int32(secret.utf8.count))
            #expect(denied.data.isEmpty, "a block of a folder not shared with the peer was sent")
            #expect(denied.code == .generic, "\(denied.code)")
        }
    }

    /// A device config.xml does not name is refused during the TLS handshake by the listener of
    /// `kaiten run` and of `kaiten serve`, and the refusal is logged with its device ID.
    @Test(arguments: ["run", "serve"]) func anUnknownDeviceIsRefusedByTheListener(_ verb: String) async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-stranger")
        defer { dir.remove() }
        let port = try FreePort.next()
        let home = dir.file("kaiten")
        let created = try KaitenCLI.run(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:\(port)"])
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let stranger = try KaitenDevice(in: dir.path, name: "stranger")
        let arguments = verb == "run" ? ["run", "--home", home] : ["serve", "--home", home, "--listen", "127.0.0.1:\(try FreePort.next())"]
        let process = try KaitenCLI.start(arguments, logPath: dir.file("\(verb).log"))
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        func log() -> String { RunInteropTests.content(dir.file("\(verb).log")) ?? "" }
        try await RunInteropTests.waitFor("\(verb) listens for peers") { log().contains("listening for peers on tcp://127.0.0.1:\(port)") }
        await #expect(throws: (any Error).self, "the stranger got past TLS") {
            let connection = try await PeerDialer.connect(
                to: PeerAddress(host: "127.0.0.1", port: port), expecting: me, identity: stranger.identity,
                hello: KaitenVersion.hello(deviceName: "stranger"))
            await connection.close(reason: "test")
        }
        try await RunInteropTests.waitFor("the refusal logged") { log().contains("refused a connection from \(stranger.deviceID.description)") }
    }

    /// While `kaiten run` holds a peer's connection, `folder unshare` and then `peer rm`, each
    /// followed by SIGHUP: after the first the peer gets no block of the folder, after the
    /// second it is not let back in at all.
    @Test func unshareAndPeerRemovalTakeEffectOnAReload() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-revoke")
        defer { dir.remove() }
        let port = try FreePort.next()
        let home = dir.file("kaiten")
        let created = try KaitenCLI.run(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:\(port)"])
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        func kaiten(_ args: String...) async throws -> ProcessResult { try await KaitenCLI.runDetached(args + ["--home", home]) }
        let peer = try await ScriptedPeer(in: dir.path, folder: "g", contents: [:], allowed: me)
        defer { Task { await peer.stop() } }
        let data = dir.file("g")
        try FileManager.default.createDirectory(atPath: data + "/.stfolder", withIntermediateDirectories: true)
        let secret = "held here; the peer loses its share\n"
        try TestFiles.write(data + "/mine.txt", secret)
        #expect(try await kaiten("peer", "add", peer.deviceID.description, "--name", "scripted", "--address", peer.address).status == 0)
        #expect(try await kaiten("folder", "add", "g", "--path", data, "--type", "sendonly", "--share", peer.deviceID.description).status == 0)
        #expect(try await kaiten("select", "g", "mine.txt").status == 0)

        let run = try RunInteropTests.Running.start(home: home, logPath: dir.file("run.log"), ["--apply", "all"])
        defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
        try await RunInteropTests.waitFor("mine.txt announced", log: run) { run.log.contains("done send g/mine.txt") }
        try await RunInteropTests.waitFor("run holds the peer", log: run) { peer.latest.withLockedValue { $0?.isOpen == true } }
        let size = Int32(secret.utf8.count)
        let first = peer.latest.withLockedValue { $0 }
        let before = try await peer.request(folder: "g", "mine.txt", offset: 0, size: size)
        #expect(before.code == .noError && before.data == Data(secret.utf8), "the shared block, as a control: \(before.code)")

        #expect(try await kaiten("folder", "unshare", "g", peer.deviceID.description).status == 0)
        kill(run.process.processIdentifier, SIGHUP)
        try await RunInteropTests.waitFor("the reload", log: run) { run.log.contains("config.xml read again") }
        // The reload ends the connection that carried the share (a peer that shares nothing
        // is not dialled again); whatever connection there is now, no block of g goes out.
        try await RunInteropTests.waitFor("the connection of the share ended", log: run) { first?.isOpen != true }
        let unshared = try? await peer.request(folder: "g", "mine.txt", offset: 0, size: size)
        #expect(unshared == nil || (unshared!.data.isEmpty && unshared!.code != .noError), "a block of a folder no longer shared: \(String(describing: unshared?.code))")

        #expect(try await kaiten("peer", "rm", peer.deviceID.description).status == 0)
        kill(run.process.processIdentifier, SIGHUP)
        // The configuration the service runs on is recorded once the peers' side is under it.
        // Counting "read again" lines is not enough: the edit and SIGHUP of the first step may
        // each have made a reload, and one of them may have read config.xml before `peer rm`.
        let running = Home(path: home).runningConfigPath
        try await RunInteropTests.waitFor("a reload without the peer", log: run) {
            let text = (try? String(contentsOfFile: running, encoding: .utf8)) ?? peer.deviceID.description
            return !text.contains(peer.deviceID.description)
        }
        try await RunInteropTests.waitFor("the removed peer's connection closed", log: run) {
            peer.latest.withLockedValue { $0?.isOpen != true }
        }
        // Dialling in, it is refused at TLS.
        let stranger = try? await PeerDialer.connect(
            to: PeerAddress(host: "127.0.0.1", port: port), expecting: me, identity: peer.device.identity,
            hello: KaitenVersion.hello(deviceName: "scripted"))
        #expect(stranger == nil, "a removed peer got past TLS")
        await stranger?.close(reason: "test")
    }
}
