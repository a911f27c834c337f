import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// On-demand reads from a peer whose files were damaged behind its back (issue 42, item 4): the
/// damage keeps each block's Adler-32, size and mtime, so syncthing 1.19.2 serves the wrong
/// bytes as they are, and 2.x checks each block it serves against its SHA-256 and refuses. Each
/// way of reading on demand — `cat`, `get`, `serve`, `/thumb`, and `cat` through a running
/// service's control socket — gets a file of its own (2.x rescans a file once it refused it),
/// and none of them lets one wrong byte out, nor writes a thumbnail of them.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct WrongBytesInteropTests {
    static let folder = ApplyInteropTests.folder
    static let names = ["cat.bin", "get.bin", "serve.bin", "control.bin", "photo.jpg"]

    /// Damages every block of `path` in place so that its Adler-32 stays (+1 at i, −1 at
    /// i + 65521), keeping its size and mtime; blocks too short for that stay as they are.
    static func damage(_ path: String, blockSize: Int = 131072) throws {
        let before = ApplyInteropTests.stat(path)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        var block = 0
        while block * blockSize + 100 + 65521 < bytes.count {
            var i = block * blockSize + 100
            while i + 65521 < min(bytes.count, (block + 1) * blockSize) && (bytes[i] == 255 || bytes[i + 65521] == 0) { i += 1 }
            if i + 65521 < min(bytes.count, (block + 1) * blockSize) {
                bytes[i] += 1
                bytes[i + 65521] -= 1
            }
            block += 1
        }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.write(contentsOf: Data(bytes))
        try handle.close()
        var times = [timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2), before.st_mtim]
        utimensat(AT_FDCWD, path, &times, 0)
    }

    /// What the peer's answer to the first request is, as Kaiten names it: 1.19.2 sends the
    /// wrong bytes, which are rejected; 2.x refuses to send them.
    static var peerAnswer: String {
        SyncthingInstance.majorVersion >= 2 ? "refused" : "whose SHA-256 is wrong"
    }

    /// `kaiten cat` with its standard output, bytes as they are, in `path`.
    static func cat(_ world: ApplyInteropTests.World, _ name: String, into path: String) throws -> (status: Int32, output: Data, stderr: String) {
        let result = try ProcessRunner.run(
            "/bin/sh", ["-c", "exec \"$0\" cat \"$1\" \"$2\" --home \"$3\" > \"$4\"", KaitenCLI.executable, Self.folder, name, world.home, path])
        return (result.status, (try? Data(contentsOf: URL(fileURLWithPath: path))) ?? Data(), result.stderr)
    }

    @Test func noOnDemandReadLetsAWrongByteOut() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-wrong-bytes")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        for name in Self.names where name.hasSuffix(".bin") { try TestFiles.random(world.peerData + "/" + name, size: 4 * 131072) }
        try TestMedia.jpeg(world.peerData + "/photo.jpg", width: 1600, height: 1200, quality: 2, noise: true)
        var original: [String: Data] = [:]
        for name in Self.names { original[name] = try Data(contentsOf: URL(fileURLWithPath: world.peerData + "/" + name)) }
        #expect(original["photo.jpg"]!.count > 2 * 131072, "the photo spans blocks: \(original["photo.jpg"]!.count)")

        try await withSyncthing(st) { st in
            try await world.share(st, files: Self.names.count)
            for name in Self.names { try Self.damage(world.peerData + "/" + name) }
            for name in Self.names { #expect(try Data(contentsOf: URL(fileURLWithPath: world.peerData + "/" + name)) != original[name], "\(name) damaged") }

            // cat: nothing but verified bytes on stdout, an error naming the file and the peer.
            let cat = try Self.cat(world, "cat.bin", into: dir.file("cat.out"))
            let peer = String(st.deviceID.description.prefix(7))
            #expect(cat.status == 1)
            #expect(cat.output.isEmpty, "\(cat.output.count) bytes out")
            #expect(cat.stderr.contains("cat.bin: no peer delivered the block at offset 0: peer \(peer)"), "\(cat.stderr)")
            #expect(cat.stderr.contains(Self.peerAnswer), "\(cat.stderr)")

            // get: no file under the name asked for, no temporary file left.
            try FileManager.default.createDirectory(atPath: dir.file("out"), withIntermediateDirectories: true)
            let got = try world.kaiten("get", Self.folder, "get.bin", "-o", dir.file("out/get.bin"))
            #expect(got.status == 1)
            #expect(!FileManager.default.fileExists(atPath: dir.file("out/get.bin")))
            #expect(got.stderr.contains("get.bin") && got.stderr.contains(peer) && got.stderr.contains(Self.peerAnswer), "\(got.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.file("out")).isEmpty, "nothing left in out/")

            // serve and /thumb.
            let server = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("serve.log"))
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            let url = try world.kaiten("url", Self.folder, "serve.bin").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let served = try StreamInteropTests.curl(url, extra: ["--max-time", "90"])
            // An error naming the file and the peer's answer, never the bytes.
            let servedText = String(decoding: served.body, as: UTF8.self)
            #expect(served.status == 502, "\(served.status)")
            #expect(servedText.contains("serve.bin") && servedText.contains(peer) && servedText.contains(Self.peerAnswer), "\(servedText)")
            let thumbURL = try world.kaiten("url", Self.folder, "photo.jpg", "--thumb").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let thumb = try StreamInteropTests.curl(thumbURL, extra: ["--max-time", "90"])
            let made = (FileManager.default.enumerator(atPath: world.home)?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".jpg") }
            let thumbText = String(decoding: thumb.body, as: UTF8.self)
            #expect(thumb.status == 502, "\(thumb.status)")
            #expect(thumbText.contains("photo.jpg") && thumbText.contains(peer) && thumbText.contains(Self.peerAnswer), "\(thumbText)")
            #expect(made.isEmpty, "no thumbnail of wrong bytes anywhere in the home: \(made)")
            try server.stop()

            // cat through a running service: its control socket's block path.
            let run = try KaitenCLI.start(["run", "--home", world.home, "--apply", "none"], logPath: dir.file("run.log"))
            defer { if run.isRunning { kill(run.processIdentifier, SIGKILL) } }
            try await st.waitUntil("kaiten run is ready", timeout: 60) {
                try world.kaiten("status").stdout.contains("service: kaiten run (pid \(run.processIdentifier))")
            }
            let viaService = try Self.cat(world, "control.bin", into: dir.file("control.out"))
            #expect(viaService.status == 1)
            #expect(viaService.output.isEmpty, "\(viaService.output.count) bytes out")
            #expect(viaService.stderr.contains("kaiten: control.bin: no peer delivered the block at offset 0: peer \(peer)"), "\(viaService.stderr)")
            #expect(viaService.stderr.contains(Self.peerAnswer), "\(viaService.stderr)")
            kill(run.processIdentifier, SIGTERM)
            try run.waitForExit(timeout: 60, what: "kaiten run")
        }
    }
}
