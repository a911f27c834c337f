import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// View folders against a real syncthing peer (issue 14, part 3): the peer receives a source
/// library's media laid out by date, byte-identical, while the source stays untouched (the
/// view's files are the source's own inodes); new and edited source files follow, a deleted one
/// is deleted on the peer; a file someone put in the view is left alone; an emptied source (an
/// unmounted disk) changes nothing.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct ViewInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    /// Every file under `root`: its bytes' hash and its mtime, by relative path.
    static func tree(_ root: String) -> [String: String] {
        var result: [String: String] = [:]
        guard let walker = FileManager.default.enumerator(atPath: root) else { return result }
        while let relative = walker.nextObject() as? String {
            let full = root + "/" + relative
            var info = stat()
            guard lstat(full, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            result[relative] = "\(ApplyInteropTests.sha(full) ?? "?") \(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        }
        return result
    }

    static func inode(_ path: String) -> UInt64? {
        var info = stat()
        return lstat(path, &info) == 0 ? UInt64(info.st_ino) : nil
    }

    @Test func aLibraryViewedByDate() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-view")
        defer { dir.remove() }
        let world = try World(dir)
        let library = dir.file("library")
        try TestMedia.jpeg(library + "/a/IMG_1.JPG", width: 640, height: 480, noise: true)
        try TestMedia.exif(library + "/a/IMG_1.JPG", dateTimeOriginal: "2024:03:04 05:06:07")
        try TestMedia.ffmpeg(["-f", "lavfi", "-i", "testsrc=duration=1:size=160x120:rate=10", "-c:v", "libx264", "-preset", "ultrafast",
                              "-metadata", "creation_time=2021-06-07T12:00:00Z", library + "/b/clip.mp4"])
        try TestFiles.write(library + "/notes.txt", "not a picture\n")
        try TestMedia.jpeg(library + "/.hidden/x.jpg", width: 16, height: 16)
        let before = Self.tree(library)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 0, type: "sendonly")
            let added = try world.kaiten("view", "add", Self.folder, "--source", library)
            #expect(added.status == 0, "\(added.stdout)\(added.stderr)")
            let image = "2024/03/IMG_1.JPG"
            let clip = "2021/06/clip.mp4"
            for (view, source) in [(image, "a/IMG_1.JPG"), (clip, "b/clip.mp4")] {
                #expect(ApplyInteropTests.sha(world.peerData + "/" + view) == ApplyInteropTests.sha(library + "/" + source), "\(view) on the peer")
                // Nothing copied: the view's file is the source's inode.
                #expect(Self.inode(world.local + "/" + view) == Self.inode(library + "/" + source))
            }
            #expect(!FileManager.default.fileExists(atPath: world.peerData + "/notes.txt"))
            #expect(Self.tree(library) == before, "the source is untouched")

            // A new picture and an edited one follow; a deleted one is deleted on the peer.
            try TestMedia.jpeg(library + "/c/IMG_2.JPG", width: 320, height: 240, noise: true)
            try TestMedia.exif(library + "/c/IMG_2.JPG", dateTimeOriginal: "2024:03:05 00:00:00")
            try FileManager.default.removeItem(atPath: library + "/a/IMG_1.JPG")
            let synced = try world.kaiten("view", "sync", Self.folder)
            #expect(synced.status == 0, "\(synced.stdout)\(synced.stderr)")
            #expect(synced.stdout.contains("1 linked, 0 linked again (replaced in the source), 1 removed (gone from the source), 1 unchanged"), "\(synced.stdout)")
            #expect(ApplyInteropTests.sha(world.peerData + "/2024/03/IMG_2.JPG") == ApplyInteropTests.sha(library + "/c/IMG_2.JPG"))
            try await st.waitUntil("the deletion reaches the peer", timeout: 60) {
                !FileManager.default.fileExists(atPath: world.peerData + "/" + image)
            }
            // Replaced in the source (a new file under the old name, as editors save): linked again.
            try TestMedia.jpeg(dir.file("edited.JPG"), width: 320, height: 240, noise: true)
            try TestMedia.exif(dir.file("edited.JPG"), dateTimeOriginal: "2024:03:05 00:00:00")
            try FileManager.default.removeItem(atPath: library + "/c/IMG_2.JPG")
            try FileManager.default.moveItem(atPath: dir.file("edited.JPG"), toPath: library + "/c/IMG_2.JPG")
            let relinked = try world.kaiten("view", "sync", Self.folder)
            #expect(relinked.stdout.contains("0 linked, 1 linked again"), "\(relinked.stdout)")
            try await st.waitUntil("the new version reaches the peer", timeout: 60) {
                ApplyInteropTests.sha(world.peerData + "/2024/03/IMG_2.JPG") == ApplyInteropTests.sha(library + "/c/IMG_2.JPG")
            }

            // A file someone put in the view's directory is never removed by a sync.
            try TestFiles.write(world.local + "/mine.txt", "put here by hand\n")
            let foreign = try world.kaiten("view", "sync", Self.folder, "--no-send")
            #expect(foreign.stderr.contains("did not link, left alone (mine.txt)"), "\(foreign.stderr)")
            #expect(FileManager.default.fileExists(atPath: world.local + "/mine.txt"))

            // The source disk unmounted (an empty directory in its place): the view stays.
            try FileManager.default.moveItem(atPath: library, toPath: dir.file("library-away"))
            try FileManager.default.createDirectory(atPath: library, withIntermediateDirectories: true)
            let unmounted = try world.kaiten("view", "sync", Self.folder)
            #expect(unmounted.status == 1 && unmounted.stderr.contains("an unmounted disk?"), "\(unmounted.stderr)")
            #expect(FileManager.default.fileExists(atPath: world.local + "/" + clip))
            #expect(FileManager.default.fileExists(atPath: world.peerData + "/" + clip))
        }
    }

    /// `kaiten run` keeps a view current: a picture added to the source reaches the peer.
    @Test func theServiceKeepsAViewCurrent() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-view-run")
        defer { dir.remove() }
        let world = try World(dir)
        let library = dir.file("library")
        try TestMedia.jpeg(library + "/IMG_1.JPG", width: 320, height: 240, noise: true)
        try TestMedia.exif(library + "/IMG_1.JPG", dateTimeOriginal: "2023:01:02 03:04:05")
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 0, type: "sendonly")
            #expect(try world.kaiten("view", "add", Self.folder, "--source", library).status == 0)
            let running = try RunInteropTests.Running.start(home: world.home, logPath: dir.file("run.log"), ["--apply", "safe"])
            defer { running.stop() }
            try await RunInteropTests.waitFor("the service is up", log: running) { running.log.contains("running: folders") }
            try TestMedia.jpeg(dir.file("new.JPG"), width: 320, height: 240, noise: true)
            try TestMedia.exif(dir.file("new.JPG"), dateTimeOriginal: "2023:02:03 04:05:06")
            try FileManager.default.moveItem(atPath: dir.file("new.JPG"), toPath: library + "/IMG_2.JPG")
            try await RunInteropTests.waitFor("the new picture reaches the peer through the view", timeout: 90, log: running) {
                ApplyInteropTests.sha(world.peerData + "/2023/02/IMG_2.JPG") == ApplyInteropTests.sha(library + "/IMG_2.JPG")
            }
            #expect(running.log.contains("view of \(library): 1 linked"), "\(running.log)")
        }
    }

    /// A view's file is read from its source's inode when a peer asks for it, and checked
    /// against what was announced: a source file changed in place — same size, its mtime put
    /// back, so no scan would notice — is refused (NO_SUCH_FILE), never sent torn. The peer
    /// here is scripted: a real syncthing cannot be made to ask for a block at that moment.
    @Test func aSourceChangedInPlaceIsNeverServedAsTheAnnouncedVersion() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-view-torn")
        defer { dir.remove() }
        let world = try World(dir)
        let library = dir.file("library")
        try TestMedia.jpeg(library + "/IMG_1.JPG", width: 320, height: 240, noise: true)
        try TestMedia.exif(library + "/IMG_1.JPG", dateTimeOriginal: "2024:03:04 05:06:07")
        let original = try Data(contentsOf: URL(fileURLWithPath: library + "/IMG_1.JPG"))
        let peer = try await ScriptedPeer(in: dir.path, folder: Self.folder, contents: [:], allowed: world.me)
        defer { Task { await peer.stop() } }
        peer.announce([])
        #expect(try await world.kaitenDetached("peer", "add", peer.deviceID.description, "--name", "scripted", "--address", peer.address).status == 0)
        try world.addFolder(sharedWith: [peer.deviceID], type: "sendonly")
        let added = try await world.kaitenDetached("view", "add", Self.folder, "--source", library, "--no-send")
        #expect(added.status == 0, "\(added.stdout)\(added.stderr)")
        // Announced (the scripted peer never says it holds it: apply gives up waiting at once).
        _ = try await world.kaitenDetached("apply", "--yes", "--send-timeout", "1")
        let server = try await StreamInteropTests.Server.start(home: world.home, logPath: dir.file("serve.log"))
        defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
        let name = "2024/03/IMG_1.JPG"
        let deadline = Date().addingTimeInterval(30)
        var served: BEPResponse?
        while Date() < deadline {
            if let response = try? await peer.request(folder: Self.folder, name, offset: 0, size: Int32(original.count)), response.code == .noError {
                served = response
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(served?.data == original, "the view's file is served, from the source's bytes")

        // Changed in place: same size, the mtime put back.
        var info = stat()
        _ = lstat(library + "/IMG_1.JPG", &info)
        var changed = original
        for i in stride(from: 1000, to: changed.count - 2, by: 97) { changed[i] ^= 0x5A }
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: library + "/IMG_1.JPG"))
        try handle.write(contentsOf: changed)
        try handle.close()
        var times = [info.st_atim, info.st_mtim]
        _ = utimensat(AT_FDCWD, library + "/IMG_1.JPG", &times, 0)
        let after = try await peer.request(folder: Self.folder, name, offset: 0, size: Int32(original.count))
        #expect(after.code == .noSuchFile, "\(after.code)")
        try server.stop()
    }
}
