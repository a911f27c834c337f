import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenReconcile
import KaitenTestSupport
import KaitenTestThreads
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten run` against a real syncthing (issue 12): the loop converges as the peer and the
/// selection change, the verbs work beside it, it survives the peer restarting, SIGTERM ends
/// it cleanly and kill -9 then a restart converges.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct RunInteropTests {
    typealias World = ApplyInteropTests.World
    static let folder = ApplyInteropTests.folder

    /// A running `kaiten run`, its log in a file.
    struct Running {
        let process: Process
        let logPath: String
        /// The home it runs on: a wait that times out shows its `kaiten status` (what a round that
        /// seems stuck is doing).
        var home: String?

        static func start(home: String, logPath: String, _ extra: [String] = [], environment: [String: String] = [:]) throws -> Running {
            let process = try KaitenCLI.start(
                ["run", "--home", home, "--debounce", "0.3", "--rescan-interval", "2"] + extra, logPath: logPath, environment: environment)
            return Running(process: process, logPath: logPath, home: home)
        }

        var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

        /// Stops it (SIGTERM) and waits, bounded: a service that does not end, or ends in a way
        /// Foundation does not see, fails the test instead of hanging the run.
        func stop() {
            guard process.isRunning else { return }
            kill(process.processIdentifier, SIGTERM)
            do { try process.waitForExit(timeout: 30, what: "kaiten run") } catch { Issue.record("\(error)\n\(log)") }
        }
    }

    static func waitFor(_ what: String, timeout: Double = 60, log: Running? = nil, _ condition: () throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try condition() { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        let status = log?.home.flatMap { try? KaitenCLI.run(["status", "--home", $0]).stdout } ?? ""
        Issue.record("timed out waiting: \(what)\n\(log?.log ?? "")\(status.isEmpty ? "" : "\nkaiten status:\n" + status)")
        throw HarnessError("timed out waiting: \(what)")
    }

    static func content(_ path: String) -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }

    /// A peer `a` sharing the folder with Kaiten: `docs/a.txt`, `docs/b.txt` and `other/c.txt`,
    /// `docs` selected; `body` runs while the peer is up.
    static func withDocsSelected(
        _ prefix: String, _ body: (World, SyncthingInstance, TemporaryDirectory) async throws -> Void
    ) async throws {
        let dir = try TemporaryDirectory(prefix: prefix)
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/a.txt", "a, first\n")
        try TestFiles.write(world.peerData + "/docs/b.txt", "b\n")
        try TestFiles.write(world.peerData + "/other/c.txt", "c, not selected at first\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 3)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            try await body(world, st, dir)
        }
    }

    @Test func runConvergesAsThePeerAndTheSelectionChangeAndStopsCleanly() async throws {
        try await Self.withDocsSelected("kaiten-run") { world, st, dir in
            var run = try Running.start(home: world.home, logPath: dir.file("run.log"), ["--apply", "all", "--max-delete", "10"])
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            let local = world.local
            try await Self.waitFor("the selection pulled") { Self.content(local + "/docs/a.txt") == "a, first\n" && Self.content(local + "/docs/b.txt") == "b\n" }
            #expect(!FileManager.default.fileExists(atPath: local + "/other/c.txt"))

            // The peer adds, changes and deletes: each arrives without any verb being run.
            try TestFiles.write(world.peerData + "/docs/new.txt", "new on the peer\n")
            try TestFiles.write(world.peerData + "/docs/a.txt", "a, second version\n")
            try FileManager.default.removeItem(atPath: world.peerData + "/docs/b.txt")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("the peer's changes in place", log: run) {
                Self.content(local + "/docs/new.txt") == "new on the peer\n" && Self.content(local + "/docs/a.txt") == "a, second version\n"
                    && !FileManager.default.fileExists(atPath: local + "/docs/b.txt")
            }

            // The verbs beside it.
            let status = try world.kaiten("status")
            #expect(status.status == 0 && status.stdout.contains("service: kaiten run (pid \(run.process.processIdentifier))"), "\(status.stdout)\(status.stderr)")
            #expect(status.stdout.contains("peers connected: a"), "\(status.stdout)")
            let sync = try world.kaiten("index", "sync")
            #expect(sync.status == 0 && sync.stdout.contains("keeps the index current"), "\(sync.stdout)\(sync.stderr)")
            #expect(try world.kaiten("ls", Self.folder, "docs").stdout.contains("new.txt"))
            let plan = try world.kaiten("plan", "--offline")
            #expect(plan.status == 0, "nothing left to do: \(plan.stdout)\(plan.stderr)")
            // An online plan reads the logs the service keeps current (it does not dial).
            let online = try world.kaiten("plan")
            #expect(online.status == 0 && online.stderr.contains("keeps the index current"), "\(online.stdout)\(online.stderr)")
            // The verbs that need the peers go through the service (its control socket).
            let cat = try world.kaiten("cat", Self.folder, "docs/a.txt")
            #expect(cat.status == 0 && cat.stdout == "a, second version\n", "\(cat.stdout)\(cat.stderr)")
            let got = try world.kaiten("get", Self.folder, "docs/a.txt", "-o", dir.file("got.txt"))
            #expect(got.status == 0 && Self.content(dir.file("got.txt")) == "a, second version\n", "\(got.stdout)\(got.stderr)")
            let applied = try world.kaiten("apply", "--yes")
            #expect(applied.status == 0 && applied.stderr.contains("holds the peers' connections: it applies"), "\(applied.stdout)\(applied.stderr)")
            #expect(run.process.isRunning)

            // A selection edited beside it: the new path is pulled.
            #expect(try world.kaiten("select", Self.folder, "other").status == 0)
            try await Self.waitFor("the newly selected file", log: run) { Self.content(local + "/other/c.txt") == "c, not selected at first\n" }

            // A change made here reaches the peer (a sendreceive folder).
            try TestFiles.write(local + "/docs/mine.txt", "written on the Kaiten side\n")
            try await Self.waitFor("the local change on the peer", timeout: 90, log: run) {
                Self.content(world.peerData + "/docs/mine.txt") == "written on the Kaiten side\n"
            }

            // The peer restarts: the service dials it again and goes on.
            st.stop()
            try await st.start()
            try TestFiles.write(world.peerData + "/docs/after-restart.txt", "after the restart\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("a change after the peer restarted", timeout: 90, log: run) {
                Self.content(local + "/docs/after-restart.txt") == "after the restart\n"
            }

            // config.xml: a broken edit is said and the last good one kept; SIGHUP reads it
            // again, and the service goes on with it (sessions rebuilt).
            let configPath = world.home + "/config.xml"
            let good = try Data(contentsOf: URL(fileURLWithPath: configPath))
            try Data("<configuration version=\"37\"><device id=".utf8).write(to: URL(fileURLWithPath: configPath))
            try await Self.waitFor("the broken edit said", log: run) { run.log.contains("keeps running on the last good configuration") }
            #expect(run.process.isRunning)
            // With its reason, file and line, as the CLI says it.
            #expect(run.log.contains(configPath + ":1:"), "\(run.log)")
            // The verbs that only read go on working, on the configuration the service runs on.
            for verb in [["status"], ["ls", Self.folder], ["conflicts"]] {
                let shown = try KaitenCLI.run(verb + ["--home", world.home])
                #expect(shown.status == 0, "\(verb): \(shown.stdout)\(shown.stderr)")
                #expect(shown.stderr.contains(configPath + ":1:"), "\(verb): \(shown.stderr)")
                #expect(shown.stderr.contains("runs on the last good configuration"), "\(verb): \(shown.stderr)")
            }
            // One that writes refuses, rather than write over the edit.
            #expect(try world.kaiten("select", Self.folder, "docs").status != 0)
            try good.write(to: URL(fileURLWithPath: configPath))
            kill(run.process.processIdentifier, SIGHUP)
            try await Self.waitFor("config.xml read again", log: run) { run.log.contains("config.xml read again") }
            // SIGHUP alone (the file unchanged) reads it again too, and keeps the peer connected:
            // no drop, no redial, no second start.
            try await Self.waitFor("the peer connected after the reload", log: run) {
                let log = run.log
                guard let connected = log.range(of: "): connected at", options: .backwards) else { return false }
                return log.range(of: "): disconnected (", options: .backwards).map { $0.lowerBound < connected.lowerBound } ?? true
            }
            let beforeReload = run.log.count
            let reloads = run.log.components(separatedBy: "config.xml read again").count
            kill(run.process.processIdentifier, SIGHUP)
            try await Self.waitFor("SIGHUP reloads", log: run) { run.log.components(separatedBy: "config.xml read again").count > reloads }
            try TestFiles.write(world.peerData + "/docs/after-reload.txt", "after the reload\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("a change after the reload", timeout: 90, log: run) {
                Self.content(local + "/docs/after-reload.txt") == "after the reload\n"
            }
            let afterReload = String(run.log.dropFirst(beforeReload))
            #expect(!afterReload.contains("): disconnected ("), "\(afterReload)")
            #expect(!afterReload.contains("): connected at"), "\(afterReload)")
            #expect(!afterReload.contains("running: folders"), "\(afterReload)")
            #expect(!afterReload.contains("after start"), "\(afterReload)")

            // SIGTERM: exit 0 within 10 s.
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM")
            #expect(run.process.terminationStatus == 0, "\(run.log)")
            #expect(run.log.contains("stopped"))
            #expect(!run.log.contains("\u{1B}["), "no ANSI codes in a log that is not a terminal")

            // kill -9 while the peer keeps changing; a new run converges.
            run = try Running.start(home: world.home, logPath: dir.file("run2.log"), ["--apply", "all", "--max-delete", "10", "--json"])
            try await Task.sleep(for: .milliseconds(800))
            kill(run.process.processIdentifier, SIGKILL)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGKILL")
            try TestFiles.write(world.peerData + "/docs/while-down.txt", "while Kaiten was down\n")
            try await ApplyInteropTests.rescan(st)
            let status2 = try world.kaiten("status")
            #expect(!status2.stdout.contains("service:"), "a killed service is not shown as running: \(status2.stdout)")
            run = try Running.start(home: world.home, logPath: dir.file("run3.log"), ["--apply", "all", "--max-delete", "10", "--json"])
            try await Self.waitFor("convergence after kill -9", log: run) { Self.content(local + "/docs/while-down.txt") == "while Kaiten was down\n" }
            // --json: every line is one event object.
            let lines = run.log.split(separator: "\n")
            #expect(!lines.isEmpty && lines.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) is [String: Any] }, "\(run.log)")
            // In the schema every verb shares (Docs/events.md).
            let envelopes = lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
            #expect(envelopes.allSatisfy { $0["v"] as? Int == 1 && $0["time"] is String && $0["type"] is String && $0["kind"] == nil }, "\(run.log)")
            let leftovers = try FileManager.default.subpathsOfDirectory(atPath: local).filter { $0.hasSuffix(".tmp") }
            #expect(leftovers.isEmpty, "no temp files left: \(leftovers)")
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM")
            #expect(run.process.terminationStatus == 0)
        }
    }

    /// `--apply safe` (the default) leaves what the peers delete for review, and `none` applies
    /// nothing; neither ever settles a conflict.
    @Test func theModesAdmitWhatTheySay() {
        func action(_ kind: Action.Kind, _ cause: Action.Cause) -> Action { Action(action: kind, path: "x", reason: "", cause: cause) }
        let safe: [(Action, Bool)] = [
            (action(.pull, .selected), true), (action(.pull, .changedOnPeers), true), (action(.send, .localChange), true),
            (action(.writeStIgnore, .selected), true), (action(.mkdir, .directory), true), (action(.delete, .deselected), true),
            (action(.delete, .deletedOnPeers), false), (action(.delete, .movedOnPeers), false), (action(.sendDelete, .localChange), false),
            // An edit made on both sides is settled by syncthing's rule, the loser kept aside.
            (action(.pull, .conflictLost), true), (action(.send, .conflictWon), true),
        ]
        for (a, admitted) in safe { #expect(AutoApply.safe.admits(a) == admitted, "\(a.action) \(String(describing: a.cause))") }
        #expect(AutoApply.all.admits(action(.delete, .deletedOnPeers)) && AutoApply.all.admits(action(.sendDelete, .localChange)))
        #expect(AutoApply.all.admits(action(.pull, .conflictLost)) && AutoApply.all.admits(action(.send, .conflictWon)))
        #expect(!AutoApply.none.admits(action(.pull, .conflictLost)) && !AutoApply.none.admits(action(.send, .conflictWon)))
        #expect(!AutoApply.none.admits(action(.pull, .selected)))
    }
}

extension RunInteropTests {
    /// A connection cut in the middle (a TCP proxy on loopback between Kaiten and the peer
    /// resets it, no TLS or BEP close): the service notices, dials again through the proxy, and
    /// the peer's next change still arrives.
    @Test func aCutConnectionIsDialledAgain() async throws {
        try await Self.withRunThroughProxy(prefix: "kaiten-run-cut") { world, st, proxy, run in
            let local = world.local
            proxy.cut()
            try await Self.waitFor("the redial through the proxy", log: run) { run.log.contains("reconnected to \(st.deviceID.shortDescription)") }
            try TestFiles.write(world.peerData + "/docs/b.txt", "after the cut\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("a change after the cut", timeout: 90, log: run) { Self.content(local + "/docs/b.txt") == "after the cut\n" }
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM")
            #expect(run.process.terminationStatus == 0)
        }
    }

    /// `kaiten run` reaching its syncthing peer through a ``TCPProxy`` on loopback, with
    /// `docs/a.txt` selected and already pulled; the peer, the proxy and the service are
    /// stopped after `body` (the service by SIGKILL if the body left it running).
    static func withRunThroughProxy(
        prefix: String, options: [String] = [], _ body: (World, SyncthingInstance, TCPProxy, Running) async throws -> Void
    ) async throws {
        let dir = try TemporaryDirectory(prefix: prefix)
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/a.txt", "a\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            let proxy = try TCPProxy(to: Int(st.address.split(separator: ":").last!)!)
            defer { proxy.stop() }
            #expect(try world.kaiten("peer", "edit", st.deviceID.description, "--address", proxy.address).status == 0)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            let run = try Running.start(home: world.home, logPath: dir.file("run.log"), options)
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            let local = world.local
            try await Self.waitFor("the first pull", log: run) { Self.content(local + "/docs/a.txt") == "a\n" }
            try await body(world, st, proxy, run)
        }
    }

    /// A stalled path (the proxy passes nothing either way and closes nothing, as a congested or
    /// half-dead link does): the verbs beside the service answer at once, the session carries
    /// on when the path does and the change the peer made meanwhile arrives, and SIGTERM during
    /// a stall still exits 0 within 10 s (the goodbye to a peer that reads nothing is not
    /// waited for).
    @Test func aStalledConnectionHoldsNothingUp() async throws {
        try await Self.withRunThroughProxy(prefix: "kaiten-run-stall") { world, st, proxy, run in
            let local = world.local
            proxy.stall()
            let stalledAt = Date()
            try TestFiles.write(world.peerData + "/docs/b.txt", "during the stall\n")
            try await ApplyInteropTests.rescan(st)
            for verb in [["status"], ["ls", Self.folder, "docs"], ["plan"], ["conflicts"]] {
                let started = Date()
                let result = try KaitenCLI.run(verb + ["--home", world.home])
                let took = Date().timeIntervalSince(started)
                #expect([0, 2].contains(result.status), "\(verb) during a stall: \(result.stderr)")
                #expect(took < 10, "\(verb) took \(took) s during a stall")
            }
            #expect(Self.content(local + "/docs/b.txt") == nil, "nothing passed the stalled proxy")
            // A stall of several seconds, well under any timeout: the session carries on.
            let rest = 8 - Date().timeIntervalSince(stalledAt)
            if rest > 0 { try await Task.sleep(for: .seconds(rest)) }
            proxy.resume()
            try await Self.waitFor("the change made during the stall", timeout: 90, log: run) {
                Self.content(local + "/docs/b.txt") == "during the stall\n"
            }
            #expect(!run.log.contains("reconnected"), "the stall did not cost the session: \(run.log)")

            proxy.stall()
            try await Task.sleep(for: .seconds(1))
            let stopping = Date()
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM during a stall")
            #expect(run.process.terminationStatus == 0)
            #expect(Date().timeIntervalSince(stopping) < 10)
            proxy.resume()
        }
    }

    /// A path that stays stalled past the read timeout (syncthing's ReceiveTimeout, 300 s; 5 s
    /// here with --peer-timeout): the service gives the silent peer up, dials it
    /// again, and once the path passes traffic the change the peer made meanwhile arrives.
    @Test func aPeerSilentPastTheReadTimeoutIsDroppedAndDialledAgain() async throws {
        try await Self.withRunThroughProxy(prefix: "kaiten-run-timeout", options: ["--peer-timeout", "5"]) { world, st, proxy, run in
            let local = world.local
            proxy.stall()
            try TestFiles.write(world.peerData + "/docs/b.txt", "during a long stall\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("the silent peer given up", timeout: 30, log: run) { run.log.contains("read timeout") }
            #expect(Self.content(local + "/docs/b.txt") == nil, "nothing passed the stalled proxy")
            #expect(run.process.isRunning, "the service stays up")
            proxy.resume()
            try await Self.waitFor("the change made during the stall", timeout: 90, log: run) {
                Self.content(local + "/docs/b.txt") == "during a long stall\n"
            }
            #expect(run.log.contains("reconnected"), "dialled again: \(run.log)")
        }
    }

    /// Ctrl-C on an `apply` that the service runs (through the control socket): the client
    /// passes the signal on, the service stops between blocks, the client exits 130 with the
    /// summary saying so, the service stays up, and the next apply through it keeps the
    /// verified blocks (interrupted at half of a 256 MiB file: at most ~55 % fetched again).
    @Test func ctrlCOnAnApplyThroughTheServiceStopsItAndTheNextResumes() async throws {
        try await WrongResultsInteropTests.withBigFileSelected(prefix: "kaiten-run-sigint") { dir, world, _ in
            let size = WrongResultsInteropTests.bigFileSize
            let run = try Running.start(home: world.home, logPath: dir.file("run.log"), ["--apply", "none"])
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            try await Self.waitFor("the service connected", log: run) {
                try world.kaiten("status").stdout.contains("peers connected: a")
                    && FileManager.default.fileExists(atPath: world.home + "/state/run.sock")
            }
            // What the service process wrote: the file's bytes.
            func servicePull() -> Int { WrongResultsInteropTests.bytesWritten(by: run.process) }
            let before = servicePull()
            let client = try WrongResultsInteropTests.startApply(world, output: dir.file("out"))
            let deadline = Date().addingTimeInterval(120)
            while client.isRunning && Date() < deadline && servicePull() - before < size / 2 { usleep(2_000) }
            try #require(client.isRunning, "the apply finished before it could be interrupted at half")
            kill(client.processIdentifier, SIGINT)
            try client.waitForExit(timeout: 60, what: "kaiten apply through the service")
            let out = (try? String(contentsOfFile: dir.file("out"), encoding: .utf8)) ?? ""
            #expect(client.terminationStatus == 130, "\(out)")
            let summary = ApplyInteropTests.json(out).last ?? [:]
            #expect(summary["interrupted_by"] as? Int == Int(SIGINT), "\(summary)")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/big.bin"))
            #expect(run.process.isRunning, "the service stays up")
            #expect(try world.kaiten("status").stdout.contains("peers connected: a"))

            try WrongResultsInteropTests.expectTheNextApplyResumes(world)
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM")
            #expect(run.process.terminationStatus == 0)
        }
    }

    /// Beside `kaiten run --apply none`, every verb works and nothing is refused for a lock:
    /// `plan` is the service's plan on its live connections; `apply` (fresh, or a saved plan)
    /// is applied by the service after the same stale check as a saved plan; `cat` and `get`
    /// read verified blocks through it, for files outside the selection too; `resolve`,
    /// `select`, `conflicts` and `ls` work on the files and logs as they are. The control
    /// socket is 0600.
    @Test func theVerbsThatNeedThePeersGoThroughTheService() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-run-verbs")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        // Three blocks' worth, so that cat and get fetch several blocks through the service.
        let big = (0..<6000).map { "line \($0) of big.txt, long enough to span blocks\n" }.joined()
        try TestFiles.write(world.peerData + "/docs/big.txt", big)
        try TestFiles.write(world.peerData + "/docs/b.txt", "b\n")
        try TestFiles.write(world.peerData + "/other/c.txt", "c, never selected\n")
        try TestFiles.write(world.peerData + "/later/d.txt", "d, selected later\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 4)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            try TestFiles.write(world.local + "/other/mine.txt", "only here\n")
            let run = try Running.start(home: world.home, logPath: dir.file("run.log"), ["--apply", "none"])
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            let socket = world.home + "/state/run.sock"
            try await Self.waitFor("the service connected", log: run) {
                let connected = try world.kaiten("status").stdout.contains("peers connected: a")
                return connected && FileManager.default.fileExists(atPath: socket)
            }
            var info = stat()
            #expect(stat(socket, &info) == 0 && info.st_mode & 0o777 == 0o600, "the control socket is for this user only")

            // plan: the service's plan (it applied nothing: --apply none).
            let plan = try world.kaiten("plan", "--detailed-exitcode", "--out", dir.file("first.plan"))
            #expect(plan.status == 2 && plan.stdout.contains("docs/big.txt") && plan.stderr.contains("this is its plan"), "\(plan.stdout)\(plan.stderr)")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/docs/big.txt"))

            // cat and get, outside the selection and across blocks.
            let cat = try world.kaiten("cat", Self.folder, "docs/big.txt")
            #expect(cat.status == 0 && cat.stdout == big, "\(cat.stderr)")
            let other = try world.kaiten("cat", Self.folder, "other/c.txt")
            #expect(other.status == 0 && other.stdout == "c, never selected\n", "\(other.stderr)")
            let tree = try world.kaiten("get", Self.folder, "docs", "-o", dir.file("tree"))
            #expect(tree.status == 0 && Self.content(dir.file("tree/big.txt")) == big && Self.content(dir.file("tree/b.txt")) == "b\n", "\(tree.stdout)\(tree.stderr)")
            let missing = try world.kaiten("cat", Self.folder, "nowhere.txt")
            #expect(missing.status != 0 && missing.stderr.contains("not in the global index"), "\(missing.stderr)")

            // A saved plan, applied by the service: exactly it, once.
            let saved = try world.kaiten("apply", dir.file("first.plan"))
            #expect(saved.status == 0 && saved.stdout.contains("pulled docs/big.txt"), "\(saved.stdout)\(saved.stderr)")
            #expect(Self.content(world.local + "/docs/big.txt") == big && Self.content(world.local + "/docs/b.txt") == "b\n")
            #expect(run.log.contains("applying plan"), "the service says it applied for a client: \(run.log)")
            let again = try world.kaiten("apply", dir.file("first.plan"))
            #expect(again.status == 3 && again.stderr.contains("already applied"), "\(again.stdout)\(again.stderr)")

            // A saved plan the peer moved on from is stale (exit 3), nothing changed.
            #expect(try world.kaiten("select", Self.folder, "later").status == 0)
            _ = try world.kaiten("plan", "--out", dir.file("second.plan"))
            try TestFiles.write(world.peerData + "/later/d.txt", "d, changed on the peer\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("the peer's change in the service's index", log: run) {
                try world.kaiten("ls", "-l", Self.folder, "later").stdout.contains("23 B")
            }
            try await Task.sleep(for: .milliseconds(500))
            let stale = try world.kaiten("apply", dir.file("second.plan"))
            #expect(stale.status == 3 && stale.stderr.contains("stale"), "\(stale.stdout)\(stale.stderr)")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/later/d.txt"))

            // A fresh apply: planned by the service, shown here, applied there. With --yes there
            // is no question, so the service plans once and applies that plan in one request.
            let fresh = try world.kaiten("apply", "--yes")
            #expect(fresh.status == 0 && fresh.stdout.contains("pulled later/d.txt"), "\(fresh.stdout)\(fresh.stderr)")
            #expect(Self.content(world.local + "/later/d.txt") == "d, changed on the peer\n")
            #expect(run.log.contains("planning and applying for a client"), "one request, not plan then apply: \(run.log)")
            let json = try world.kaiten("apply", "--yes", "--json")
            #expect(json.status == 0 && json.stdout.contains("\"type\":\"summary\""), "\(json.stdout)\(json.stderr)")

            // Conflicts are read and settled beside it.
            let conflicts = try world.kaiten("conflicts")
            #expect(conflicts.stdout.contains("other/mine.txt"), "\(conflicts.stdout)")
            #expect(try world.kaiten("resolve", Self.folder, "other/mine.txt", "--delete-local").status == 0)
            #expect(!FileManager.default.fileExists(atPath: world.local + "/other/mine.txt"))
            let settled = try world.kaiten("conflicts")
            #expect(!settled.stdout.contains("other/mine.txt"), "\(settled.stdout)")
            #expect(try world.kaiten("index", "sync").status == 0)
            #expect(run.process.isRunning)
            // A client that connects and says nothing does not keep the service from stopping.
            let silent = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(silent) }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (i, b) in socket.utf8.enumerated() { raw[i] = b }
            }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(silent, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            #expect(connected == 0, "the control socket takes connections")
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM")
            #expect(run.process.terminationStatus == 0)
            #expect(!FileManager.default.fileExists(atPath: socket), "the socket goes with the service")
        }
    }
}

extension RunInteropTests {
    /// The service's last round, from `state/service.json`.
    static func lastRound(_ world: World) -> [String: Any]? {
        guard let data = FileManager.default.contents(atPath: world.home + "/state/service.json"),
            let record = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return nil }
        return record["last_round"] as? [String: Any]
    }

    /// Deletions a brake holds back stay held, quietly: said once, not every round (nor the
    /// directories they would have emptied, "left in place" at each rescan), and nothing is
    /// deleted; the rest of the service goes on.
    @Test func deletionsHeldByABrakeAreSaidOnceNotEveryRound() async throws {
        try await Self.withDocsSelected("kaiten-run-brake") { world, st, dir in
            let run = try Running.start(home: world.home, logPath: dir.file("run.log"), ["--apply", "all", "--max-delete", "1"])
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            let local = world.local
            try await Self.waitFor("the selection pulled", log: run) {
                Self.content(local + "/docs/a.txt") == "a, first\n" && Self.content(local + "/docs/b.txt") == "b\n"
            }
            let before = run.log.count
            // Two deletions (and the directory) against a brake of one.
            #expect(try world.kaiten("deselect", Self.folder, "docs").status == 0)
            try await Self.waitFor("the brake said", log: run) { run.log.dropFirst(before).contains("deletions held back") }
            // Several rescans (every 2 s here), each planning the same held deletions.
            let firstRound = Self.lastRound(world)?["number"] as? Int ?? 0
            try await Self.waitFor("three more rounds", log: run) { (Self.lastRound(world)?["number"] as? Int ?? 0) >= firstRound + 3 }
            let since = String(run.log.dropFirst(before))
            #expect(since.components(separatedBy: "deletions held back").count == 2, "said once: \(since)")
            #expect(!since.contains("left in place"), "\(since)")
            #expect(Self.content(local + "/docs/a.txt") == "a, first\n" && Self.content(local + "/docs/b.txt") == "b\n")
            // One line, no contradiction, and a way to confirm that works beside the service.
            let said = since.split(separator: "\n").first { $0.contains("deletions held back") } ?? ""
            #expect(!said.contains("nothing was changed"), "\(said)")
            #expect(said.contains("kaiten apply --max-delete 2"), "\(said)")
            // Beside the service, --yes applies the plan the service makes in the same request:
            // its brake refuses it whole (exit 4), as a one-shot apply's does.
            let braked = try world.kaiten("apply", "--yes", "--max-delete", "1")
            #expect(braked.status == 4 && braked.stderr.contains("max-delete"), "\(braked.stdout)\(braked.stderr)")
            #expect(Self.content(local + "/docs/a.txt") == "a, first\n" && Self.content(local + "/docs/b.txt") == "b\n")
            let confirmed = try world.kaiten("apply", "--yes", "--max-delete", "2")
            #expect(confirmed.status == 0, "\(confirmed.stdout)\(confirmed.stderr)")
            #expect(!FileManager.default.fileExists(atPath: local + "/docs/a.txt"))
            #expect(!FileManager.default.fileExists(atPath: local + "/docs/b.txt"))
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM")
        }
    }

    /// An edit made here and on the peer at once is settled by the service, in `--apply safe`
    /// too, as syncthing settles it: the newer modification wins and the other is kept as a
    /// conflict copy on both sides, nothing lost. A conflict it cannot settle is named in the
    /// log with its path and the command that settles it.
    @Test func aConcurrentEditIsSettledBySyncthingsRuleAndOtherConflictsAreNamed() async throws {
        try await Self.withDocsSelected("kaiten-run-concurrent") { world, st, dir in
            #expect(try world.kaiten("select", Self.folder, "other").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            let now = Date()
            try TestFiles.write(world.local + "/docs/a.txt", "a, edited on Kaiten\n")
            try FileManager.default.setAttributes([.modificationDate: now.addingTimeInterval(-100)], ofItemAtPath: world.local + "/docs/a.txt")
            try TestFiles.write(world.peerData + "/docs/a.txt", "a, edited on the peer\n")
            try FileManager.default.setAttributes([.modificationDate: now.addingTimeInterval(-50)], ofItemAtPath: world.peerData + "/docs/a.txt")
            try await ApplyInteropTests.rescan(st)
            try TestFiles.write(world.local + "/loose.txt", "neither selected nor on the peer\n")
            // Deselected, and held by one peer where the service wants two: a conflict the
            // service counts with its own --require-peers, and `kaiten conflicts` lists too.
            #expect(try world.kaiten("deselect", Self.folder, "other").status == 0)
            let run = try Running.start(
                home: world.home, logPath: dir.file("run.log"), ["--apply", "safe", "--rescan-interval", "3600", "--require-peers", "2"])
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            func copies(_ root: String) -> [String] {
                ((try? FileManager.default.contentsOfDirectory(atPath: root + "/docs")) ?? []).filter { $0.contains(".sync-conflict-") }
            }
            let local = world.local
            try await Self.waitFor("the peer's newer edit in place and this one kept aside", log: run) {
                Self.content(local + "/docs/a.txt") == "a, edited on the peer\n"
                    && copies(local).contains { Self.content(local + "/docs/" + $0) == "a, edited on Kaiten\n" }
            }
            // The losing copy reaches the peer, as syncthing's own would.
            let peerData = world.peerData
            try await Self.waitFor("the conflict copy on the peer", timeout: 60, log: run) {
                copies(peerData).contains { Self.content(peerData + "/docs/" + $0) == "a, edited on Kaiten\n" }
            }
            #expect(Self.content(world.peerData + "/docs/a.txt") == "a, edited on the peer\n")
            // What it cannot settle is named, with the way to settle it.
            try await Self.waitFor("the extraneous file named", log: run) {
                run.log.contains("conflict f/loose.txt: extraneous") && run.log.contains("kaiten resolve f loose.txt --")
            }
            // The status counts what `kaiten conflicts` lists, and knows the index came in.
            let listed = try world.kaiten("conflicts", "--json")
            let rows = (try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]]) ?? []
            let status = try world.kaiten("status")
            #expect(status.stdout.contains("\(rows.count) conflicts"), "\(status.stdout)\n\(listed.stdout)")
            #expect(rows.contains { $0["path"] as? String == "other/c.txt" && $0["kind"] as? String == "last-copy" }, "\(listed.stdout)")
            #expect(!status.stdout.contains("last index update: none yet"), "\(status.stdout)")
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM")
        }
    }

    /// A round that finds an apply in progress (the home's lock held: a client's apply through
    /// the control socket) waits for it to end before planning, and says so in the status;
    /// then it plans what changed meanwhile.
    @Test func aRoundWaitsForAnApplyInProgressThenPlans() async throws {
        try await Self.withDocsSelected("kaiten-run-lock") { world, st, dir in
            let run = try Running.start(home: world.home, logPath: dir.file("run.log"), ["--apply", "none"])
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            try await Self.waitFor("the first round planned the selection", log: run) { (Self.lastRound(world)?["pending"] as? Int ?? 0) >= 2 }
            // The lock as an apply holds it: flock on state/apply.lock, its pid inside.
            let fd = open(world.home + "/state/apply.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            try #require(fd >= 0 && flock(fd, LOCK_EX) == 0)
            defer { close(fd) }
            let pid = Array("\(getpid())\n".utf8)
            ftruncate(fd, 0)
            _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
            func busy() -> String {
                guard let data = FileManager.default.contents(atPath: world.home + "/state/service.json"),
                    let record = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
                else { return "" }
                return (record["busy"] as? [String: Any])?["doing"] as? String ?? ""
            }
            // The next round (the rescan, every 2 s) waits: said once it has waited 5 s. A round
            // that had begun before the lock is over by then.
            try await Self.waitFor("the round says it waits", log: run) { busy().contains("waiting for the apply in progress (pid \(getpid()))") }
            let roundBefore = Self.lastRound(world)?["number"] as? Int ?? 0
            let pendingBefore = Self.lastRound(world)?["pending"] as? Int ?? 0
            #expect(try world.kaiten("select", Self.folder, "other").status == 0)
            // Nothing is planned while the lock is held: the absence is watched for a while.
            try await Task.sleep(for: .seconds(3))
            #expect((Self.lastRound(world)?["number"] as? Int ?? 0) == roundBefore, "a round ended under the apply: \(run.log)")
            #expect((Self.lastRound(world)?["pending"] as? Int ?? 0) == pendingBefore, "the selection edit was planned under the apply: \(run.log)")
            #expect(busy().contains("waiting for the apply in progress"))
            flock(fd, LOCK_UN)
            try await Self.waitFor("the selection edit planned once the apply ended", log: run) {
                (Self.lastRound(world)?["pending"] as? Int ?? 0) > pendingBefore
            }
            run.stop()
        }
    }

    /// One version per local change, whatever the rounds around it: a file edited here and
    /// sent keeps the version it was sent at through a selection edit, a peer's update of
    /// another file, the peer restarting, and a whole rescan.
    @Test func aSentChangeKeepsItsVersionThroughTheRoundsAfter() async throws {
        try await Self.withDocsSelected("kaiten-run-churn") { world, st, dir in
            let run = try Running.start(home: world.home, logPath: dir.file("run.log"), ["--apply", "all", "--max-delete", "10", "--rescan-interval", "5"])
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            let local = world.local
            let peerData = world.peerData
            try await Self.waitFor("the selection pulled", log: run) { Self.content(local + "/docs/a.txt") == "a, first\n" }
            try TestFiles.write(local + "/docs/a.txt", "a, edited here\n")
            try await Self.waitFor("the edit on the peer", timeout: 60, log: run) { Self.content(peerData + "/docs/a.txt") == "a, edited here\n" }
            let sent = try await SendInteropTests.globalVersion(st, "docs/a.txt")

            #expect(try world.kaiten("select", Self.folder, "other").status == 0)
            try await Self.waitFor("the selection edit applied", log: run) { Self.content(local + "/other/c.txt") == "c, not selected at first\n" }
            try TestFiles.write(peerData + "/docs/b.txt", "b, changed on the peer\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("the peer's update applied", log: run) { Self.content(local + "/docs/b.txt") == "b, changed on the peer\n" }
            let connections = run.log.components(separatedBy: "): connected at").count
            st.stop()
            try await st.start()
            try await Self.waitFor("the peer connected again", timeout: 60, log: run) {
                run.log.components(separatedBy: "): connected at").count > connections
            }
            // Two whole rescans at least (every 5 s): waited for by their rounds, not a time.
            let roundsBefore = Self.lastRound(world)?["number"] as? Int ?? 0
            try await Self.waitFor("two more rounds", timeout: 90, log: run) { (Self.lastRound(world)?["number"] as? Int ?? 0) >= roundsBefore + 2 }
            #expect(try await SendInteropTests.globalVersion(st, "docs/a.txt") == sent, "\(run.log)")
            #expect(run.log.components(separatedBy: "done send f/docs/a.txt").count == 2, "sent once: \(run.log)")
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM")
        }
    }

    /// A peer's change is planned from the paths its update names (the rest of the folder is
    /// held in memory, not read again), and what the service writes itself is not news to it:
    /// after the pull no second round follows. A change to a file that is not selected here is
    /// announced at once (the peer sees Kaiten at 100 % again without any apply), and what a
    /// scoped round cannot decide alone (a deletion, a new directory's files) still arrives.
    @Test func aPeersChangeIsPlannedByItsPathsAloneAndItsEchoIsNoRound() async throws {
        try await Self.withDocsSelected("kaiten-run-scoped") { world, st, dir in
            // --verbose: the service says when it sets the echo of its own writes aside, which
            // is what makes "no round followed" mean something (it was seen, and not news).
            let run = try Running.start(
                home: world.home, logPath: dir.file("run.log"), ["--apply", "all", "--max-delete", "10", "--rescan-interval", "3600", "--verbose"])
            /// Whether the log, past `mark` (its length at some moment), says the echo of `path` was set aside.
            func echoSetAside(_ path: String, after mark: Int) -> Bool {
                run.log.dropFirst(mark).split(separator: "\n").contains { $0.contains("not news:") && $0.contains("\(Self.folder)/\(path)") }
            }
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            let local = world.local
            try await Self.waitFor("the selection pulled", log: run) { Self.content(local + "/docs/a.txt") == "a, first\n" }
            try await FullDeviceInteropTests.waitCompletion(st, of: world.me, { p, _ in p == 100 }, "Kaiten complete after the first pull")

            // A change on the peer: one round, of the paths the update named.
            try await Task.sleep(for: .seconds(1.5))
            let before = Self.lastRound(world)?["number"] as? Int ?? 0
            let logBeforeChange = run.log.count
            try TestFiles.write(world.peerData + "/docs/a.txt", "a, second\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("the change in place", log: run) { Self.content(local + "/docs/a.txt") == "a, second\n" }
            // The rename the pull made, seen by the watcher and set aside as the service's own.
            try await Self.waitFor("the pull's echo set aside", log: run) { echoSetAside("docs/a.txt", after: logBeforeChange) }
            let round = try #require(Self.lastRound(world))
            #expect(round["paths"] as? Int != nil, "the last round planned the named paths only, not the whole folder: \(round)\n\(run.log)")
            #expect((round["number"] as? Int ?? 0) - before <= 2, "no round for the service's own write: \(round)\n\(run.log)")
            #expect(round["applied"] as? Int == 1, "\(round)")
            #expect(run.log.contains("looked at)"), "\(run.log)")
            try await FullDeviceInteropTests.waitCompletion(st, of: world.me, { p, _ in p == 100 }, "Kaiten complete after the change")

            // A file not selected here changes on the peer: nothing to apply, and Kaiten's
            // announcement follows at once (invalid at the new version: not needed from it).
            try TestFiles.write(world.peerData + "/other/c.txt", "c, changed on the peer\n")
            try await ApplyInteropTests.rescan(st)
            try await st.waitUntil("the peer's own index has the change", timeout: 30) {
                let s = try await st.get("/rest/db/file?folder=\(Self.folder)&file=other/c.txt") as? [String: Any]
                return ((s?["global"] as? [String: Any])?["size"] as? Int) == "c, changed on the peer\n".utf8.count
            }
            try await FullDeviceInteropTests.waitCompletion(st, of: world.me, { p, _ in p == 100 }, "Kaiten complete after a change it does not select")
            #expect(!FileManager.default.fileExists(atPath: local + "/other/c.txt"))

            // What a scoped round leaves to a whole one still arrives: a deletion, a new directory.
            try await Task.sleep(for: .seconds(1.5))
            let beforeDeletion = Self.lastRound(world)?["number"] as? Int ?? 0
            let logBeforeDeletion = run.log.count
            try FileManager.default.removeItem(atPath: world.peerData + "/docs/b.txt")
            try TestFiles.write(world.peerData + "/docs/new/d.txt", "d, in a new directory\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("the deletion and the new directory", log: run) {
                !FileManager.default.fileExists(atPath: local + "/docs/b.txt") && Self.content(local + "/docs/new/d.txt") == "d, in a new directory\n"
            }
            do {
                try await FullDeviceInteropTests.waitCompletion(st, of: world.me, { p, _ in p == 100 }, "Kaiten complete at the end")
            } catch {
                let need = try await st.get("/rest/db/remoteneed?device=\(world.me)&folder=\(Self.folder)")
                Issue.record("what the peer needs from Kaiten: \(need)\n\(run.log)")
                throw error
            }
            // The service's own deletion, directory and pull are no change from outside: their
            // echo is seen and set aside, and no round "after a change in" them follows.
            try await Self.waitFor("the new file's echo set aside", log: run) { echoSetAside("docs/new/d.txt", after: logBeforeDeletion) }
            let sinceDeletion = String(run.log.dropFirst(logBeforeDeletion))
            #expect(!sinceDeletion.contains("after a change in"), "\(sinceDeletion)")
            let rounds = (Self.lastRound(world)?["number"] as? Int ?? 0) - beforeDeletion
            #expect(rounds <= 2, "\(rounds) rounds for one update of the peer: \(sinceDeletion)")
            kill(run.process.processIdentifier, SIGTERM)
            try run.process.waitForExit(timeout: 10, what: "kaiten run after SIGTERM")
            #expect(run.process.terminationStatus == 0)
        }
    }
}
