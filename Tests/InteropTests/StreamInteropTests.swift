import Crypto
import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenStream
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// On demand against a real syncthing peer: cat, get, and the signed range server.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct StreamInteropTests {
    static let folder = "media"

    struct Fetched {
        let status: Int
        let headers: [String: String]
        let body: Data
    }

    /// One HTTP request with curl (the tests install it with the rest).
    /// Opens a TCP connection to 127.0.0.1:`port`, sends nothing, and returns how long the
    /// server took to close it (nil: still open after `giveUpAfter` seconds).
    static func secondsUntilClosed(port: Int, giveUpAfter: Int) throws -> Double? {
        let fd = LoopbackSocket.connect(port: port)
        guard fd >= 0 else { throw HarnessError("connect: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: giveUpAfter, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let start = ContinuousClock.now
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, 0)
        guard n == 0 || (n < 0 && errno == ECONNRESET) else { return nil }
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    static func curl(_ url: String, range: String? = nil, head: Bool = false, extra: [String] = []) throws -> Fetched {
        let dir = try TemporaryDirectory(prefix: "kaiten-curl")
        defer { dir.remove() }
        var args = ["-s", "-g", "-D", dir.file("h"), "-o", dir.file("b"), "-w", "%{http_code}"]
        if let range { args += ["-r", range] }
        if head { args += ["-I"] }
        args += extra + [url]
        let result = try ProcessRunner.run(ProcessRunner.which("curl") ?? "/usr/bin/curl", args)
        var headers: [String: String] = [:]
        for line in (try? String(contentsOfFile: dir.file("h"), encoding: .utf8))?.split(separator: "\r\n") ?? [] {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Fetched(status: Int(result.stdout) ?? 0, headers: headers, body: FileManager.default.contents(atPath: dir.file("b")) ?? Data())
    }

    /// A peer that holds its connection open and answers nothing (SIGSTOP): a range request
    /// for a file only it holds gets a 503 naming the wait within seconds, before any header,
    /// instead of a 200 whose body never comes (issue 36, item 16); the peer thawed, it serves.
    @Test func aFrozenPeerGetsA503BeforeTheHeaders() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-frozen")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.random(world.peerData + "/films/clip.mkv", size: 2_000_000)
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            let server = try await Server.start(home: world.home, logPath: dir.file("serve.log"))
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            let url = try world.kaiten("url", ApplyInteropTests.folder, "films/clip.mkv").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            st.freeze(true)
            let started = ContinuousClock.now
            let frozen = try Self.curl(url, extra: ["--max-time", "90"])
            let waited = ContinuousClock.now - started
            st.freeze(false)
            #expect(frozen.status == 503, "\(frozen.status) after \(waited)")
            #expect(String(decoding: frozen.body, as: UTF8.self).contains("answered within"), "\(String(decoding: frozen.body, as: UTF8.self))")
            #expect(waited < .seconds(60), "\(waited)")
            let thawed = try Self.curl(url, extra: ["--max-time", "90"])
            #expect(thawed.status == 200 && thawed.body == FileManager.default.contents(atPath: world.peerData + "/films/clip.mkv"))
            try server.stop()
        }
    }

    @Test func catGetAndTheRangeServerAgainstARealPeer() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-stream")
        defer { dir.remove() }
        let home = dir.file("kaiten")
        let created = try KaitenCLI.run(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:0"])
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let peerData = dir.file("peer")
        try TestFiles.random(peerData + "/films/movie.mkv", size: 3_000_000)
        try TestFiles.random(peerData + "/big.bin", size: 300_000_000)
        try TestFiles.write(peerData + "/films/notes/readme.txt", "hello from the peer\n")
        try TestFiles.random(peerData + "/here-too.bin", size: 1_000_000)
        try TestFiles.write(peerData + "/docs/back\\slash café.txt", "a backslash is a name character on Linux\n")
        try TestFiles.write(peerData + "/docs/page.html", "<script>document.title = 'ran'</script>\n")
        let movie = try Data(contentsOf: URL(fileURLWithPath: peerData + "/films/movie.mkv"))
        func kaiten(_ args: String...) throws -> ProcessResult { try KaitenCLI.run(args + ["--home", home]) }

        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await st.addDevice(me, name: "k")
            try await st.addFolder(id: Self.folder, path: peerData, devices: [me])
            try await st.waitUntil("peer scanned", timeout: 120) {
                let s = try await st.get("/rest/db/status?folder=\(Self.folder)") as? [String: Any]
                return s?["state"] as? String == "idle" && (s?["localFiles"] as? Int) == 6
            }
            #expect(try kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", st.address).status == 0)
            #expect(try kaiten("folder", "add", Self.folder, "--path", dir.file("local"), "--share", st.deviceID.description).status == 0)

            // cat and get: verified bytes, nothing selected, .stignore untouched.
            let cat = try kaiten("cat", Self.folder, "films/notes/readme.txt")
            #expect(cat.status == 0, "\(cat.stderr)")
            #expect(cat.stdout == "hello from the peer\n")
            let got = try kaiten("get", Self.folder, "films/movie.mkv", "-o", dir.file("out/movie.mkv"))
            #expect(got.status == 0, "\(got.stderr)")
            #expect(FileManager.default.contents(atPath: dir.file("out/movie.mkv")) == movie)
            // Issue 10, item 4: into an existing directory, by name, as cp does.
            try FileManager.default.createDirectory(atPath: dir.file("into"), withIntermediateDirectories: true)
            let into = try kaiten("get", Self.folder, "films/movie.mkv", "-o", dir.file("into") + "/")
            #expect(into.status == 0, "\(into.stderr)")
            #expect(FileManager.default.contents(atPath: dir.file("into/movie.mkv")) == movie)
            let intoBare = try kaiten("get", Self.folder, "films/notes/readme.txt", "-o", dir.file("into"))
            #expect(intoBare.status == 0, "\(intoBare.stderr)")
            #expect(FileManager.default.contents(atPath: dir.file("into/readme.txt")) == Data("hello from the peer\n".utf8))
            let tree = try kaiten("get", Self.folder, "films", "-o", dir.file("out/films"))
            #expect(tree.status == 0, "\(tree.stderr)")
            #expect(FileManager.default.contents(atPath: dir.file("out/films/notes/readme.txt")) == Data("hello from the peer\n".utf8))
            #expect(FileManager.default.contents(atPath: dir.file("out/films/movie.mkv")) == movie)
            #expect(!FileManager.default.fileExists(atPath: dir.file("local/.stignore")))
            #expect(!FileManager.default.fileExists(atPath: home + "/selections/media.txt"))
            let missing = try kaiten("cat", Self.folder, "films/nope.mkv")
            #expect(missing.status == 1 && missing.stderr.contains("films/nope.mkv: not in the global index"))
            let directory = try kaiten("cat", Self.folder, "films")
            #expect(directory.status == 1 && directory.stderr.contains("a directory"))

            // A current local copy is read from disk, not fetched (the scan in `plan` records it).
            try FileManager.default.copyItem(atPath: peerData + "/here-too.bin", toPath: dir.file("local/here-too.bin"))
            #expect(try kaiten("plan", "--offline").status == 0)
            let gotLocal = try kaiten("get", Self.folder, "here-too.bin", "-o", dir.file("out/here-too.bin"))
            #expect(gotLocal.status == 0, "\(gotLocal.stderr)")
            #expect(gotLocal.stdout.contains("blocks: 0 fetched from peers, 8 read from local files"), "\(gotLocal.stdout)")
            #expect(FileManager.default.contents(atPath: dir.file("out/here-too.bin")) == FileManager.default.contents(atPath: peerData + "/here-too.bin"))

            // The server.
            let port = try FreePort.next()
            let server = Process()
            server.executableURL = URL(fileURLWithPath: KaitenCLI.executable)
            server.arguments = ["serve", "--home", home, "--listen", "127.0.0.1:\(port)"]
            _ = FileManager.default.createFile(atPath: dir.file("serve.log"), contents: nil)
            server.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: dir.file("serve.log")))
            server.standardOutput = FileHandle.nullDevice
            try server.runAlone()
            defer { if server.isRunning { kill(server.processIdentifier, SIGKILL) } }
            try await st.waitUntil("kaiten serve is up", timeout: 60) { ServerRecord.load(Home(path: home)) != nil }
            func serverLog() -> [String] {
                ((try? String(contentsOfFile: dir.file("serve.log"), encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            }
            /// The last line of the server's log that `matches`, waited for: the server writes a
            /// request's line once its response has gone out, which the client may have read
            /// before (the test read the log first once under CI's load).
            func serverLine(_ matches: (String) -> Bool) -> String? {
                let deadline = Date().addingTimeInterval(10)
                repeat {
                    if let line = serverLog().last(where: matches) { return line }
                    usleep(20_000)
                } while Date() < deadline
                return nil
            }
            let refused = try kaiten("serve", "--listen", "0.0.0.0:\(try FreePort.next())")
            #expect(refused.status != 0 && refused.stderr.contains("--allow-remote"))
            // One server per home (issue 36, item 6): a second one is refused before it binds
            // or dials anything, and the first one's record and service stay.
            let recordBefore = try #require(ServerRecord.load(Home(path: home)))
            let second = try ProcessRunner.run(
                KaitenCLI.executable, ["serve", "--home", home, "--listen", "127.0.0.1:\(try FreePort.next())"],
                environment: ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "HOME": NSTemporaryDirectory()],
                timeout: 60)
            #expect(second.status == 1, "\(second.stdout)\(second.stderr)")
            #expect(second.stderr.contains("kaiten serve (pid \(server.processIdentifier)) already runs on this home"), "\(second.stderr)")
            #expect(ServerRecord.load(Home(path: home))?.pid == recordBefore.pid)
            #expect(ServerRecord.load(Home(path: home))?.baseURL == recordBefore.baseURL)

            let url = try kaiten("url", Self.folder, "films/movie.mkv").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(url.hasPrefix("http://127.0.0.1:\(port)/file?folder=media&path=films/movie.mkv&exp="))

            // Issue 10, items 3, 9 and 24: one clean-name rule (a backslash is fine), links only
            // for live files of the index, and the real name in Content-Disposition.
            let backslash = try kaiten("url", Self.folder, "docs/back\\slash café.txt")
            #expect(backslash.status == 0, "\(backslash.stderr)")
            let served = try Self.curl(backslash.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
            #expect(served.status == 200, "\(served)")
            #expect(served.body == Data("a backslash is a name character on Linux\n".utf8))
            #expect(served.headers["content-disposition"] == "inline; filename=\"back_slash caf_.txt\"; filename*=UTF-8''back%5Cslash%20caf%C3%A9.txt", "\(served.headers)")
            // Issue 36, item 24: a port out of range is refused; CONNECT gets its 405 and the
            // connection ends (the client hung waiting for a body); a socket that sends no request
            // is let go.
            let badPort = try kaiten("serve", "--listen", "127.0.0.1:99999")
            #expect(badPort.status == 64 && badPort.stderr.contains("port 99999 is not a TCP port"), "\(badPort.stderr)")
            let tunnel = try Self.curl(url, extra: ["-X", "CONNECT", "--max-time", "20"])
            #expect(tunnel.status == 405, "\(tunnel)")
            let closedAfter = try Self.secondsUntilClosed(port: port, giveUpAfter: 40)
            #expect(closedAfter != nil && closedAfter! <= Double(StreamServer.requestHeadSeconds) + 5, "idle socket held \(String(describing: closedAfter)) s")

            // Peer content is never active in this origin (issue 36, item 7).
            #expect(served.headers["x-content-type-options"] == "nosniff", "\(served.headers)")
            let page = try Self.curl(try kaiten("url", Self.folder, "docs/page.html").stdout.trimmingCharacters(in: .whitespacesAndNewlines))
            #expect(page.status == 200)
            #expect(page.headers["content-security-policy"] == "sandbox", "\(page.headers)")
            #expect(page.headers["x-content-type-options"] == "nosniff", "\(page.headers)")
            let escaping = try kaiten("url", Self.folder, "../etc/passwd")
            #expect(escaping.status == 64, "\(escaping.stdout)\(escaping.stderr)")
            #expect(escaping.stdout.isEmpty)
            let nope = try kaiten("url", Self.folder, "nope.txt")
            #expect(nope.status == 1 && nope.stderr.contains("not in the global index"), "\(nope.stderr)")
            #expect(nope.stdout.isEmpty)
            let folderLink = try kaiten("url", Self.folder, "films")
            #expect(folderLink.status == 1 && folderLink.stderr.contains("directory"), "\(folderLink.stderr)")

            let whole = try Self.curl(url)
            #expect(whole.status == 200)
            #expect(whole.body == movie)
            #expect(whole.headers["accept-ranges"] == "bytes")
            #expect(whole.headers["content-type"] == "video/x-matroska")
            #expect(whole.headers["content-length"] == "\(movie.count)")
            let etag = try #require(whole.headers["etag"])

            var generator = SplitMix64.forTest("catGetAndTheRangeServerAgainstARealPeer")
            for _ in 0..<50 {
                let a = Int.random(in: 0..<movie.count, using: &generator)
                let b = Int.random(in: a..<min(movie.count, a + 400_000), using: &generator)
                let part = try Self.curl(url, range: "\(a)-\(b)")
                #expect(part.status == 206)
                #expect(part.headers["content-range"] == "bytes \(a)-\(b)/\(movie.count)")
                #expect(part.body == movie[a...b], "range \(a)-\(b)")
            }
            let suffix = try Self.curl(url, range: "-500")
            #expect(suffix.status == 206 && suffix.body == movie.suffix(500))
            let open = try Self.curl(url, range: "2999000-")
            #expect(open.status == 206 && open.body == movie[2_999_000...])
            let multi = try Self.curl(url, range: "0-9,1000-1099")
            #expect(multi.status == 206)
            #expect(multi.headers["content-type"]?.hasPrefix("multipart/byteranges; boundary=") == true)
            let text = String(decoding: multi.body, as: UTF8.self)
            #expect(text.contains("Content-Range: bytes 0-9/\(movie.count)") && text.contains("Content-Range: bytes 1000-1099/\(movie.count)"))
            #expect(multi.body.range(of: movie[1000...1099]) != nil)
            let beyond = try Self.curl(url, range: "\(movie.count + 10)-")
            #expect(beyond.status == 416)
            #expect(beyond.headers["content-range"] == "bytes */\(movie.count)")
            let stillMatches = try Self.curl(url, range: "0-9", extra: ["-H", "If-Range: \(etag)"])
            #expect(stillMatches.status == 206 && stillMatches.body == movie[0...9])
            let changed = try Self.curl(url, range: "0-9", extra: ["-H", "If-Range: \"something-else\""])
            #expect(changed.status == 200 && changed.body == movie)
            let head = try Self.curl(url, head: true)
            // (curl -I writes the header block where the body would go: that is all there is.)
            #expect(head.status == 200 && head.headers["content-length"] == "\(movie.count)")
            #expect(String(decoding: head.body, as: UTF8.self).hasPrefix("HTTP/1.1 200") && head.body.count < 1000)

            // One byte in the middle of 300 MB: at most one block requested from the peer.
            let bigURL = try kaiten("url", Self.folder, "big.bin").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let middle = 150_000_123
            let byte = try Self.curl(bigURL, range: "\(middle)-\(middle)")
            #expect(byte.status == 206 && byte.body.count == 1)
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: peerData + "/big.bin"))
            try handle.seek(toOffset: UInt64(middle))
            #expect(byte.body == handle.readData(ofLength: 1))
            try handle.close()
            let line = try #require(serverLine { $0.contains("path=big.bin") && $0.contains(" 206 ") })
            #expect(line.contains("blocks_fetched=1 "), "\(line)")
            // A client that says "Connection: close" and reads slower than the server writes
            // (mpv and ffmpeg say it): the response is whole, not cut where the socket buffer was
            // when the server closed.
            let slow = try Self.curl(bigURL, range: "0-39999999", extra: ["-H", "Connection: close", "--limit-rate", "25M"])
            #expect(slow.status == 206 && slow.body.count == 40_000_000, "\(slow.status) \(slow.body.count)")
            let head40 = try FileHandle(forReadingFrom: URL(fileURLWithPath: peerData + "/big.bin"))
            #expect(slow.body == head40.readData(ofLength: 40_000_000))
            try head40.close()

            let localURL = try kaiten("url", Self.folder, "here-too.bin").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let fromDisk = try Self.curl(localURL, range: "1000-1999")
            #expect(fromDisk.status == 206 && fromDisk.body.count == 1000)
            let diskLine = try #require(serverLine { $0.contains("path=here-too.bin") })
            #expect(diskLine.contains("blocks_fetched=0 "), "\(diskLine)")

            // Signatures and paths.
            let signer = try URLSigner.load(home: Home(path: home))
            let base = "http://127.0.0.1:\(port)"
            let tampered = url.replacingOccurrences(of: "movie.mkv", with: "movie2.mkv")
            #expect(try Self.curl(tampered).status == 403)
            let badSig = String(url.dropLast(4)) + "0000"
            #expect(try Self.curl(badSig).status == 403)
            let expired = signer.url(base: base, folder: Self.folder, path: "films/movie.mkv", expires: Int64(Date().timeIntervalSince1970) - 10)
            #expect(try Self.curl(expired).status == 403)
            #expect(try Self.curl("\(base)/file?folder=media&path=films/movie.mkv").status == 403)
            let unknown = signer.url(base: base, folder: Self.folder, path: "films/none.mkv", expires: Int64(Date().timeIntervalSince1970) + 60)
            #expect(try Self.curl(unknown).status == 404)
            let traversal = signer.url(base: base, folder: Self.folder, path: "../etc/passwd", expires: Int64(Date().timeIntervalSince1970) + 60)
            let escaped = try Self.curl(traversal)
            #expect(escaped.status == 400)
            let traversalLine = try #require(serverLine { $0.contains("passwd") && $0.contains("blocks_fetched=") })
            #expect(traversalLine.contains(" 400 ") && traversalLine.contains("blocks_fetched=0 "))

            // A client that hangs up mid-body does not hurt the server.
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            #expect(connected == 0)
            let pathAndQuery = String(bigURL.dropFirst(base.count))
            let request = "GET \(pathAndQuery) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            _ = request.withCString { send(fd, $0, strlen($0), 0) }
            var buffer = [UInt8](repeating: 0, count: 65536)
            #expect(recv(fd, &buffer, buffer.count, 0) > 0)
            close(fd)
            let after = try Self.curl(url, range: "0-99")
            #expect(after.status == 206 && after.body == movie[0...99])

            // SIGTERM stops it cleanly.
            kill(server.processIdentifier, SIGTERM)
            try server.waitForExit(timeout: 60, what: "kaiten serve")
            #expect(server.terminationStatus == 0)
            #expect(ServerRecord.load(Home(path: home)) == nil)
            let urlWithoutServer = try kaiten("url", Self.folder, "films/movie.mkv")
            #expect(urlWithoutServer.status == 1 && urlWithoutServer.stderr.contains("kaiten serve"))
        }
    }

    /// A running `kaiten serve` on a free port of its own choosing, its stderr in `logPath`.
    struct Server {
        let process: Process
        let base: String

        /// - Parameter underRun: host it in `kaiten run --apply none --serve` instead.
        static func start(home: String, logPath: String, extra: [String] = [], underRun: Bool = false) async throws -> Server {
            // Port 0: the server binds a free port and records it; no port is guessed here.
            let arguments =
                underRun
                ? ["run", "--home", home, "--apply", "none", "--serve", "127.0.0.1:0"] : ["serve", "--home", home, "--listen", "127.0.0.1:0"]
            let process = try KaitenCLI.start(arguments + extra, logPath: logPath)
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline {
                if let record = ServerRecord.load(Home(path: home)), record.pid == process.processIdentifier {
                    return Server(process: process, base: record.baseURL)
                }
                guard process.isRunning else { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            kill(process.processIdentifier, SIGKILL)
            throw HarnessError("kaiten serve did not record its address within 60 s")
        }

        func stop() throws {
            kill(process.processIdentifier, SIGTERM)
            try process.waitForExit(timeout: 60, what: "kaiten serve")
        }
    }

    static func mode(_ path: String) -> mode_t {
        var info = stat()
        lstat(path, &info)
        return info.st_mode & 0o7777
    }

    /// A peer that restarts while `kaiten serve` runs is dialled again (issue 12, item 4, for
    /// serve): 503 while it is away, the file again once it is back — fetched from the peer
    /// anew (no block cache) — with no restart of serve.
    @Test func serveRedialsAPeerThatRestarted() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-serve-redial")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.random(world.peerData + "/remote.bin", size: 300_000)
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            let server = try await Server.start(home: world.home, logPath: dir.file("serve.log"), extra: ["--cache-mib", "0"])
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            let link = try world.kaiten("url", ApplyInteropTests.folder, "remote.bin").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let whole = FileManager.default.contents(atPath: world.peerData + "/remote.bin")
            #expect(try Self.curl(link).body == whole)
            st.stop()
            // Once serve has seen the connection go: 503, no peer holds it now.
            let deadline = Date().addingTimeInterval(15)
            var away = try Self.curl(link)
            while away.status != 503 && Date() < deadline {
                try await Task.sleep(for: .milliseconds(200))
                away = try Self.curl(link)
            }
            #expect(away.status == 503, "\(away.status)")
            try await st.start()
            try await st.waitUntil("serve reaches the peer again", timeout: 60) {
                let again = try Self.curl(link)
                return again.status == 200 && again.body == whole
            }
            let log = (try? String(contentsOfFile: dir.file("serve.log"), encoding: .utf8)) ?? ""
            #expect(log.contains("reconnected to \(st.deviceID.shortDescription)"), "\(log)")
            let last = log.split(separator: "\n").last { $0.contains("path=remote.bin 200") }
            #expect(last?.contains("blocks_fetched=3 ") == true, "fetched from the peer again: \(log)")
            try server.stop()
        }
    }

    /// `kaiten serve` follows a peer's change as it is announced on its open connection (issue
    /// 12: it used to keep sending the old bytes with the old ETag until restarted): the new
    /// version is served with a new ETag, no index sync needed, and every answer meanwhile is
    /// one whole version, never a truncated body. The same for the server `kaiten run --serve`
    /// hosts on the service's sessions.
    @Test(arguments: [false, true]) func serveFollowsAPeersChangeAtOnce(underRun: Bool) async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-serve-live")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        let first = Data("first version\n".utf8)
        let second = Data(String(repeating: "second version, longer\n", count: 5000).utf8)
        try TestFiles.write(world.peerData + "/docs/a.txt", "first version\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            let server = try await Server.start(home: world.home, logPath: dir.file("serve.log"), underRun: underRun)
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            let link = try world.kaiten("url", ApplyInteropTests.folder, "docs/a.txt").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let before = try Self.curl(link)
            #expect(before.status == 200 && before.body == first)
            try TestFiles.write(world.peerData + "/docs/a.txt", String(decoding: second, as: UTF8.self))
            try await ApplyInteropTests.rescan(st)
            var seen: [Fetched] = []
            try await st.waitUntil("serve sends the new version", timeout: 30) {
                let now = try Self.curl(link)
                seen.append(now)
                return now.body == second
            }
            for answer in seen {
                #expect(answer.status == 200 && (answer.body == first || answer.body == second), "a whole version, never cut: \(answer.status) \(answer.body.count) bytes")
                #expect(answer.headers["content-length"] == String(answer.body.count))
            }
            #expect(seen.last?.headers["etag"] != before.headers["etag"], "a new version, a new ETag")
            try server.stop()
        }
    }

    /// What the server promises beyond serving bytes (issue 18, item 6): 503 while no peer
    /// holding the file is connected; 404 for an unknown folder, a file deleted on the peers
    /// and a directory; the signature never in its log; the URL key private (0600) and kept
    /// across restarts, so links made before a restart still work. And the modes of what
    /// Kaiten writes: the home 0700, config.xml, key.pem and saved plans 0600.
    @Test func serveRefusesWhatItMustAndKeepsItsKey() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-serve-promises")
        defer { dir.remove() }
        let home = dir.file("kaiten")
        let created = try KaitenCLI.run(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:0"])
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let peerData = dir.file("peer")
        try TestFiles.write(peerData + "/a.txt", "served when a peer is there\n")
        try TestFiles.write(peerData + "/dir/b.txt", "in a directory\n")
        try TestFiles.write(peerData + "/gone.txt", "deleted on the peer later\n")
        try TestFiles.write(peerData + "/later.txt", "never fetched while the peer was up\n")
        func kaiten(_ args: String...) throws -> ProcessResult { try KaitenCLI.run(args + ["--home", home]) }
        let logPath = dir.file("serve.log")

        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await st.addDevice(me, name: "k")
            try await st.addFolder(id: Self.folder, path: peerData, devices: [me])
            try await st.waitUntil("peer scanned", timeout: 60) {
                let s = try await st.get("/rest/db/status?folder=\(Self.folder)") as? [String: Any]
                return s?["state"] as? String == "idle" && (s?["localFiles"] as? Int) == 4
            }
            #expect(try kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", st.address).status == 0)
            #expect(try kaiten("folder", "add", Self.folder, "--path", dir.file("local"), "--share", st.deviceID.description).status == 0)
            #expect(try kaiten("index", "sync").status == 0)
            try FileManager.default.removeItem(atPath: peerData + "/gone.txt")
            try await st.post("/rest/db/scan?folder=\(Self.folder)")
            try await st.waitUntil("the peer knows gone.txt is deleted", timeout: 60) {
                let file = try await st.get("/rest/db/file?folder=\(Self.folder)&file=gone.txt") as? [String: Any]
                return (file?["global"] as? [String: Any])?["deleted"] as? Bool == true
            }
            #expect(try kaiten("index", "sync").status == 0)

            // With the peer up, a.txt is served.
            var server = try await Server.start(home: home, logPath: logPath)
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            let signer = try URLSigner.load(home: Home(path: home))
            let expires = Int64(Date().timeIntervalSince1970) + 600
            func link(_ base: String, folder: String = Self.folder, _ path: String) -> String {
                signer.url(base: base, folder: folder, path: path, expires: expires)
            }
            let served = try Self.curl(link(server.base, "a.txt"))
            #expect(served.status == 200 && served.body == Data("served when a peer is there\n".utf8), "\(served.status)")
            #expect(try Self.curl(link(server.base, folder: "nope", "a.txt")).status == 404)
            #expect(try Self.curl(link(server.base, "gone.txt")).status == 404)
            #expect(try Self.curl(link(server.base, "dir")).status == 404)
            #expect(try Self.curl(link(server.base, "dir/b.txt")).status == 200)

            // The peer goes away: 503 for bytes no one here holds, not a hang and not a broken 200.
            st.stop()
            let unavailable = try Self.curl(link(server.base, "later.txt"))
            #expect(unavailable.status == 503, "\(unavailable.status) \(String(decoding: unavailable.body, as: UTF8.self))")

            // The key: private, kept across a restart; an old link still verifies (503 now, not 403).
            let keyPath = home + "/state/url.key"
            let key = try Data(contentsOf: URL(fileURLWithPath: keyPath))
            #expect(Self.mode(keyPath) == 0o600)
            let before = link(server.base, "later.txt")
            try server.stop()
            server = try await Server.start(home: home, logPath: logPath)
            #expect(try Data(contentsOf: URL(fileURLWithPath: keyPath)) == key)
            #expect(Self.mode(keyPath) == 0o600)
            let oldLink = server.base + before[before.range(of: "/file?")!.lowerBound...]
            #expect(try Self.curl(oldLink).status == 503)
            let forged = oldLink.replacingOccurrences(of: "sig=", with: "sig=0")
            #expect(try Self.curl(forged).status == 403)
            try server.stop()

            // The log: every request logged, no signature in it.
            let log = String(decoding: try Data(contentsOf: URL(fileURLWithPath: logPath)), as: UTF8.self)
            let requestLines = log.split(separator: "\n").filter { $0.contains("GET /file") }
            #expect(requestLines.count == 8, "\(log)")
            let signature = String(before[before.range(of: "sig=")!.upperBound...])
            #expect(signature.count == 64)
            #expect(!log.contains(signature), "the signature is redacted")
            #expect(!log.contains(String(signature.prefix(16))))
            #expect(requestLines.contains { $0.contains("path=later.txt 503 ") }, "\(requestLines)")
        }

        // Modes of what Kaiten writes.
        #expect(Self.mode(home) == 0o700)
        #expect(Self.mode(home + "/config.xml") == 0o600)
        #expect(Self.mode(home + "/key.pem") == 0o600)
        let plan = dir.file("saved.plan")
        let saved = try kaiten("plan", "--offline", "--out", plan)
        #expect(saved.status == 0, "\(saved.stdout)\(saved.stderr)")
        #expect(Self.mode(plan) == 0o600)
    }
}
