import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Kaiten with Kaiten (issue 36, item 11): two homes, each the other's only peer, in the roles
/// they play with syncthing: one-shot verbs beside a running service, `run` on both sides,
/// deltas and restarts.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct KaitenToKaitenInteropTests {
    static let folder = "f"

    /// One Kaiten home listening on its own loopback port.
    struct Side {
        let name: String
        let home: String
        let data: String
        let port: Int
        let id: DeviceID

        init(_ name: String, in dir: TemporaryDirectory) throws {
            self.name = name
            home = dir.file("home-\(name)")
            data = dir.file("data-\(name)")
            port = try FreePort.next()
            let created = try KaitenCLI.run(["init", "--home", home, "--name", name, "--listen", "tcp://127.0.0.1:\(port)"])
            id = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
            try FileManager.default.createDirectory(atPath: data + "/.stfolder", withIntermediateDirectories: true)
        }

        @discardableResult
        func kaiten(_ args: String...) throws -> ProcessResult { try KaitenCLI.run(args + ["--home", home]) }

        /// `other` as its peer, and the folder shared with it.
        func meet(_ other: Side, type: String) throws {
            let peer = try kaiten("peer", "add", other.id.description, "--name", other.name, "--address", "tcp://127.0.0.1:\(other.port)")
            #expect(peer.status == 0, "\(peer.stderr)")
            let folder = try kaiten("folder", "add", KaitenToKaitenInteropTests.folder, "--path", data, "--type", type, "--share", other.id.description)
            #expect(folder.status == 0, "\(folder.stderr)")
        }

        func run(_ dir: TemporaryDirectory, _ extra: [String] = []) throws -> RunInteropTests.Running {
            try RunInteropTests.Running.start(home: home, logPath: dir.file("run-\(name).log"), extra)
        }
    }

    static func content(_ path: String) -> String? { RunInteropTests.content(path) }

    static func stop(_ run: RunInteropTests.Running) {
        run.stop()
    }

    /// A holds the folder under `kaiten run` (sendonly, its files selected); B, with one-shot
    /// verbs only, takes the index, pulls the selection byte for byte, then takes deltas: a
    /// new and an edited file, and again after A's service restarts. Neither side sees the
    /// other's index as partial.
    @Test func oneShotVerbsBesideARunningKaiten() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-k2k")
        defer { dir.remove() }
        let a = try Side("a", in: dir)
        let b = try Side("b", in: dir)
        try a.meet(b, type: "sendonly")
        try b.meet(a, type: "receiveonly")
        for n in 0..<30 { try TestFiles.write(a.data + "/docs/f\(n).txt", "file \(n) on a\n") }
        try TestFiles.random(a.data + "/docs/big.bin", size: 700_000)
        try TestFiles.write(a.data + "/other/x.txt", "selected on b last\n")
        let selectA = try a.kaiten("select", Self.folder, "docs", "other", "--force")
        #expect(selectA.status == 0, "\(selectA.stderr)")

        var runA = try a.run(dir, ["--apply", "all"])
        defer { Self.stop(runA) }
        try await RunInteropTests.waitFor("a announces its files", log: runA) { runA.log.contains("done send f/docs/big.bin") }

        let sync = try b.kaiten("index", "sync")
        #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
        #expect(sync.stdout.contains("full index"), "\(sync.stdout)")
        #expect(try b.kaiten("select", Self.folder, "docs").status == 0)
        let apply = try b.kaiten("apply", "--yes")
        #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
        for n in 0..<30 { #expect(Self.content(b.data + "/docs/f\(n).txt") == "file \(n) on a\n", "f\(n)") }
        #expect(ApplyInteropTests.sha(b.data + "/docs/big.bin") == ApplyInteropTests.sha(a.data + "/docs/big.bin"))
        #expect(!FileManager.default.fileExists(atPath: b.data + "/other/x.txt"))
        let inSync = try b.kaiten("plan", "--detailed-exitcode")
        #expect(inSync.status == 0, "\(inSync.stdout)\(inSync.stderr)")

        // A delta: a new file and an edit on a, sent by its service.
        try TestFiles.write(a.data + "/docs/new.txt", "new on a\n")
        try TestFiles.write(a.data + "/docs/f3.txt", "file 3, edited on a\n")
        try await RunInteropTests.waitFor("a sends its changes", log: runA) {
            runA.log.contains("send f/docs/new.txt") && runA.log.components(separatedBy: "send f/docs/f3.txt").count > 2
        }
        let delta = try b.kaiten("index", "sync")
        #expect(delta.status == 0 && !delta.stdout.contains("full index"), "\(delta.stdout)\(delta.stderr)")
        #expect(try b.kaiten("apply", "--yes").status == 0)
        #expect(Self.content(b.data + "/docs/new.txt") == "new on a\n")
        #expect(Self.content(b.data + "/docs/f3.txt") == "file 3, edited on a\n")

        // A's service restarts; the next exchange is a delta again, and complete.
        Self.stop(runA)
        runA = try a.run(dir, ["--apply", "all"])
        try await RunInteropTests.waitFor("a runs again", log: runA) { runA.log.contains("started") }
        try TestFiles.write(a.data + "/docs/after-restart.txt", "after the restart\n")
        try await RunInteropTests.waitFor("a sends after its restart", log: runA) { runA.log.contains("send f/docs/after-restart.txt") }
        let again = try b.kaiten("index", "sync")
        #expect(again.status == 0 && !again.stdout.contains("full index"), "\(again.stdout)\(again.stderr)")
        #expect(try b.kaiten("apply", "--yes").status == 0)
        #expect(Self.content(b.data + "/docs/after-restart.txt") == "after the restart\n")

        // Both have news for the other when they meet: b's selection changed (its next
        // announcement differs) while a added a file. Neither may wait for the other's index
        // before sending its own (each did, until the timeout).
        #expect(try b.kaiten("select", Self.folder, "other").status == 0)
        try TestFiles.write(a.data + "/docs/both-news.txt", "news on both sides\n")
        try await RunInteropTests.waitFor("a sends its news", log: runA) { runA.log.contains("send f/docs/both-news.txt") }
        let mutual = try b.kaiten("index", "sync", "--timeout", "30")
        #expect(mutual.status == 0, "\(mutual.stdout)\(mutual.stderr)")
        #expect(try b.kaiten("apply", "--yes").status == 0)
        #expect(Self.content(b.data + "/docs/both-news.txt") == "news on both sides\n")
        #expect(Self.content(b.data + "/other/x.txt") == "selected on b last\n")

        let statusB = try b.kaiten("status")
        #expect(!statusB.stderr.contains("partial") && !statusB.stdout.contains("partial"), "\(statusB.stdout)\(statusB.stderr)")
        #expect(!runA.log.contains("partial"), "\(runA.log)")
    }

    /// Both sides under `kaiten run`: what a adds and edits reaches b's selection without any
    /// verb, and b's service stays converged across a's restart.
    @Test func runOnBothSides() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-k2k-run")
        defer { dir.remove() }
        let a = try Side("a", in: dir)
        let b = try Side("b", in: dir)
        try a.meet(b, type: "sendreceive")
        try b.meet(a, type: "receiveonly")
        try TestFiles.write(a.data + "/docs/one.txt", "one\n")
        #expect(try a.kaiten("select", Self.folder, "docs", "--force").status == 0)
        #expect(try b.kaiten("select", Self.folder, "docs", "--force").status == 0)

        var runA = try a.run(dir, ["--apply", "all"])
        defer { Self.stop(runA) }
        let runB = try b.run(dir, ["--apply", "all"])
        defer { Self.stop(runB) }
        try await RunInteropTests.waitFor("one.txt on b", timeout: 90, log: runB) { Self.content(b.data + "/docs/one.txt") == "one\n" }

        try TestFiles.write(a.data + "/docs/two.txt", "two\n")
        try TestFiles.write(a.data + "/docs/one.txt", "one, edited\n")
        try await RunInteropTests.waitFor("a's changes on b", timeout: 90, log: runB) {
            Self.content(b.data + "/docs/two.txt") == "two\n" && Self.content(b.data + "/docs/one.txt") == "one, edited\n"
        }

        Self.stop(runA)
        runA = try a.run(dir, ["--apply", "all"])
        try TestFiles.write(a.data + "/docs/three.txt", "three\n")
        try await RunInteropTests.waitFor("a change after a's restart on b", timeout: 90, log: runB) {
            Self.content(b.data + "/docs/three.txt") == "three\n"
        }
        #expect(!runA.log.contains("partial") && !runB.log.contains("partial"), "\(runA.log)\n\(runB.log)")
        // The service's log says when a peer connects and goes (issue 36, item 22).
        #expect(runB.log.contains("a (\(a.id.shortDescription)): connected at 127.0.0.1:"), "\(runB.log)")
        #expect(runB.log.contains("a (\(a.id.shortDescription)): disconnected"), "\(runB.log)")
        let status = try b.kaiten("status")
        #expect(status.stdout.contains("a at 127.0.0.1:"), "\(status.stdout)")
        #expect(!status.stdout.contains("[IPv4]") && !status.stdout.contains("-1 pending"), "\(status.stdout)")
    }
}
