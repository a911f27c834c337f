import Foundation
import KaitenConfig
import KaitenMount
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten mount` against a real syncthing peer, used with the programs users point at a
/// folder: find, rsync, ffprobe, getfattr/setfattr, touch.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct MountInteropTests {
    static let folder = ApplyInteropTests.folder
    static let fuse = access("/dev/fuse", R_OK | W_OK) == 0 && ProcessRunner.which("fusermount3") != nil

    /// A running `kaiten mount`.
    struct Mounted {
        let process: Process
        let point: String
        let logPath: String

        static func start(home: String, at point: String, logPath: String, extra: [String] = []) async throws -> Mounted {
            try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: true)
            // What an earlier start wrote to the same log is not this one's.
            let earlier = FileManager.default.contents(atPath: logPath)?.count ?? 0
            let process = try KaitenCLI.start(["mount", "--home", home, MountInteropTests.folder, point] + extra, logPath: logPath)
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline {
                // Mounted by this process (not another mount left at the point) and answering.
                let said = String(decoding: (FileManager.default.contents(atPath: logPath) ?? Data()).dropFirst(earlier), as: UTF8.self)
                if said.contains("mounted at "), MountInteropTests.isMounted(point), let listing = opendir(point) {
                    closedir(listing)
                    return Mounted(process: process, point: point, logPath: logPath)
                }
                guard process.isRunning else { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            let ended = process.isRunning ? "still running" : "ended with \(process.terminationStatus) (\(process.terminationReason == .uncaughtSignal ? "signal" : "exit"))"
            kill(process.processIdentifier, SIGKILL)
            throw HarnessError("kaiten mount did not mount within 60 s, \(ended): \((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")")
        }

        func file(_ path: String) -> String { point + "/" + path }

        var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

        /// Ends it with `signal`, or with fusermount3 -u when nil; returns its exit status.
        func stop(signal: Int32? = SIGTERM) throws -> Int32 {
            if let signal {
                kill(process.processIdentifier, signal)
            } else {
                let unmounted = try ProcessRunner.run("/bin/fusermount3", ["-u", point])
                #expect(unmounted.status == 0, "\(unmounted.stderr)")
            }
            try process.waitForExit(timeout: 60, what: "kaiten mount")
            return process.terminationStatus
        }
    }

    static func isMounted(_ point: String) -> Bool { FuseMount.isMounted(point) }

    static func attribute(_ name: String, of path: String) throws -> String {
        let result = try ProcessRunner.run("/usr/bin/getfattr", ["--only-values", "-n", name, path])
        guard result.status == 0 else { throw HarnessError("getfattr \(name) \(path): \(result.stderr)") }
        return result.stdout
    }

    /// Every path below `root` with its type and size, as find prints them.
    static func tree(_ root: String) throws -> [String] {
        let found = try ProcessRunner.run("/usr/bin/find", [root, "-mindepth", "1", "-printf", "%P %y %s\n"])
        #expect(found.status == 0, "\(found.stderr)")
        return found.stdout.split(separator: "\n").map(String.init).map { line in
            // Directories' sizes are the file system's own business.
            line.contains(" d ") ? String(line.prefix { $0 != " " }) + " d" : line
        }.sorted()
    }

    @Test(.enabled(if: fuse, "no usable /dev/fuse or fusermount3 (scripts/test installs fuse3)"))
    func theGlobalTreeIsReadOnDemandAndCachedThroughTheMount() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-mount")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let peer = world.peerData
        try TestFiles.random(peer + "/big.bin", size: 5_000_000)
        try TestFiles.write(peer + "/docs/a.txt", "alpha\n")
        try TestFiles.write(peer + "/docs/sub/b.txt", "beta\n")
        try TestFiles.write(peer + "/keep.txt", "kept here\n")
        try TestFiles.write(peer + "/run.sh", "#!/bin/sh\necho hi\n")
        chmod(peer + "/run.sh", 0o755)
        try FileManager.default.createSymbolicLink(atPath: peer + "/link", withDestinationPath: "docs/a.txt")
        try FileManager.default.createDirectory(atPath: peer + "/films", withIntermediateDirectories: true)
        let made = try ProcessRunner.run(
            "/usr/bin/ffmpeg",
            ["-v", "error", "-f", "lavfi", "-i", "testsrc=duration=2:size=160x120:rate=10", "-c:v", "mpeg4", "-pix_fmt", "yuv420p", peer + "/films/clip.mp4"])
        #expect(made.status == 0, "\(made.stderr)")
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            // Receive-only here: the mount refuses changes (a folder that sends takes them: below).
            try await world.share(st, files: 6, type: "receiveonly")  // syncthing counts the symlink apart
            #expect(try world.kaiten("select", Self.folder, "keep.txt").status == 0)
            let applied = try world.kaiten("apply", "--yes")
            #expect(applied.status == 0, "\(applied.stderr)")

            let mounted = try await Mounted.start(home: world.home, at: dir.file("mnt"), logPath: dir.file("mount.log"))
            var stopped = false
            defer { if !stopped { kill(mounted.process.processIdentifier, SIGKILL); _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", "-z", mounted.point]) } }

            // The tree: every name the peer has, with its type and size.
            let expected = try Self.tree(peer).filter { !$0.hasPrefix(".stfolder") && !$0.hasPrefix(".stignore") }
            #expect(try Self.tree(mounted.point) == expected)

            // States before reading: nothing here but the pinned file.
            #expect(try Self.attribute("user.kaiten.state", of: mounted.file("docs/a.txt")) == "online-only")
            #expect(try Self.attribute("user.kaiten.state", of: mounted.file("keep.txt")) == "pinned")
            #expect(try Self.attribute("user.kaiten.holders", of: mounted.file("big.bin")) == st.deviceID.description)
            let head = try ProcessRunner.run("/usr/bin/head", ["-c", "131072", mounted.file("big.bin")])
            #expect(head.status == 0)
            #expect(try Self.attribute("user.kaiten.state", of: mounted.file("big.bin")) == "partial")

            // What programs read is the peer's bytes: rsync copies the whole tree, modes and links.
            let copy = dir.file("copy")
            let rsync = try ProcessRunner.run("/usr/bin/rsync", ["-a", mounted.point + "/", copy + "/"])
            #expect(rsync.status == 0, "\(rsync.stderr)")
            for name in ["big.bin", "docs/a.txt", "docs/sub/b.txt", "keep.txt", "run.sh", "films/clip.mp4"] {
                #expect(FileManager.default.contents(atPath: copy + "/" + name) == FileManager.default.contents(atPath: peer + "/" + name), "\(name)")
            }
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: copy + "/link") == "docs/a.txt")
            // cp -a and ls -lR see the same tree.
            let copied = try ProcessRunner.run("/bin/cp", ["-a", mounted.point, dir.file("cp")])
            #expect(copied.status == 0, "\(copied.stderr)")
            let diff = try ProcessRunner.run("/usr/bin/diff", ["-r", "--no-dereference", copy, dir.file("cp")])
            #expect(diff.status == 0, "\(diff.stdout)")
            let listing = try ProcessRunner.run("/bin/ls", ["-lR", "--time-style=+%s", mounted.point])
            #expect(listing.status == 0 && listing.stdout.contains("-rwxr-xr-x") && listing.stdout.contains("link -> docs/a.txt"), "\(listing.stdout)")
            #expect(StreamInteropTests.mode(copy + "/run.sh") == 0o755)
            #expect(try Self.attribute("user.kaiten.state", of: mounted.file("big.bin")) == "cached")
            let probe = try ProcessRunner.run(
                "/usr/bin/ffprobe", ["-v", "error", "-show_entries", "stream=codec_name,width", "-of", "csv=p=0", mounted.file("films/clip.mp4")])
            #expect(probe.status == 0 && probe.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "mpeg4,160", "\(probe.stdout) \(probe.stderr)")

            // kaiten ls and status say the same; free drops what is cached of a file.
            let listed = try JSONSerialization.jsonObject(with: Data(try world.kaiten("ls", Self.folder, "-R", "--json").stdout.utf8)) as? [[String: Any]]
            let states = Dictionary(uniqueKeysWithValues: (listed ?? []).map { ($0["path"] as? String ?? "", $0["state"] as? String ?? "-") })
            #expect(states["big.bin"] == "cached" && states["keep.txt"] == "pinned" && states["docs"] == "-", "\(states)")
            try await st.waitUntil("kaiten status shows the mount", timeout: 30) {
                let status = try JSONSerialization.jsonObject(with: Data(try world.kaiten("status", "--json").stdout.utf8)) as? [[String: Any]]
                let mount = (status?.first?["mounts"] as? [[String: Any]])?.first
                return mount?["directory"] as? String == mounted.point && (mount?["blocks_fetched"] as? Int ?? 0) > 0
            }
            let freed = try world.kaiten("free", Self.folder, "docs", "keep.txt")
            #expect(freed.status == 0 && freed.stdout.contains("of 2 file(s)") && freed.stderr.contains("keep.txt: pinned"), "\(freed.stdout)\(freed.stderr)")
            #expect(try Self.attribute("user.kaiten.state", of: mounted.file("docs/a.txt")) == "online-only")
            #expect(FileManager.default.contents(atPath: mounted.file("docs/a.txt")) == Data("alpha\n".utf8), "fetched again")

            // A receive-only folder takes no change through the mount.
            let touch = try ProcessRunner.run("/usr/bin/touch", [mounted.file("new.txt")])
            #expect(touch.status != 0 && touch.stderr.contains("Read-only file system"), "\(touch.stderr)")
            let overwrite = try ProcessRunner.run("/bin/sh", ["-c", "echo x > '\(mounted.file("docs/a.txt"))'"])
            #expect(overwrite.status != 0 && overwrite.stderr.contains("Read-only file system"), "\(overwrite.stderr)")

            // Pinning through the attribute edits the selection file; unpinning takes it back.
            let pin = try ProcessRunner.run("/usr/bin/setfattr", ["-n", "user.kaiten.pin", "-v", "1", mounted.file("docs")])
            #expect(pin.status == 0, "\(pin.stderr)")
            let selection = world.home + "/selections/\(Self.folder).txt"
            #expect(try String(contentsOfFile: selection, encoding: .utf8).split(separator: "\n").contains("docs"))
            #expect(try Self.attribute("user.kaiten.state", of: mounted.file("docs/sub/b.txt")) == "pinned")
            let unpinChild = try ProcessRunner.run("/usr/bin/setfattr", ["-n", "user.kaiten.pin", "-v", "0", mounted.file("docs/a.txt")])
            #expect(unpinChild.status != 0 && mounted.log.contains("kept through docs"), "\(unpinChild.stderr)")
            let unpin = try ProcessRunner.run("/usr/bin/setfattr", ["-n", "user.kaiten.pin", "-v", "0", mounted.file("docs")])
            #expect(unpin.status == 0, "\(unpin.stderr)")
            #expect(!(try String(contentsOfFile: selection, encoding: .utf8).split(separator: "\n").contains("docs")))
            let bad = try ProcessRunner.run("/usr/bin/setfattr", ["-n", "user.kaiten.pin", "-v", "yes", mounted.file("docs")])
            #expect(bad.status != 0)

            // The tree follows the peer's index while mounted.
            try TestFiles.write(peer + "/docs/new.txt", "added while mounted\n")
            try FileManager.default.removeItem(atPath: peer + "/docs/sub/b.txt")
            try await ApplyInteropTests.rescan(st)
            try await st.waitUntil("the mount shows the peer's change", timeout: 60) {
                FileManager.default.contents(atPath: mounted.file("docs/new.txt")) == Data("added while mounted\n".utf8)
                    && !FileManager.default.fileExists(atPath: mounted.file("docs/sub/b.txt"))
            }

            #expect(try mounted.stop(signal: SIGTERM) == 0, "\(mounted.log)")
            stopped = true
            #expect(!Self.isMounted(mounted.point))
            #expect(mounted.log.contains("unmounted:"), "\(mounted.log)")
        }

        // The peer is gone: what was read is still readable, from the cache, verified.
        let again = try await Mounted.start(home: world.home, at: dir.file("mnt"), logPath: dir.file("mount2.log"))
        defer { if again.process.isRunning { kill(again.process.processIdentifier, SIGKILL); _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", "-z", again.point]) } }
        #expect(FileManager.default.contents(atPath: again.file("big.bin")) == FileManager.default.contents(atPath: peer + "/big.bin"))
        #expect(try Self.attribute("user.kaiten.holders", of: again.file("big.bin")) == "")
        // A damaged cache block is not served: the read fails, naming why, and the block goes.
        let blocks = dir.file("kaiten/cache/blocks")
        let clipBytes = try #require(FileManager.default.contents(atPath: peer + "/films/clip.mp4"))
        var damagedOne = false
        for shard in try FileManager.default.contentsOfDirectory(atPath: blocks) {
            for name in try FileManager.default.contentsOfDirectory(atPath: blocks + "/" + shard) {
                let path = blocks + "/" + shard + "/" + name
                guard var data = FileManager.default.contents(atPath: path), data == clipBytes.prefix(data.count), data.count == clipBytes.count else { continue }
                data[data.count / 2] ^= 0x40
                try data.write(to: URL(fileURLWithPath: path))
                damagedOne = true
            }
        }
        #expect(damagedOne, "the clip is one block in the cache")
        let damaged = try ProcessRunner.run("/bin/cat", [again.file("films/clip.mp4")])
        #expect(damaged.status != 0 && damaged.stdout.isEmpty, "no byte of a damaged block is read")
        #expect(again.log.contains("films/clip.mp4"), "\(again.log)")
        #expect(try again.stop(signal: nil) == 0, "fusermount3 -u ends it with 0: \(again.log)")
        #expect(!Self.isMounted(again.point))
    }

    /// In a folder that sends, changes made through the mount are changes of the folder: a new
    /// file, an edit of a file that was online only (brought here first), a rename and a delete
    /// reach the peer at the next apply.
    @Test(.enabled(if: fuse, "no usable /dev/fuse or fusermount3 (scripts/test installs fuse3)"))
    func changesThroughTheMountReachThePeer() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-mount-write")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let peer = world.peerData
        try TestFiles.write(peer + "/docs/a.txt", "alpha\n")
        try TestFiles.write(peer + "/docs/old.txt", "old name\n")
        try TestFiles.write(peer + "/gone.txt", "to be deleted\n")
        try TestFiles.random(peer + "/remote.bin", size: 300_000)
        let remote = try #require(FileManager.default.contents(atPath: peer + "/remote.bin"))
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 4)
            #expect(try world.kaiten("select", Self.folder, "docs/old.txt", "gone.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            let mounted = try await Mounted.start(home: world.home, at: dir.file("mnt"), logPath: dir.file("mount.log"))
            defer { if mounted.process.isRunning { kill(mounted.process.processIdentifier, SIGKILL); _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", "-z", mounted.point]) } }

            let made = try ProcessRunner.run("/bin/sh", ["-c", "mkdir -p '\(mounted.file("notes/2025"))' && printf 'made here\\n' > '\(mounted.file("notes/2025/new.txt"))'"])
            #expect(made.status == 0, "\(made.stderr)")
            let appended = try ProcessRunner.run("/bin/sh", ["-c", "printf 'appended' >> '\(mounted.file("remote.bin"))'"])
            #expect(appended.status == 0, "\(appended.stderr)")
            let moved = try ProcessRunner.run("/bin/mv", [mounted.file("docs/old.txt"), mounted.file("docs/new-name.txt")])
            #expect(moved.status == 0, "\(moved.stderr)")
            let removed = try ProcessRunner.run("/bin/rm", [mounted.file("gone.txt")])
            #expect(removed.status == 0, "\(removed.stderr)")
            // A file that is only on the peers is not deleted everywhere from here.
            let refused = try ProcessRunner.run("/bin/rm", [mounted.file("docs/a.txt")])
            #expect(refused.status != 0 && mounted.log.contains("pin it"), "\(refused.stderr) \(mounted.log)")
            // What the mount shows is the folder: the same bytes on disk.
            #expect(FileManager.default.contents(atPath: mounted.file("remote.bin")) == remote + Data("appended".utf8))
            #expect(FileManager.default.contents(atPath: world.local + "/remote.bin") == remote + Data("appended".utf8))
            #expect(FileManager.default.contents(atPath: world.local + "/notes/2025/new.txt") == Data("made here\n".utf8))
            #expect(!FileManager.default.fileExists(atPath: world.local + "/gone.txt"))
            #expect(try Self.attribute("user.kaiten.state", of: mounted.file("notes/2025/new.txt")) == "local-only")
            // The verbs that need the peers work beside the mount: through its control socket.
            let catBeside = try world.kaiten("cat", Self.folder, "docs/a.txt")
            #expect(catBeside.status == 0 && catBeside.stdout == "alpha\n", "\(catBeside.stderr)")
            #expect(try mounted.stop() == 0, "\(mounted.log)")
            let readOnly = try await Mounted.start(home: world.home, at: dir.file("mnt"), logPath: dir.file("mount-ro.log"), extra: ["--read-only"])
            let refusedWrite = try ProcessRunner.run("/usr/bin/touch", [readOnly.file("docs/another.txt")])
            #expect(refusedWrite.status != 0 && refusedWrite.stderr.contains("Read-only file system"), "\(refusedWrite.stderr)")
            #expect(try readOnly.stop() == 0)

            let applied = try world.kaiten("apply", "--yes")
            #expect(applied.status == 0, "\(applied.stdout) \(applied.stderr)")
            #expect(applied.stdout.contains(" 0 conflicts open"), "\(applied.stdout)")
            try await st.waitUntil("the peer has the changes", timeout: 90) {
                FileManager.default.contents(atPath: peer + "/notes/2025/new.txt") == Data("made here\n".utf8)
                    && FileManager.default.contents(atPath: peer + "/remote.bin") == remote + Data("appended".utf8)
                    && FileManager.default.contents(atPath: peer + "/docs/new-name.txt") == Data("old name\n".utf8)
                    && !FileManager.default.fileExists(atPath: peer + "/docs/old.txt")
                    && !FileManager.default.fileExists(atPath: peer + "/gone.txt")
            }
            #expect(FileManager.default.contents(atPath: peer + "/docs/a.txt") == Data("alpha\n".utf8))
        }
    }

    /// How the mount fails and holds up: ffprobe reads only what it needs of a 61 MB film (its 5 MB probe and our read-ahead); 50 readers at once get
    /// the peer's bytes; a frozen peer fails a read with EIO within --read-timeout while cached
    /// files still read; a mount killed with SIGKILL is cleared by the next start.
    @Test(.enabled(if: fuse, "no usable /dev/fuse or fusermount3 (scripts/test installs fuse3)"))
    func failuresAreBoundedAndManyReadersAgree() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-mount-fail")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let peer = world.peerData
        for i in 0..<10 { try TestFiles.random(peer + "/set/\(i).bin", size: 1_000_000 + i * 4096) }
        try TestFiles.random(peer + "/big.bin", size: 8_000_000)
        let made = try ProcessRunner.run(
            "/usr/bin/ffmpeg",
            ["-v", "error", "-f", "lavfi", "-i", "testsrc=duration=5:size=640x480:rate=20", "-c:v", "rawvideo", "-pix_fmt", "uyvy422", "-movflags", "+faststart",
             peer + "/film.mov"])
        #expect(made.status == 0, "\(made.stderr)")
        // Uncompressed (nothing to encode: the suite's other tests keep their CPU), the index first.
        let filmSize = (try FileManager.default.attributesOfItem(atPath: peer + "/film.mov")[.size] as? Int) ?? 0
        #expect(filmSize > 4_000_000, "\(filmSize)")
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 12)
            let point = dir.file("mnt")
            let mounted = try await Mounted.start(home: world.home, at: point, logPath: dir.file("mount.log"), extra: ["--read-timeout", "3"])
            var current = mounted
            defer { if current.process.isRunning { kill(current.process.processIdentifier, SIGKILL) }; _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", "-z", point]) }

            // ffprobe reads the header it needs, not the film.
            let before = try await ApplyInteropTests.bytesSent(st, to: world.me)
            let probe = try ProcessRunner.run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", mounted.file("film.mov")])
            #expect(probe.status == 0 && probe.stdout.hasPrefix("5.0"), "\(probe.stdout) \(probe.stderr)")
            let sent = try await ApplyInteropTests.bytesSent(st, to: world.me) - before
            #expect(sent < filmSize / 4, "the peer sent \(sent) bytes of a \(filmSize)-byte film for ffprobe")

            // 50 readers at once, five on each file: every one reads the peer's bytes.
            var readers: [Process] = []
            for i in 0..<50 {
                let reader = Process()
                reader.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
                reader.arguments = [mounted.file("set/\(i % 10).bin")]
                FileManager.default.createFile(atPath: dir.file("sum-\(i)"), contents: nil)
                reader.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: dir.file("sum-\(i)")))
                try reader.runAlone()
                readers.append(reader)
            }
            for reader in readers { try reader.waitForExit(timeout: 120, what: "sha256sum") }
            for i in 0..<50 {
                let sum = (try? String(contentsOfFile: dir.file("sum-\(i)"), encoding: .utf8))?.prefix(64)
                #expect(sum.map(String.init) == ApplyInteropTests.sha(peer + "/set/\(i % 10).bin"), "reader \(i)")
            }

            // The peer stops answering: an uncached read fails with EIO within the timeout, a
            // cached file still reads.
            st.freeze(true)
            let started = ContinuousClock.now
            let frozen = try ProcessRunner.run("/usr/bin/timeout", ["60", "/bin/cat", mounted.file("big.bin")])
            let waited = ContinuousClock.now - started
            let cached = FileManager.default.contents(atPath: mounted.file("set/3.bin"))
            st.freeze(false)
            #expect(frozen.status == 1 && frozen.stderr.contains("Input/output error"), "\(frozen.status) \(frozen.stderr)")
            #expect(waited < .seconds(20), "EIO after \(waited), --read-timeout 3")
            #expect(mounted.log.contains("big.bin") && mounted.log.contains("answered within"), "\(mounted.log)")
            #expect(cached == FileManager.default.contents(atPath: peer + "/set/3.bin"))

            // Killed with SIGKILL: the mount point is left dead; the next start clears it and serves.
            kill(mounted.process.processIdentifier, SIGKILL)
            try mounted.process.waitForExit(timeout: 30, what: "kaiten mount")
            #expect(Self.isMounted(point), "a killed FUSE process leaves its mount behind")
            current = try await Mounted.start(home: world.home, at: point, logPath: dir.file("mount2.log"))
            #expect(current.log.contains("was cleared"), "\(current.log)")
            #expect(FileManager.default.contents(atPath: current.file("big.bin")) == FileManager.default.contents(atPath: peer + "/big.bin"))
            #expect(try current.stop() == 0)
        }
    }

    /// As users run it: not root. Run as `nobody` (setpriv) where /dev/fuse is usable by every
    /// user, as Debian's udev rule leaves it (a machine whose /dev/fuse is root's only gets that
    /// mode for the test, and back after): the mount is made, read, and ended by SIGTERM through
    /// the setuid fusermount3, leaving nothing mounted.
    @Test(.enabled(if: fuse && getuid() == 0, "the unprivileged mount is run as nobody from a root test run (CI); run as root"))
    func anOrdinaryUserMounts() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-mount-user")
        defer { dir.remove() }
        var device = stat()
        stat("/dev/fuse", &device)
        let mode = device.st_mode & 0o777
        if mode & 0o006 != 0o006 { chmod("/dev/fuse", 0o666) }
        defer { if mode & 0o006 != 0o006 { chmod("/dev/fuse", mode) } }
        let nobody = UnprivilegedInteropTests.nobody
        chmod(dir.path, 0o755)
        let user = dir.file("user")
        try FileManager.default.createDirectory(atPath: user + "/mnt", withIntermediateDirectories: true)
        #expect(chown(user, nobody, nobody) == 0 && chown(user + "/mnt", nobody, nobody) == 0)
        let home = user + "/kaiten"
        let run = { (args: [String]) throws -> ProcessResult in try UnprivilegedInteropTests.kaiten(args + ["--home", home], home: user) }
        let created = try run(["init", "--name", "k", "--listen", "tcp://127.0.0.1:0"])
        #expect(created.status == 0, "\(created.stderr)")
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let peerData = dir.file("peer")
        try TestFiles.write(peerData + "/docs/a.txt", "read through a user's mount\n")
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await st.addDevice(me, name: "k")
            try await st.addFolder(id: Self.folder, path: peerData, devices: [me])
            try await ApplyInteropTests.waitScanned(st, files: 1)
            #expect(try run(["peer", "add", st.deviceID.description, "--name", "a", "--address", st.address]).status == 0)
            #expect(try run(["folder", "add", Self.folder, "--path", user + "/local", "--share", st.deviceID.description]).status == 0)
            #expect(try run(["index", "sync"]).status == 0)

            let point = user + "/mnt"
            let mount = Process()
            mount.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            mount.arguments = ["--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups", "--", KaitenCLI.executable, "mount", Self.folder, point, "--home", home]
            mount.environment = ["PATH": "/usr/bin:/bin", "HOME": user]
            FileManager.default.createFile(atPath: dir.file("mount.log"), contents: nil)
            let log = try FileHandle(forWritingTo: URL(fileURLWithPath: dir.file("mount.log")))
            mount.standardOutput = log
            mount.standardError = log
            try mount.runAlone()
            defer { if mount.isRunning { kill(mount.processIdentifier, SIGKILL); _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", "-z", point]) } }
            try await st.waitUntil("nobody's mount is made", timeout: 60) { Self.isMounted(point) || !mount.isRunning }
            let mountLog = { (try? String(contentsOfFile: dir.file("mount.log"), encoding: .utf8)) ?? "" }
            #expect(Self.isMounted(point), "\(mountLog())")
            let read = try ProcessRunner.run(
                "/usr/bin/setpriv", ["--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups", "--", "/bin/cat", point + "/docs/a.txt"])
            #expect(read.status == 0 && read.stdout == "read through a user's mount\n", "\(read.stderr) \(mountLog())")
            kill(mount.processIdentifier, SIGTERM)
            try mount.waitForExit(timeout: 60, what: "kaiten mount as nobody")
            #expect(mount.terminationStatus == 0, "\(mountLog())")
            #expect(!Self.isMounted(point))
        }
    }

    /// `kaiten run --mount FOLDER=DIR`: the service hosts the mount on its connections, and the
    /// mount ends with it.
    @Test(.enabled(if: fuse, "no usable /dev/fuse or fusermount3 (scripts/test installs fuse3)"))
    func theServiceHostsAMount() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-run-mount")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        try TestFiles.random(world.peerData + "/films/movie.mkv", size: 2_000_000)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            let point = dir.file("mnt")
            try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: true)
            let run = try KaitenCLI.start(["run", "--home", world.home, "--apply", "none", "--mount", "\(Self.folder)=\(point)"], logPath: dir.file("run.log"))
            defer { if run.isRunning { kill(run.processIdentifier, SIGKILL); _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", "-z", point]) } }
            try await st.waitUntil("the service mounted the folder", timeout: 60) { Self.isMounted(point) }
            #expect(FileManager.default.contents(atPath: point + "/films/movie.mkv") == FileManager.default.contents(atPath: world.peerData + "/films/movie.mkv"))
            kill(run.processIdentifier, SIGTERM)
            try run.waitForExit(timeout: 60, what: "kaiten run")
            let log = (try? String(contentsOfFile: dir.file("run.log"), encoding: .utf8)) ?? ""
            #expect(run.terminationStatus == 0, "\(log)")
            #expect(!Self.isMounted(point))
            #expect(log.contains("unmounted \(point)"), "\(log)")
        }
    }

    /// A Kaiten peer serves the mount as syncthing does: the tree is its folder's, every byte
    /// its own, and it is the holder the mount names.
    @Test(.enabled(if: fuse, "no usable /dev/fuse or fusermount3 (scripts/test installs fuse3)"))
    func aKaitenPeerServesTheMount() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-mount-k2k")
        defer { dir.remove() }
        let a = try KaitenToKaitenInteropTests.Side("a", in: dir)
        let b = try KaitenToKaitenInteropTests.Side("b", in: dir)
        try a.meet(b, type: "sendonly")
        try b.meet(a, type: "receiveonly")
        try TestFiles.random(a.data + "/films/movie.mkv", size: 3_000_000)
        try TestFiles.write(a.data + "/docs/note.txt", "from a kaiten\n")
        #expect(try a.kaiten("select", Self.folder, "films", "docs", "--force").status == 0)
        let runA = try a.run(dir, ["--apply", "all"])
        defer { runA.stop() }
        try await RunInteropTests.waitFor("a announces its files", log: runA) {
            runA.log.contains("done send f/films/movie.mkv") && runA.log.contains("done send f/docs/note.txt")
        }
        let sync = try b.kaiten("index", "sync")
        #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")

        let mounted = try await Mounted.start(home: b.home, at: dir.file("mnt"), logPath: dir.file("mount.log"))
        defer { if mounted.process.isRunning { kill(mounted.process.processIdentifier, SIGKILL); _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", "-z", mounted.point]) } }
        // Syncthing's own names (the marker, the .stignore Kaiten writes) are not shown.
        let shown = try Self.tree(mounted.point)
        let held = try Self.tree(a.data).filter { !$0.hasPrefix(".stfolder") && !$0.hasPrefix(".stignore") }
        #expect(shown == held, "\(shown) against \(held)")
        #expect(FileManager.default.contents(atPath: mounted.file("films/movie.mkv")) == FileManager.default.contents(atPath: a.data + "/films/movie.mkv"))
        #expect(FileManager.default.contents(atPath: mounted.file("docs/note.txt")) == Data("from a kaiten\n".utf8))
        #expect(try Self.attribute("user.kaiten.holders", of: mounted.file("films/movie.mkv")) == a.id.description)
        #expect(try mounted.stop(signal: SIGINT) == 0, "\(mounted.log)")
        #expect(!Self.isMounted(mounted.point))
    }

    /// Beside a running service the mount reads through it (it holds the peers' connections).
    @Test(.enabled(if: fuse, "no usable /dev/fuse or fusermount3 (scripts/test installs fuse3)"))
    func aMountBesideARunningServiceReadsThroughIt() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-mount-run")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        try TestFiles.random(world.peerData + "/films/movie.mkv", size: 3_000_000)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            let server = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("run.log"), underRun: true)
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            let mounted = try await Mounted.start(home: world.home, at: dir.file("mnt"), logPath: dir.file("mount.log"), extra: ["--cache-budget", "1M"])
            defer { if mounted.process.isRunning { kill(mounted.process.processIdentifier, SIGKILL); _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", "-z", mounted.point]) } }
            #expect(FileManager.default.contents(atPath: mounted.file("films/movie.mkv")) == FileManager.default.contents(atPath: world.peerData + "/films/movie.mkv"))
            // The holders are the service's connected peers: none once the peer is gone.
            #expect(try Self.attribute("user.kaiten.holders", of: mounted.file("films/movie.mkv")) == st.deviceID.description)
            st.stop()
            try await st.waitUntil("the service saw the peer go", timeout: 60) {
                (try? Self.attribute("user.kaiten.holders", of: mounted.file("films/movie.mkv"))) == ""
            }
            #expect(try mounted.stop(signal: SIGINT) == 0, "\(mounted.log)")
            // Within its budget: 3 MB read through a 1 MiB cache.
            #expect(mounted.log.contains("eviction(s)") && !mounted.log.contains(" 0 eviction(s)"), "\(mounted.log)")
            var bytes = 0
            let blocks = dir.file("kaiten/cache/blocks")
            for shard in (try? FileManager.default.contentsOfDirectory(atPath: blocks)) ?? [] {
                for name in (try? FileManager.default.contentsOfDirectory(atPath: blocks + "/" + shard)) ?? [] {
                    bytes += (FileManager.default.contents(atPath: blocks + "/" + shard + "/" + name)?.count ?? 0)
                }
            }
            #expect(bytes > 0 && bytes <= 1 << 20, "\(bytes) bytes in the cache")
            try server.stop()
        }
    }

    /// The disk under the cache fills up: every read goes on, byte for byte, from the peer; the
    /// log says once that nothing more is kept; no partial block is left behind; `kaiten status`
    /// counts the blocks the disk refused.
    @Test(.enabled(if: fuse && getuid() == 0, "a full disk is a 1 MiB tmpfs mounted under the cache: run as root (CI does)"))
    func aFullDiskUnderTheCacheFailsNoRead() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-mount-full")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        try TestFiles.random(world.peerData + "/films/movie.mkv", size: 6_000_000)
        let original = FileManager.default.contents(atPath: world.peerData + "/films/movie.mkv")
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            let blocks = world.home + "/cache/blocks"
            try FileManager.default.createDirectory(atPath: blocks, withIntermediateDirectories: true)
            let small = try ProcessRunner.run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m,mode=0700", "kaiten-test-full", blocks])
            try #require(small.status == 0, "\(small.stderr)")
            defer { _ = try? ProcessRunner.run("/bin/umount", ["-l", blocks]) }
            // A budget far over what the disk holds: the disk, not the budget, says no.
            let mounted = try await Mounted.start(home: world.home, at: dir.file("mnt"), logPath: dir.file("mount.log"), extra: ["--cache-budget", "1G"])
            defer { if mounted.process.isRunning { kill(mounted.process.processIdentifier, SIGKILL); _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", "-z", mounted.point]) } }
            #expect(FileManager.default.contents(atPath: mounted.file("films/movie.mkv")) == original)
            // Read again: what the disk did not keep comes from the peer again, the same bytes.
            let again = try ProcessRunner.run("/bin/sh", ["-c", "sha256sum < '\(mounted.file("films/movie.mkv"))'"])
            let expected = try ProcessRunner.run("/bin/sh", ["-c", "sha256sum < '\(world.peerData)/films/movie.mkv'"])
            #expect(again.status == 0 && again.stdout == expected.stdout, "\(again.stderr)")
            try await st.waitUntil("kaiten status shows the refused blocks", timeout: 10) {
                let status = try? world.kaiten("status", "--json")
                guard let status, status.status == 0,
                    let match = status.stdout.range(of: #""cache_unkept" *: *[0-9]+"#, options: .regularExpression)
                else { return false }
                return Int(status.stdout[match].split(separator: ":").last!.trimmingCharacters(in: .whitespaces)) ?? 0 > 0
            }
            let left = try FileManager.default.subpathsOfDirectory(atPath: blocks).filter { ($0 as NSString).lastPathComponent.hasPrefix(".tmp-") }
            #expect(left.isEmpty, "partial blocks left: \(left)")
            #expect(try mounted.stop(signal: SIGINT) == 0, "\(mounted.log)")
            let said = mounted.log.components(separatedBy: "cannot keep blocks (No space left on device)").count - 1
            #expect(said == 1, "the refusal said once, not per block: \(mounted.log)")
            #expect(mounted.log.contains("not kept (disk refused)") && !mounted.log.contains(" 0 not kept"), "\(mounted.log)")
        }
    }
}
