import Crypto
import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenStream
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Thumbnails of files that only a real syncthing peer holds (issue 14, part 1): a camera JPEG's
/// EXIF thumbnail from its first block, a video frame by ranges, an image fetched whole, bad
/// files with a reason each, the cache in Sushitrain's layout, `/thumb` on `serve`, and the
/// cache still answering once the peer is gone.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct MediaInteropTests {
    static let folder = ApplyInteropTests.folder

    /// Sushitrain's name for a file's thumbnail, computed here apart from Kaiten: the blocks
    /// hash (SHA-256 over the SHA-256 of each 128 KiB block, syncthing's block size below
    /// 250 MiB), base64, lower-cased, a-z0-9 only, two characters as two directories.
    static func sushitrainPath(of file: String) throws -> String {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        var outer = SHA256()
        var offset = 0
        repeat {
            let block = bytes[offset..<min(bytes.count, offset + 128 << 10)]
            outer.update(data: Data(SHA256.hash(data: block)))
            offset += 128 << 10
        } while offset < bytes.count
        let key = Data(outer.finalize()).base64EncodedString().lowercased().filter { $0.isLetter || $0.isNumber }
        let characters = Array(key)
        return "\(characters[0])/\(characters[1])/\(String(characters[2...])).jpg"
    }

    struct Report: Decodable {
        struct File: Decodable {
            var path: String
            var status: String
            var thumbnail: String?
            var width: Int?
            var height: Int?
            var method: String?
            var local: Bool
            var size: Int64
            var error: String?
        }

        var files: [File]
        var made: Int
        var cached: Int
        var failed: Int
        var fetched_bytes: Int
        var fetched_blocks: Int
    }

    @Test func thumbnailsOfFilesOnlyOnAPeer() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-media")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let home = world.home
        let peerData = world.peerData
        // A camera picture: 3000 × 2000 of noise (megabytes: many blocks), with a 320 × 240 EXIF
        // thumbnail, turned (orientation 6), and its capture date.
        let camera = peerData + "/camera/IMG_0001.JPG"
        try TestMedia.jpeg(camera, width: 3000, height: 2000, noise: true)
        try TestMedia.jpeg(dir.file("made/exif-thumb.jpg"), width: 320, height: 240)
        try TestMedia.exif(camera, thumbnail: dir.file("made/exif-thumb.jpg"), orientation: 6, dateTimeOriginal: "2024:05:06 07:08:09")
        try TestMedia.png(peerData + "/camera/screenshot.png", width: 800, height: 600)
        // A phone's HEIC: 1600 × 1200 with a 320 × 240 thumbnail inside.
        try TestMedia.jpeg(dir.file("made/phone.jpg"), width: 1600, height: 1200, noise: true)
        try TestMedia.heic(peerData + "/camera/IMG_0002.HEIC", from: dir.file("made/phone.jpg"), thumbnail: 320)
        try TestMedia.video(peerData + "/clips/clip.mp4", seconds: 20, bitrate: "4M", noise: true)
        try TestMedia.jpeg(dir.file("made/whole.jpg"), width: 1200, height: 900, noise: true)
        let whole = try Data(contentsOf: URL(fileURLWithPath: dir.file("made/whole.jpg")))
        try FileManager.default.createDirectory(atPath: peerData + "/bad", withIntermediateDirectories: true)
        try whole.prefix(whole.count / 3).write(to: URL(fileURLWithPath: peerData + "/bad/truncated.jpg"))
        try TestMedia.png(peerData + "/bad/bomb.png", width: 10_000, height: 10_000, color: "black")
        try TestMedia.audioOnly(peerData + "/bad/silent.mp4")
        try TestFiles.write(peerData + "/notes/readme.txt", "not a picture\n")
        let cameraSize = try #require(FileManager.default.attributesOfItem(atPath: camera)[.size] as? Int)
        let clipSize = try #require(FileManager.default.attributesOfItem(atPath: peerData + "/clips/clip.mp4")[.size] as? Int)
        #expect(cameraSize > 1_000_000 && clipSize > 5_000_000, "\(cameraSize) \(clipSize)")
        func kaiten(_ args: String...) throws -> ProcessResult { try KaitenCLI.run(args + ["--home", home]) }
        func report(_ result: ProcessResult) throws -> Report {
            try JSONDecoder().decode(Report.self, from: Data(result.stdout.utf8))
        }
        let shared = dir.file("synced/thumbnails")

        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 8)

            // The camera JPEG: its EXIF thumbnail, turned upright, from the first block alone.
            let jpeg = try kaiten("thumb", Self.folder, "camera/IMG_0001.JPG", "--cache", shared, "--json")
            #expect(jpeg.status == 0, "\(jpeg.stderr)")
            let jpegReport = try report(jpeg)
            let made = try #require(jpegReport.files.first)
            #expect(made.status == "made" && made.method == "exif-thumbnail" && !made.local)
            #expect(made.width == 191 && made.height == 255, "240 × 320 once turned, scaled to fit 255")
            #expect(jpegReport.fetched_blocks == 1, "\(jpegReport.fetched_bytes) bytes of \(cameraSize)")
            #expect(made.thumbnail == shared + "/" + (try Self.sushitrainPath(of: camera)))
            let picture = try #require(FileManager.default.contents(atPath: made.thumbnail ?? ""))
            #expect(picture.prefix(2) == Data([0xFF, 0xD8]))
            // Nothing but the thumbnail is left in the cache (no temp files: it may be synced).
            let cacheFiles = try FileManager.default.subpathsOfDirectory(atPath: shared).filter { $0.hasSuffix(".jpg") || $0.hasSuffix(".tmp") }
            #expect(cacheFiles == [try Self.sushitrainPath(of: camera)])

            // The video: one frame, its decoder reading by ranges — a part of the file only.
            let clip = try kaiten("thumb", Self.folder, "clips/clip.mp4", "--cache", shared, "--json")
            #expect(clip.status == 0, "\(clip.stderr)")
            let clipReport = try report(clip)
            #expect(clipReport.files.first?.method == "video-frame")
            #expect(clipReport.files.first?.width == 255 && clipReport.files.first?.height == 143)
            #expect(clipReport.fetched_bytes * 4 < clipSize, "fetched \(clipReport.fetched_bytes) of \(clipSize)")

            // The phone's HEIC: its index from the first block, then its embedded thumbnail's bytes.
            let heicSize = try #require(FileManager.default.attributesOfItem(atPath: peerData + "/camera/IMG_0002.HEIC")[.size] as? Int)
            let heic = try report(try kaiten("thumb", Self.folder, "camera/IMG_0002.HEIC", "--cache", shared, "--json"))
            #expect(heic.files.first?.method == "heif-thumbnail" && heic.files.first?.width == 255 && heic.files.first?.height == 191, "\(heic.files)")
            #expect(heic.fetched_bytes * 2 < heicSize, "fetched \(heic.fetched_bytes) of \(heicSize)")

            // The whole folder: the three above from the cache, the PNG fetched whole, a reason for
            // each bad file, exit 1; the text file is no picture and is left out.
            let all = try kaiten("thumb", Self.folder, "--recursive", "--cache", shared, "--json")
            let documented = try DocumentedJSON.problems(stdout: all.stdout, at: "kaiten thumb")
            #expect(documented.isEmpty, "\(documented.joined(separator: "\n"))")
            #expect(all.status == 1, "\(all.stderr)")
            let allReport = try report(all)
            var byPath: [String: Report.File] = [:]
            for file in allReport.files { byPath[file.path] = file }
            #expect(Set(byPath.keys) == ["camera/IMG_0001.JPG", "camera/IMG_0002.HEIC", "camera/screenshot.png", "clips/clip.mp4", "bad/truncated.jpg", "bad/bomb.png", "bad/silent.mp4"])
            #expect(byPath["camera/IMG_0001.JPG"]?.status == "cached" && byPath["clips/clip.mp4"]?.status == "cached")
            #expect(byPath["camera/screenshot.png"]?.status == "made" && byPath["camera/screenshot.png"]?.method == "image")
            #expect(byPath["camera/screenshot.png"]?.width == 255 && byPath["camera/screenshot.png"]?.height == 191)
            #expect(byPath["bad/truncated.jpg"]?.error?.contains("Premature end") == true, "\(String(describing: byPath["bad/truncated.jpg"]))")
            #expect(byPath["bad/bomb.png"]?.error?.contains("100 megapixels") == true, "\(String(describing: byPath["bad/bomb.png"]))")
            #expect(byPath["bad/silent.mp4"]?.error == "no video stream")
            #expect(allReport.made == 1 && allReport.cached == 3 && allReport.failed == 3)

            // /thumb on serve: made on the spot into the home's cache, by a signed link of its own.
            let server = try await StreamInteropTests.Server.start(home: home, logPath: dir.file("serve.log"))
            defer { if server.process.isRunning { kill(server.process.processIdentifier, SIGKILL) } }
            let link = try kaiten("url", Self.folder, "clips/clip.mp4", "--thumb").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(link.hasPrefix("\(server.base)/thumb?folder=\(Self.folder)&path=clips/clip.mp4&size=255&exp="))
            let served = try StreamInteropTests.curl(link)
            #expect(served.status == 200 && served.headers["content-type"] == "image/jpeg", "\(served.status) \(String(decoding: served.body, as: UTF8.self))")
            #expect(served.body.prefix(2) == Data([0xFF, 0xD8]))
            #expect(FileManager.default.contents(atPath: home + "/thumbnails/" + (try Self.sushitrainPath(of: peerData + "/clips/clip.mp4"))) == served.body)
            let etag = try #require(served.headers["etag"])
            #expect(try StreamInteropTests.curl(link, extra: ["-H", "If-None-Match: \(etag)"]).status == 304)
            let fileLink = try kaiten("url", Self.folder, "clips/clip.mp4").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            // A file link's signature does not open a thumbnail, nor a thumbnail's the file.
            let crossed = fileLink.replacingOccurrences(of: "/file?", with: "/thumb?").replacingOccurrences(of: "&exp=", with: "&size=255&exp=")
            #expect(try StreamInteropTests.curl(crossed).status == 403)
            let backwards = link.replacingOccurrences(of: "/thumb?", with: "/file?")
            #expect(try StreamInteropTests.curl(backwards).status == 403)
            let bomb = try kaiten("url", Self.folder, "bad/bomb.png", "--thumb").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(try StreamInteropTests.curl(bomb).status == 422)
            let signer = try URLSigner.load(home: Home(path: home))
            let unknown = signer.thumbnailURL(
                base: server.base, folder: Self.folder, path: "camera/none.jpg", size: 255, expires: Int64(Date().timeIntervalSince1970) + 60)
            #expect(try StreamInteropTests.curl(unknown).status == 404)
            try server.stop()
        }

        // The peer is gone: what the cache holds is still there, nothing is dialled.
        let offline = try kaiten("thumb", Self.folder, "camera", "clips", "--cache", shared, "--json")
        #expect(offline.status == 0, "\(offline.stderr)")
        let offlineReport = try report(offline)
        #expect(offlineReport.cached == 4 && offlineReport.made == 0 && offlineReport.fetched_bytes == 0)
        #expect(offline.stderr.isEmpty, "\(offline.stderr)")
        // As text: a line per file as it is done, then the totals.
        let text = try kaiten("thumb", Self.folder, "camera", "--cache", shared)
        #expect(text.status == 0 && text.stdout.contains("cached  camera/IMG_0001.JPG\n"), "\(text.stdout)")
        #expect(text.stdout.hasSuffix("0 made, 3 already cached, 0 failed, of 3 images and videos; fetched 0 B (0 blocks) from peers\n"), "\(text.stdout)")
    }
}
