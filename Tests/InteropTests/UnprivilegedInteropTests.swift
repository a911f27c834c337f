import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Kaiten as the users it is for run it: not root (issue 19, item 3). When the suite itself
/// runs as root (CI does), each `kaiten` runs as `nobody` through setpriv, so a socket option
/// or a path only root may touch fails here as it would for them.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(5)))
struct UnprivilegedInteropTests {
    static let nobody: UInt32 = 65534

    /// Runs `kaiten ARGS` as an unprivileged user.
    static func kaiten(_ arguments: [String], home: String) throws -> ProcessResult {
        let environment = ["PATH": "/usr/bin:/bin", "HOME": home]
        guard getuid() == 0 else { return try KaitenCLI.run(arguments, environment: environment) }
        return try ProcessRunner.run(
            "/usr/bin/setpriv",
            ["--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups", "--", KaitenCLI.executable] + arguments,
            environment: environment)
    }

    /// init, peer add, folder add, peer check, index sync, select, apply and cat, each as an
    /// unprivileged user against a real syncthing: every verb that opens a connection works,
    /// and what apply writes belongs to that user.
    @Test func everyVerbThatConnectsWorksWithoutRoot() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-nonroot")
        defer { dir.remove() }
        let user = dir.file("user")
        try FileManager.default.createDirectory(atPath: user, withIntermediateDirectories: true)
        if getuid() == 0 {
            chmod(dir.path, 0o755)
            #expect(chown(user, Self.nobody, Self.nobody) == 0)
        }
        let whoami = try ProcessRunner.run(
            getuid() == 0 ? "/usr/bin/setpriv" : "/usr/bin/id",
            getuid() == 0 ? ["--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups", "--", "/usr/bin/id", "-u"] : ["-u"])
        #expect(whoami.stdout.trimmingCharacters(in: .whitespacesAndNewlines) != "0", "the commands under test must not run as root")

        let home = user + "/kaiten"
        let local = user + "/local"
        let run = { (args: [String]) throws -> ProcessResult in try Self.kaiten(args + ["--home", home], home: user) }
        let created = try run(["init", "--name", "k", "--listen", "tcp://127.0.0.1:0"])
        #expect(created.status == 0, "\(created.stderr)")
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))

        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        let peerData = dir.file("peer")
        try TestFiles.write(peerData + "/docs/a.txt", "pulled by nobody\n")
        try TestFiles.write(peerData + "/docs/b.txt", "read on demand by nobody\n")
        try TestFiles.write(peerData + "/ro/gone.txt", "in a read-only directory, deselected later\n")
        chmod(peerData + "/ro", 0o555)
        try await withSyncthing(st) { st in
            try await st.addDevice(me, name: "k")
            try await st.addFolder(id: "f", path: peerData, devices: [me])
            try await ApplyInteropTests.waitScanned(st, files: 3)
            #expect(try run(["peer", "add", st.deviceID.description, "--name", "a", "--address", st.address]).status == 0)
            let added = try run(["folder", "add", "f", "--path", local, "--share", st.deviceID.description])
            #expect(added.status == 0, "\(added.stderr)")

            let check = try run(["peer", "check"])
            #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
            #expect(!check.stderr.contains("Permission denied"), "\(check.stderr)")
            let sync = try run(["index", "sync"])
            #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
            #expect(try run(["select", "f", "docs/a.txt"]).status == 0)
            let apply = try run(["apply", "--yes"])
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            #expect((try? String(contentsOfFile: local + "/docs/a.txt", encoding: .utf8)) == "pulled by nobody\n")
            var info = stat()
            #expect(lstat(local + "/docs/a.txt", &info) == 0)
            #expect(info.st_uid == getuid() || info.st_uid == Self.nobody)
            #expect(info.st_uid != 0 || getuid() != 0, "written by root")
            let cat = try run(["cat", "f", "docs/b.txt"])
            #expect(cat.status == 0, "\(cat.stderr)")
            #expect(cat.stdout == "read on demand by nobody\n")

            // The range server, run as the same user: serve, a signed URL, a range request.
            let port = try FreePort.next()
            let server = Process()
            if getuid() == 0 {
                server.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
                server.arguments = ["--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups", "--", KaitenCLI.executable]
            } else {
                server.executableURL = URL(fileURLWithPath: KaitenCLI.executable)
                server.arguments = []
            }
            server.arguments! += ["serve", "--home", home, "--listen", "127.0.0.1:\(port)"]
            server.environment = ["PATH": "/usr/bin:/bin", "HOME": user]
            server.standardOutput = FileHandle.nullDevice
            server.standardError = FileHandle.nullDevice
            try server.runAlone()
            defer { if server.isRunning { kill(server.processIdentifier, SIGKILL); try? server.waitForExit(timeout: 30, what: "kaiten serve") } }
            try await st.waitUntil("kaiten serve is up as an unprivileged user", timeout: 60) {
                FileManager.default.fileExists(atPath: home + "/state/serve.json")
            }
            let url = try run(["url", "f", "docs/b.txt"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(url.hasPrefix("http://127.0.0.1:\(port)/"), "\(url)")
            let ranged = try StreamInteropTests.curl(url, range: "0-3")
            #expect(ranged.status == 206, "\(ranged)")
            #expect(ranged.body == Data("read".utf8))
            kill(server.processIdentifier, SIGTERM)
            try server.waitForExit(timeout: 60, what: "kaiten serve")

            // A read-only directory: made 0555 after its file is in; deselected, the file goes
            // (the directory made writable for the moment, as syncthing does), then the directory.
            #expect(try run(["select", "f", "ro"]).status == 0)
            let ro = try run(["apply", "--yes"])
            #expect(ro.status == 0, "\(ro.stdout)\(ro.stderr)")
            #expect(FileManager.default.fileExists(atPath: local + "/ro/gone.txt"))
            #expect(lstat(local + "/ro", &info) == 0 && info.st_mode & 0o777 == 0o555)
            #expect(try run(["deselect", "f", "ro"]).status == 0)
            let gone = try run(["apply", "--yes", "--max-delete", "100%"])
            #expect(gone.status == 0, "\(gone.stdout)\(gone.stderr)")
            #expect(!FileManager.default.fileExists(atPath: local + "/ro/gone.txt"))
            #expect(!FileManager.default.fileExists(atPath: local + "/ro"))

            // Issue 10, item 11: a folder this user cannot write is refused before anything
            // changes (exit 1, said in words), not reported as a partial apply.
            if getuid() == 0 {
                #expect(try run(["select", "f", "docs/b.txt"]).status == 0)
                chmod(local, 0o555)
                let readOnly = try run(["apply", "--yes"])
                chmod(local, 0o755)
                #expect(readOnly.status == 1, "\(readOnly.stdout)\(readOnly.stderr)")
                #expect(readOnly.stderr.contains("is not writable"), "\(readOnly.stderr)")
                #expect(!FileManager.default.fileExists(atPath: local + "/docs/b.txt"))
            }

            // Issue 10, item 12: a folder the peer does not share: the plan says so and what to
            // do on the peer, instead of suggesting the sync that just failed.
            #expect(try run(["folder", "add", "nots", "--path", user + "/nots", "--share", st.deviceID.description]).status == 0)
            let notShared = try run(["plan", "nots"])
            #expect(notShared.stdout.contains("does not share folder \"nots\""), "\(notShared.stdout)")
            #expect(!notShared.stdout.contains("run `kaiten index sync nots`"), "\(notShared.stdout)")
        }
    }

    /// A home its user cannot write (issue 36, item 25): the verbs that only read work — `plan
    /// --offline` (its scan cache not saved, said), `conflicts`, `ls`, `status` — and `select`
    /// fails without claiming it selected anything.
    @Test func aReadOnlyHomeServesTheVerbsThatOnlyRead() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-rohome")
        defer {
            _ = try? ProcessRunner.run("/bin/chmod", ["-R", "u+w", dir.path])
            dir.remove()
        }
        let world = try ApplyInteropTests.World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/a.txt", "a\n")
        try TestFiles.write(world.peerData + "/docs/b.txt", "b\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            #expect(try world.kaiten("select", "f", "docs/a.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
        }
        // A new local file: the next scan changes the cache, which cannot be saved.
        try TestFiles.write(world.local + "/docs/new.txt", "made here\n")
        if getuid() == 0 {
            for path in [world.home, world.local] { #expect(try ProcessRunner.run("/bin/chown", ["-R", "\(Self.nobody):\(Self.nobody)", path]).status == 0) }
            chmod(dir.path, 0o755)
        }
        #expect(try ProcessRunner.run("/bin/chmod", ["-R", "a-w", world.home]).status == 0)
        let run = { (args: [String]) throws -> ProcessResult in try Self.kaiten(args + ["--home", world.home], home: dir.path) }

        let plan = try run(["plan", "--offline"])
        #expect(plan.status == 0 || plan.status == 2, "\(plan.stdout)\(plan.stderr)")
        #expect(plan.stdout.contains("docs/new.txt"), "\(plan.stdout)")
        #expect(plan.stderr.contains("scan cache was not saved"), "\(plan.stderr)")
        let conflicts = try run(["conflicts"])
        #expect(conflicts.status == 0, "\(conflicts.stdout)\(conflicts.stderr)")
        #expect(try run(["ls", "f"]).status == 0)
        #expect(try run(["status"]).status == 0)
        let selectionBefore = try String(contentsOfFile: world.home + "/selections/f.txt", encoding: .utf8)
        let select = try run(["select", "f", "docs/b.txt"])
        #expect(select.status != 0, "\(select.stdout)")
        #expect(!select.stdout.contains("selected"), "claimed a selection it could not save: \(select.stdout)")
        #expect(try String(contentsOfFile: world.home + "/selections/f.txt", encoding: .utf8) == selectionBefore)
    }
}
