import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenStream
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Kaiten as a full device (issue 11): the index it announces, as real syncthing sees it.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct FullDeviceInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    /// What the peer computes for Kaiten's copy of the folder.
    static func completion(_ st: SyncthingInstance, of device: DeviceID) async throws -> (percent: Double, needItems: Int) {
        let reply = try await st.get("/rest/db/completion?device=\(device)&folder=\(folder)") as? [String: Any] ?? [:]
        return ((reply["completion"] as? NSNumber)?.doubleValue ?? -1, reply["needItems"] as? Int ?? -1)
    }

    static func waitCompletion(_ st: SyncthingInstance, of device: DeviceID, _ want: (Double, Int) -> Bool, _ what: String) async throws {
        try await st.waitUntil(what, timeout: 30) {
            let (percent, need) = try await completion(st, of: device)
            return want(percent, need)
        }
    }

    /// A second syncthing device `b` that shares the folder with Kaiten only (its data in
    /// `path`), and Kaiten sharing it back: what b gets, it gets from Kaiten.
    static func shareWithKaitenOnly(_ b: SyncthingInstance, world: World, path: String, type: String = "sendreceive") async throws {
        try await b.addFolder(id: folder, path: path, type: type, devices: [world.me])
        #expect(try world.kaiten("peer", "add", b.deviceID.description, "--name", "b", "--address", b.address).status == 0)
        #expect(try world.kaiten("folder", "share", folder, "b").status == 0)
    }

    /// `directories` directories `d0`… under `root`, each with `perDirectory` small files `fN.txt`.
    static func smallFiles(_ root: String, directories: Int, perDirectory: Int) throws {
        for d in 0..<directories {
            let sub = "\(root)/d\(d)"
            try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
            for i in 0..<perDirectory { _ = FileManager.default.createFile(atPath: "\(sub)/f\(i).txt", contents: Data("\(d)-\(i)".utf8)) }
        }
    }

    /// The peer reports Kaiten at 100 % once it holds every selected file (the rest announced
    /// as "not wanted here", invalid at the global version); a newly selected file, and a new
    /// file on the peer, bring it below 100 % until Kaiten has taken them in.
    @Test func thePeerSeesKaitenCompleteForWhatItSelected() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-completion")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/a.txt", "selected\n")
        try TestFiles.write(world.peerData + "/b.txt", "not selected at first\n")
        try TestFiles.write(world.peerData + "/dir/c.txt", "selected through its directory\n")
        try TestFiles.write(world.peerData + "/other/d.txt", "never selected\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 4)
            #expect(try world.kaiten("select", Self.folder, "a.txt", "dir").status == 0)
            let apply = try world.kaiten("apply", "--yes")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            try await Self.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten at 100 %")

            func remoteNeed() async throws -> [String] {
                let reply = try await st.get("/rest/db/remoteneed?folder=\(Self.folder)&device=\(world.me)") as? [String: Any]
                let files = (reply?["files"] as? [[String: Any]] ?? []) + (reply?["progress"] as? [[String: Any]] ?? [])
                    + (reply?["queued"] as? [[String: Any]] ?? [])
                return files.compactMap { $0["name"] as? String }.sorted()
            }
            #expect(try await remoteNeed() == [])

            // Newly selected: needed until applied.
            #expect(try world.kaiten("select", Self.folder, "b.txt").status == 0)
            #expect(try world.kaiten("index", "sync").status == 0)
            try await Self.waitCompletion(st, of: world.me, { $0 < 100 && $1 == 1 }, "Kaiten needs b.txt")
            #expect(try await remoteNeed() == ["b.txt"])
            #expect(try world.kaiten("apply", "--yes").status == 0)
            try await Self.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten back at 100 %")

            // A new file on the peer: needed until Kaiten says it does not want it.
            try TestFiles.write(world.peerData + "/new.txt", "new on the peer\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitCompletion(st, of: world.me, { percent, _ in percent < 100 }, "Kaiten behind after a new file")
            #expect(try world.kaiten("index", "sync").status == 0)
            try await Self.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "new.txt announced as not wanted")

            // Nothing changed: another sync announces nothing new (no sequence spent).
            let local = try IndexLog.open(path: Home(path: world.home).localIndexPath(folderID: Self.folder), folderID: Self.folder, readOnly: true)
            let before = local.checkpoints[world.me]?.maxSequence ?? -1
            local.close()
            #expect(try world.kaiten("index", "sync").status == 0)
            let again = try IndexLog.open(path: Home(path: world.home).localIndexPath(folderID: Self.folder), folderID: Self.folder, readOnly: true)
            #expect(again.checkpoints[world.me]?.maxSequence == before)
            again.close()
            #expect(before > 0)
            let status = try world.kaiten("status", "--json")
            let rows = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [[String: Any]]
            let announced = rows?.first?["announced"] as? [String: Any]
            #expect(announced?["sequence"] as? Int == Int(before), "\(status.stdout)")
            #expect(announced?["held"] as? Int == 4, "a.txt, b.txt, dir, dir/c.txt: \(status.stdout)")
        }
    }

    /// An apply announces what it needs once, at its end (held, or still needed), not before
    /// its pulls; one whose plan does not run announces it before it ends.
    @Test func anApplyAnnouncesWhatItNeedsByItsEnd() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-needs")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/a.txt", "first\n")
        try TestFiles.write(world.peerData + "/b.txt", "second\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            #expect(try world.kaiten("index", "sync").status == 0)
            try await Self.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten at 100 %, nothing selected")
            // Not confirmed (no terminal, no --yes): nothing is pulled, and the peer hears of the need.
            #expect(try world.kaiten("select", Self.folder, "a.txt").status == 0)
            let declined = try world.kaiten("apply")
            #expect(declined.status == 1, "\(declined.stdout)\(declined.stderr)")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/a.txt"))
            try await Self.waitCompletion(st, of: world.me, { $0 < 100 && $1 == 1 }, "Kaiten needs a.txt")
            #expect(try world.kaiten("apply", "--yes").status == 0)
            try await Self.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten holds a.txt")
            // Applied at once: held by its end.
            #expect(try world.kaiten("select", Self.folder, "a.txt", "b.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(FileManager.default.contents(atPath: world.local + "/b.txt") == Data("second\n".utf8))
            try await Self.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten holds both")
        }
    }

    /// Kaiten holding `a.bin` and `dir/c.txt` of peer A's folder (not `left-out.txt`), A stopped;
    /// a second syncthing device B, not started, with an empty directory for its copy.
    static func kaitenHoldsTwoOfThree(_ dir: TemporaryDirectory) async throws -> (world: World, b: SyncthingInstance, dataB: String) {
        let world = try World(dir)
        let a = try SyncthingInstance.generate(in: dir.path, name: "a")
        let b = try SyncthingInstance.generate(in: dir.path, name: "b")
        let dataB = dir.file("peer-b")
        try FileManager.default.createDirectory(atPath: dataB, withIntermediateDirectories: true)
        try TestFiles.random(world.peerData + "/a.bin", size: 700_000)
        try TestFiles.write(world.peerData + "/left-out.txt", "not selected on Kaiten\n")
        try TestFiles.write(world.peerData + "/dir/c.txt", "selected through its directory\n")
        try await withSyncthing(a) { a in
            try await world.share(a, files: 3)
            #expect(try world.kaiten("select", Self.folder, "a.bin", "dir").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
        }
        return (world, b, dataB)
    }

    /// A second syncthing device that shares the folder only with Kaiten (the original source
    /// stopped) pulls every selected file from Kaiten, byte for byte, while `kaiten serve`
    /// holds the connections; the file Kaiten left out never reaches it, and Kaiten is never
    /// asked for it.
    @Test func anotherDevicePullsWhatKaitenHolds() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-source")
        defer { dir.remove() }
        let (world, b, dataB) = try await Self.kaitenHoldsTwoOfThree(dir)
        try await withSyncthing(b) { b in
            try await b.addDevice(world.me, name: "k")
            try await Self.shareWithKaitenOnly(b, world: world, path: dataB)
            let server = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("serve.log"))
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            try await b.waitUntil("B has what Kaiten holds", timeout: 60) {
                ApplyInteropTests.sha(dataB + "/a.bin") == ApplyInteropTests.sha(world.peerData + "/a.bin")
                    && ApplyInteropTests.sha(dataB + "/dir/c.txt") == ApplyInteropTests.sha(world.peerData + "/dir/c.txt")
            }
            // Files land on disk before syncthing records them (2.x was seen "syncing" with
            // both still counted as needed): its status is read once its pull has ended.
            try await b.waitIdle(folder: Self.folder)
            let status = try await b.get("/rest/db/status?folder=\(Self.folder)") as? [String: Any]
            #expect(status?["needFiles"] as? Int == 0, "B needs nothing it could get: \(String(describing: status))")
            #expect(!FileManager.default.fileExists(atPath: dataB + "/left-out.txt"))
            // What B's GUI shows for Kaiten: connected, its client and version, bytes it sent,
            // and Kaiten at 100 % of what it holds.
            let connections = try await b.get("/rest/system/connections") as? [String: Any]
            let kaiten = (connections?["connections"] as? [String: Any])?[world.me.description] as? [String: Any]
            #expect(kaiten?["connected"] as? Bool == true, "\(String(describing: kaiten))")
            #expect((kaiten?["clientVersion"] as? String)?.contains("v0.1") == true, "\(String(describing: kaiten))")
            #expect((kaiten?["inBytesTotal"] as? Int ?? 0) > 700_000, "B received a.bin from Kaiten: \(String(describing: kaiten))")
            try await Self.waitCompletion(b, of: world.me, { $0 == 100 && $1 == 0 }, "B sees Kaiten at 100 %")
            try server.stop()
        }
    }

    /// The usual way a folder starts: Kaiten shares it, and the peer's user accepts it later,
    /// while the two are connected. The peer then sends a new ClusterConfig on the open
    /// connection; Kaiten takes the folder up there, as syncthing does (its index sent, the
    /// peer's taken in): the peer gets the files on the same connection, not after a
    /// reconnection that may never come. And when the peer stops sharing it, Kaiten says so.
    @Test func aFolderThePeerAcceptsWhileConnectedIsTakenUpOnTheSameConnection() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-accept")
        defer { dir.remove() }
        let (world, b, dataB) = try await Self.kaitenHoldsTwoOfThree(dir)
        try await withSyncthing(b) { b in
            // B knows Kaiten but has no folder yet; Kaiten shares the folder with B.
            try await b.addDevice(world.me, name: "k")
            #expect(try world.kaiten("peer", "add", b.deviceID.description, "--name", "b", "--address", b.address).status == 0)
            #expect(try world.kaiten("folder", "share", Self.folder, "b").status == 0)
            let logPath = dir.file("serve.log")
            let server = try await StreamInteropTests.Server.start(home: world.home, logPath: logPath)
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            func connection() async throws -> [String: Any]? {
                let connections = try await b.get("/rest/system/connections") as? [String: Any]
                return (connections?["connections"] as? [String: Any])?[world.me.description] as? [String: Any]
            }
            try await b.waitUntil("B connected to Kaiten", timeout: 60) { try await connection()?["connected"] as? Bool == true }
            let startedAt = try await connection()?["startedAt"] as? String
            // B's user accepts the folder.
            try await b.addFolder(id: Self.folder, path: dataB, type: "receiveonly", devices: [world.me])
            try await b.waitUntil("B has what Kaiten holds", timeout: 60) {
                ApplyInteropTests.sha(dataB + "/a.bin") == ApplyInteropTests.sha(world.peerData + "/a.bin")
                    && ApplyInteropTests.sha(dataB + "/dir/c.txt") == ApplyInteropTests.sha(world.peerData + "/dir/c.txt")
            }
            try await Self.waitCompletion(b, of: world.me, { $0 == 100 && $1 == 0 }, "B sees Kaiten at 100 %")
            #expect(!FileManager.default.fileExists(atPath: dataB + "/left-out.txt"))
            let after = try await connection()
            #expect(after?["connected"] as? Bool == true)
            #expect(after?["startedAt"] as? String == startedAt, "the same connection, not a new one: \(String(describing: after))")
            let log = { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
            #expect(log().contains("now shares \(Self.folder) with this device"), "\(log())")
            // B stops sharing it (the folder kept on B, Kaiten removed from it).
            try await b.addFolder(id: Self.folder, path: dataB, type: "receiveonly", devices: [])
            try await b.waitUntil("Kaiten noticed", timeout: 30) { log().contains("no longer shares \(Self.folder) with this device") }
            #expect(try await connection()?["startedAt"] as? String == startedAt)
            try server.stop()
        }
    }

    /// A hostile requester (a scripted peer) gets the right refusal for each thing it may not
    /// have, and nothing outside the folder is read: a name not announced, a block past the
    /// end, a 1 GiB block, a file whose parent became a symlink to a copy outside, a file
    /// changed on disk since it was announced; `../` closes the connection.
    @Test func aHostileRequesterGetsNothingItMayNotHave() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-hostile")
        defer { dir.remove() }
        let world = try World(dir)
        try FileManager.default.createDirectory(atPath: world.local + "/.stfolder", withIntermediateDirectories: true)
        let a = Data("served to whoever shares the folder\n".utf8)
        let y = Data("sentinel content, same inside and outside\n".utf8)
        let peer = try await ScriptedPeer(in: dir.path, folder: Self.folder, contents: ["a.txt": a, "d/y.txt": y], allowed: world.me)
        defer { Task { await peer.stop() } }
        peer.announce([peer.file("a.txt", a, sequence: 1), peer.directory("d", sequence: 2), peer.file("d/y.txt", y, sequence: 3)])
        #expect(try await world.kaitenDetached("peer", "add", peer.deviceID.description, "--name", "scripted", "--address", peer.address).status == 0)
        try world.addFolder(sharedWith: [peer.deviceID])
        #expect(try await world.kaitenDetached("index", "sync").status == 0)
        #expect(try await world.kaitenDetached("select", Self.folder, "a.txt", "d").status == 0)
        let applied = try await world.kaitenDetached("apply", "--yes")
        #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
        try TestFiles.write(world.local + "/unannounced.txt", "here, but never announced\n")

        let server = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("serve.log"))
        defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
        // Kaiten dials the peer when serve starts; a.txt is served once its index is sent.
        let deadline = Date().addingTimeInterval(30)
        var served: BEPResponse?
        while Date() < deadline {
            if let response = try? await peer.request(folder: Self.folder, "a.txt", offset: 0, size: Int32(a.count)),
                response.code == .noError
            {
                served = response
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(served?.data == a)

        #expect(try await peer.request(folder: Self.folder, "unannounced.txt", offset: 0, size: 10).code == .invalidFile)
        #expect(try await peer.request(folder: Self.folder, "a.txt", offset: 1 << 20, size: 10).code == .invalidFile)
        #expect(try await peer.request(folder: Self.folder, "a.txt", offset: 0, size: 1 << 30).code == .invalidFile)
        #expect(try await peer.request(folder: "other", "a.txt", offset: 0, size: Int32(a.count)).code == .generic)
        #expect(try await peer.request(folder: Self.folder, ".stfolder", offset: 0, size: 1).code == .invalidFile)

        // d/ replaced by a link to a directory outside holding the very same y.txt.
        let outside = dir.file("outside")
        try TestFiles.write(outside + "/y.txt", String(decoding: y, as: UTF8.self))
        try FileManager.default.removeItem(atPath: world.local + "/d")
        try FileManager.default.createSymbolicLink(atPath: world.local + "/d", withDestinationPath: outside)
        #expect(try await peer.request(folder: Self.folder, "d/y.txt", offset: 0, size: Int32(y.count)).code == .noSuchFile)

        // a.txt changed on disk (same size): not served as the announced version.
        try Data(repeating: 0x41, count: a.count).write(to: URL(fileURLWithPath: world.local + "/a.txt"))
        #expect(try await peer.request(folder: Self.folder, "a.txt", offset: 0, size: Int32(a.count)).code == .noSuchFile)

        // An escaping name: the connection is closed, as syncthing closes it. The connection is
        // the one that carried the request (serve dials again later, and `latest` then moves on),
        // and its close reaches this side when the loaded machine gets to it.
        let carrier = try #require(peer.latest.withLockedValue { $0 })
        let escaping = try? await peer.request(folder: Self.folder, "../outside/y.txt", offset: 0, size: Int32(y.count))
        #expect(escaping == nil || escaping?.code != .noError)
        let closedBy = Date().addingTimeInterval(10)
        while carrier.isOpen, Date() < closedBy { try await Task.sleep(for: .milliseconds(50)) }
        #expect(!carrier.isOpen)
        try server.stop()
    }

    /// kill -9 while Kaiten records and sends its index, at random moments (seeded): after each
    /// kill the local index loads, its highest sequence never goes back, no sequence is used
    /// twice, the index ID stays; and once a sync completes the peer's view is whole again
    /// (Kaiten at 100 %, nothing needed).
    @Test func killNineWhileAnnouncingNeverReusesASequence() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-announce-crash")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try Self.smallFiles(world.peerData, directories: 40, perDirectory: 250)
        let localPath = Home(path: world.home).localIndexPath(folderID: Self.folder)
        func localState() throws -> (indexID: UInt64, max: Int64, sequences: [Int64]) {
            let log = try IndexLog.open(path: localPath, folderID: Self.folder, readOnly: true)
            defer { log.close() }
            let checkpoint = try #require(log.checkpoints[world.me])
            return (checkpoint.indexID, checkpoint.maxSequence, Self.sequences(in: log, from: world.me))
        }
        try await withSyncthing(st) { st in
            try await world.share(st, files: 10_000)
            var (indexID, highest, _) = try localState()
            var moments = SplitMix64.forTest("killNineWhileAnnouncingNeverReusesASequence")
            var killed = 0
            // Flip the whole selection each round: every entry's announcement changes.
            func flip(_ round: Int) throws {
                let flip = round % 2 == 0 ? ["select", Self.folder, "d*"] : ["deselect", Self.folder, "d*"]
                let flipped = try KaitenCLI.run(flip + ["--home", world.home])
                #expect(flipped.status == 0, "\(flipped.stdout)\(flipped.stderr)")
            }
            // How long a whole sync of a flip takes here: the kills land within it (fixed moments
            // missed more syncs as they got faster).
            try flip(1)
            let started = Date()
            let whole = try world.kaiten("index", "sync")
            #expect(whole.status == 0, "\(whole.stdout)\(whole.stderr)")
            let span = Date().timeIntervalSince(started)
            (indexID, highest, _) = try localState()
            // 12 kills that land while a sync runs (a round that finishes first does not count).
            var round = 0
            while killed < 12 && round < 40 {
                round += 1
                try flip(round)
                let process = Process()
                process.executableURL = URL(fileURLWithPath: KaitenCLI.executable)
                process.arguments = ["index", "sync", "--home", world.home]
                process.standardOutput = FileHandle.nullDevice
                process.standardError = FileHandle.nullDevice
                try process.runAlone()
                usleep(useconds_t(Double.random(in: 0.1...0.9, using: &moments) * span * 1_000_000))
                if process.isRunning {
                    kill(process.processIdentifier, SIGKILL)
                    killed += 1
                }
                try process.waitForExit(timeout: 120, what: "kaiten index sync")
                let now = try localState()
                #expect(now.indexID == indexID, "round \(round): the index ID stays")
                #expect(now.max >= highest, "round \(round): the highest sequence never goes back")
                #expect(Set(now.sequences).count == now.sequences.count, "round \(round): no sequence used twice")
                #expect(now.sequences.allSatisfy { $0 <= now.max }, "round \(round): nothing above the checkpoint")
                (indexID, highest) = (now.indexID, now.max)
            }
            #expect(killed == 12, "only \(killed) syncs of \(round) were killed midway")
            // Deselected at the end (nothing to pull), so that whole means 100 %.
            if round % 2 == 0 { try flip(round + 1) }
            let final = try world.kaiten("index", "sync")
            #expect(final.status == 0, "\(final.stdout)\(final.stderr)")
            do {
                try await Self.waitCompletion(st, of: world.me, { percent, need in percent == 100 && need == 0 }, "the peer's view of Kaiten whole again")
            } catch {
                let (percent, need) = try await Self.completion(st, of: world.me)
                let needed = try await st.get("/rest/db/remoteneed?device=\(world.me)&folder=\(Self.folder)&perpage=5")
                Issue.record("Kaiten at \(percent) %, \(need) needed: \(needed)\n\(final.stdout)\(final.stderr)")
                throw error
            }
        }
    }

    /// kill -9 of `kaiten serve` while a syncthing device pulls a big file from it, a change
    /// announced while it is down, then a restart: the device finishes, byte for byte, and takes
    /// the new file too; the local index's sequences continue above the last one (none reused)
    /// and the device needs nothing afterwards.
    @Test func killNineWhileServingThenRestartConverges() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-serve-crash")
        defer { dir.remove() }
        let world = try World(dir)
        let a = try SyncthingInstance.generate(in: dir.path, name: "a")
        let b = try SyncthingInstance.generate(in: dir.path, name: "b")
        let dataB = dir.file("peer-b")
        try FileManager.default.createDirectory(atPath: dataB, withIntermediateDirectories: true)
        try TestFiles.random(world.peerData + "/big.bin", size: 16 << 20)
        try TestFiles.write(world.peerData + "/later.txt", "selected while serve is down\n")
        let localPath = Home(path: world.home).localIndexPath(folderID: Self.folder)
        func sequences() throws -> (max: Int64, all: [Int64]) {
            let log = try IndexLog.open(path: localPath, folderID: Self.folder, readOnly: true)
            defer { log.close() }
            return (log.checkpoints[world.me]?.maxSequence ?? 0, Self.sequences(in: log, from: world.me))
        }
        try await withSyncthing(a) { a in
            try await world.share(a, files: 2)
            #expect(try world.kaiten("select", Self.folder, "big.bin").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
        }
        try await withSyncthing(b) { b in
            // B takes Kaiten's blocks at 1 MB/s: the 16 MiB file takes about 16 s, the kill lands early.
            // (Syncthing does not limit LAN connections unless told to; loopback is LAN.)
            var options = try await b.get("/rest/config/options") as? [String: Any] ?? [:]
            options["limitBandwidthInLan"] = true
            _ = try await b.put("/rest/config/options", json: options)
            try await b.put("/rest/config/devices/\(world.me)", json: ["deviceID": world.me.description, "name": "k", "addresses": ["dynamic"], "maxRecvKbps": 1000])
            try await Self.shareWithKaitenOnly(b, world: world, path: dataB)
            var server = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("serve.log"))
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            do {
                try await b.waitUntil("B is pulling big.bin", timeout: 60) {
                    let names = (try? FileManager.default.contentsOfDirectory(atPath: dataB)) ?? []
                    return names.contains { $0.hasPrefix(".syncthing.big.bin") }
                }
            } catch {
                Issue.record("serve.log: \((try? String(contentsOfFile: dir.file("serve.log"), encoding: .utf8)) ?? "")")
                throw error
            }
            kill(server.process.processIdentifier, SIGKILL)
            try server.process.waitForExit(timeout: 30, what: "kaiten serve")
            #expect(ApplyInteropTests.sha(dataB + "/big.bin") == nil, "killed midway: B has not finished")
            let before = try sequences()
            // B notices the dead connection only once it has read what was in flight (slowly, at
            // its limit); until then it refuses a new connection from Kaiten as a duplicate.
            // `kaiten serve` does not redial (kaiten run will): wait for B to let go first.
            try await b.waitUntil("B sees Kaiten gone", timeout: 60) {
                let all = try await b.get("/rest/system/connections") as? [String: Any]
                let mine = (all?["connections"] as? [String: Any])?[world.me.description] as? [String: Any]
                return mine?["connected"] as? Bool != true
            }

            // While serve is down, Kaiten pulls one more file from A and announces it.
            try await withSyncthing(a) { a in
                #expect(try world.kaiten("select", Self.folder, "later.txt").status == 0)
                let apply = try world.kaiten("apply", "--yes")
                #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            }
            let after = try sequences()
            #expect(after.max > before.max, "the new announcement took a new sequence")
            #expect(Set(after.all).count == after.all.count, "no sequence used twice")
            #expect(after.all.filter { $0 > before.max }.count >= 1)

            server = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("serve.log"))
            do {
                try await b.waitUntil("B has everything Kaiten holds", timeout: 90) {
                    ApplyInteropTests.sha(dataB + "/big.bin") == ApplyInteropTests.sha(world.peerData + "/big.bin")
                        && ApplyInteropTests.sha(dataB + "/later.txt") == ApplyInteropTests.sha(world.peerData + "/later.txt")
                }
            } catch {
                Issue.record("serve.log: \((try? String(contentsOfFile: dir.file("serve.log"), encoding: .utf8)) ?? "")")
                throw error
            }
            try await b.waitIdle(folder: Self.folder)
            let status = try await b.get("/rest/db/status?folder=\(Self.folder)") as? [String: Any]
            #expect(status?["needFiles"] as? Int == 0, "\(String(describing: status))")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: dataB).filter { $0.hasPrefix(".syncthing.") }
            #expect(leftovers.isEmpty, "\(leftovers)")
            try server.stop()
        }
    }

    /// A device pulling thousands of files from `kaiten serve` while serve is still sending it
    /// the index gets every one: a request that arrives while serve's own announcer writes the
    /// local index is answered (it once waited for that writer's lock forever, and with it every
    /// later request). The verbs that only read (`ls`, `status`, `conflicts`, `plan --offline`,
    /// `select`) work beside serve meanwhile.
    @Test func aPeerPullsThousandsOfFilesFromServeWhileItAnnounces() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-serve-many")
        defer { dir.remove() }
        let world = try World(dir)
        let a = try SyncthingInstance.generate(in: dir.path, name: "a")
        let b = try SyncthingInstance.generate(in: dir.path, name: "b")
        let dataB = dir.file("peer-b")
        try FileManager.default.createDirectory(atPath: dataB, withIntermediateDirectories: true)
        let count = 6000
        try Self.smallFiles(world.peerData, directories: 60, perDirectory: count / 60)
        try await withSyncthing(a) { a in
            try await world.share(a, files: count)
            #expect(try world.kaiten("select", Self.folder, "d*").status == 0)
            let apply = try world.kaiten("apply", "--yes")
            #expect(apply.status == 0, "\(apply.stderr)")
        }
        try await withSyncthing(b) { b in
            try await b.addDevice(world.me, name: "k")
            try await Self.shareWithKaitenOnly(b, world: world, path: dataB, type: "receiveonly")
            let server = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("serve.log"))
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            for args in [
                ["ls", Self.folder], ["status"], ["conflicts"], ["plan", "--offline"], ["select", Self.folder, "d0/f0.txt"], ["plan"],
                ["index", "sync"], ["cat", Self.folder, "d0/f0.txt"],
            ] {
                let result = try KaitenCLI.run(args + ["--home", world.home])
                #expect(result.status == 0 || (args[0] == "plan" && result.status == 2), "\(args): \(result.stdout)\(result.stderr)")
                // Those that need the peers go through serve, which holds their connections.
                if args == ["plan"] || args[0] == "cat" { #expect(result.stderr.isEmpty || result.stderr.contains("kaiten serve (pid"), "\(result.stderr)") }
            }
            let cat = try KaitenCLI.run(["cat", Self.folder, "d0/f0.txt", "--home", world.home])
            #expect(cat.stdout == (try String(contentsOfFile: world.peerData + "/d0/f0.txt", encoding: .utf8)))
            try await b.waitUntil("B has every file", timeout: 180) {
                let status = try await b.get("/rest/db/status?folder=\(Self.folder)") as? [String: Any]
                return status?["localFiles"] as? Int == count && status?["needFiles"] as? Int == 0
            }
            #expect(ApplyInteropTests.sha(dataB + "/d59/f99.txt") == ApplyInteropTests.sha(world.peerData + "/d59/f99.txt"))
            try server.stop()
        }
    }

    /// What the peers delete or replace is kept as the folder's `<versioning>` says, written by
    /// syncthing itself: trashcan keeps `.stversions/NAME`; simple keeps
    /// `.stversions/NAME~YYYYMMDD-HHMMSS.EXT`; a deselected file (still on the peers) is not kept.
    @Test func versioningKeepsWhatThePeersDeleteOrReplace() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-versions")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/gone.txt", "deleted on the peer\n")
        try TestFiles.write(world.peerData + "/doc.txt", "version one\n")
        try TestFiles.write(world.peerData + "/drop.txt", "deselected here\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 3)
            #expect(try world.kaiten("select", Self.folder, "gone.txt", "doc.txt", "drop.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)

            // Trashcan, as syncthing writes it in its own config.xml.
            var folder = try #require(try await st.get("/rest/config/folders/\(Self.folder)") as? [String: Any])
            folder["versioning"] = ["type": "trashcan", "params": ["cleanoutDays": "0"], "cleanupIntervalS": 3600, "fsPath": "", "fsType": "basic"]
            _ = try await st.put("/rest/config/folders/\(Self.folder)", json: folder)
            let peerConfig = String(decoding: try Data(contentsOf: URL(fileURLWithPath: st.home + "/config.xml")), as: UTF8.self)
            let start = try #require(peerConfig.range(of: "<versioning type=\"trashcan\">"))
            let end = try #require(peerConfig.range(of: "</versioning>", range: start.upperBound..<peerConfig.endIndex))
            let element = String(peerConfig[start.lowerBound..<end.upperBound])
            let configPath = world.home + "/config.xml"
            var ours = String(decoding: try Data(contentsOf: URL(fileURLWithPath: configPath)), as: UTF8.self)
            let ourStart = try #require(ours.range(of: "<versioning"))
            let ourEnd = try #require(ours.range(of: "</versioning>", range: ourStart.upperBound..<ours.endIndex))
            ours.replaceSubrange(ourStart.lowerBound..<ourEnd.upperBound, with: element)
            try Data(ours.utf8).write(to: URL(fileURLWithPath: configPath))

            try FileManager.default.removeItem(atPath: world.peerData + "/gone.txt")
            try TestFiles.write(world.peerData + "/doc.txt", "version two\n")
            try await ApplyInteropTests.rescan(st)
            try await st.waitUntil("the peer saw both changes", timeout: 60) {
                let gone = try await st.get("/rest/db/file?folder=\(Self.folder)&file=gone.txt") as? [String: Any]
                return (gone?["global"] as? [String: Any])?["deleted"] as? Bool == true
            }
            let applied = try world.kaiten("apply", "--yes", "--max-delete", "100%")
            #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
            let versions = world.local + "/.stversions"
            #expect(!FileManager.default.fileExists(atPath: world.local + "/gone.txt"))
            #expect(try String(contentsOfFile: versions + "/gone.txt", encoding: .utf8) == "deleted on the peer\n")
            #expect(try String(contentsOfFile: world.local + "/doc.txt", encoding: .utf8) == "version two\n")
            #expect(try String(contentsOfFile: versions + "/doc.txt", encoding: .utf8) == "version one\n")

            // Simple: every version, tagged with the time.
            ours = String(decoding: try Data(contentsOf: URL(fileURLWithPath: configPath)), as: UTF8.self)
            try Data(ours.replacingOccurrences(of: "<versioning type=\"trashcan\">", with: "<versioning type=\"simple\">").utf8)
                .write(to: URL(fileURLWithPath: configPath))
            try TestFiles.write(world.peerData + "/doc.txt", "version three, longer\n")
            try await ApplyInteropTests.rescan(st)
            try await st.waitUntil("the peer saw the edit", timeout: 60) {
                let doc = try await st.get("/rest/db/file?folder=\(Self.folder)&file=doc.txt") as? [String: Any]
                return ((doc?["global"] as? [String: Any])?["size"] as? NSNumber)?.intValue == 22
            }
            #expect(try world.kaiten("apply", "--yes").status == 0)
            let tagged = try FileManager.default.contentsOfDirectory(atPath: versions).filter { $0.hasPrefix("doc~") }
            #expect(tagged.count == 1 && tagged.first.map { $0.range(of: #"^doc~\d{8}-\d{6}\.txt$"#, options: .regularExpression) != nil } == true, "\(tagged)")
            #expect(tagged.first.map { try? String(contentsOfFile: versions + "/" + $0, encoding: .utf8) } == "version two\n")

            // Deselected: deleted here (the peer keeps it), not versioned.
            #expect(try world.kaiten("deselect", Self.folder, "drop.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes", "--max-delete", "100%").status == 0)
            #expect(!FileManager.default.fileExists(atPath: world.local + "/drop.txt"))
            let kept = try FileManager.default.contentsOfDirectory(atPath: versions)
            #expect(!kept.contains { $0.hasPrefix("drop") }, "\(kept)")
        }
    }

    /// A peer that dials Kaiten (while `kaiten serve` listens on the config's address) gets
    /// the same session as one Kaiten dials: its index is taken in, Kaiten's is sent, and it
    /// pulls the selected files from Kaiten. With both sides dialling, one connection stays.
    @Test func aPeerThatDialsKaitenGetsTheSameSession() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-dialled")
        defer { dir.remove() }
        let world = try World(dir)
        let a = try SyncthingInstance.generate(in: dir.path, name: "a")
        let b = try SyncthingInstance.generate(in: dir.path, name: "b")
        let dataB = dir.file("peer-b")
        try TestFiles.write(dataB + "/from-b.txt", "B's own file\n")
        try TestFiles.random(world.peerData + "/a.bin", size: 300_000)
        try TestFiles.write(world.peerData + "/left-out.txt", "not selected on Kaiten\n")
        try await withSyncthing(a) { a in
            try await world.share(a, files: 2)
            #expect(try world.kaiten("select", Self.folder, "a.bin").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
        }
        try await withSyncthing(b) { b in
            // Kaiten knows no address for B: only B can start the session.
            #expect(try world.kaiten("peer", "add", b.deviceID.description, "--name", "b").status == 0)
            #expect(try world.kaiten("folder", "share", Self.folder, "b").status == 0)
            let server = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("serve.log"))
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            let record = try #require(ServerRecord.load(Home(path: world.home)))
            let address = try #require(record.peerAddresses?.first, "serve records where it listens for peers")
            // B settles its own folder first (Kaiten takes a peer's index in when the session
            // starts), then learns where Kaiten listens and dials it.
            try await b.addDevice(world.me, name: "k", addresses: ["dynamic"])
            try await b.addFolder(id: Self.folder, path: dataB, devices: [world.me])
            try await b.waitUntil("B scanned its own file", timeout: 60) {
                let s = try await b.get("/rest/db/status?folder=\(Self.folder)") as? [String: Any]
                return s?["state"] as? String == "idle" && (s?["localFiles"] as? Int) == 1
            }
            var kaitenOnB = try #require(try await b.get("/rest/config/devices/\(world.me)") as? [String: Any])
            kaitenOnB["addresses"] = [address]
            _ = try await b.put("/rest/config/devices/\(world.me)", json: kaitenOnB)
            try await b.waitUntil("B pulled a.bin from Kaiten over the connection it dialled", timeout: 60) {
                ApplyInteropTests.sha(dataB + "/a.bin") == ApplyInteropTests.sha(world.peerData + "/a.bin")
            }
            #expect(!FileManager.default.fileExists(atPath: dataB + "/left-out.txt"))
            try await Self.waitCompletion(b, of: world.me, { percent, need in percent == 100 && need == 0 }, "B sees Kaiten complete")
            try server.stop()
            // Kaiten took B's index in over that connection (B's own file is in the global index).
            let listing = try world.kaiten("ls", "-l", Self.folder)
            #expect(listing.stdout.contains("from-b.txt  [b]"), "\(listing.stdout)\(listing.stderr)")

            // Both sides dial: exactly one connection stays up.
            #expect(try world.kaiten("peer", "edit", "b", "--address", b.address).status == 0)
            let both = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("serve2.log"))
            defer { if both.process.isRunning { kill(both.process.processIdentifier, SIGKILL) } }
            func connected() async throws -> Bool {
                let all = try await b.get("/rest/system/connections") as? [String: Any]
                return ((all?["connections"] as? [String: Any])?[world.me.description] as? [String: Any])?["connected"] as? Bool == true
            }
            try await b.waitUntil("B connected to Kaiten", timeout: 30) { try await connected() }
            let steady = Date().addingTimeInterval(5)
            while Date() < steady {
                #expect(try await connected(), "the surviving connection stays")
                try await Task.sleep(for: .milliseconds(250))
            }
            try both.stop()
        }
    }

    /// The sequences of every entry `device` announced in `log`.
    static func sequences(in log: IndexLog, from device: DeviceID) -> [Int64] {
        var sequences: [Int64] = []
        log.index.forEachEntry(from: device) { sequences.append($0.sequence) }
        return sequences
    }
}
