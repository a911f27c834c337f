import Crypto
import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenMedia

/// The thumbnail cache's names (Sushitrain's layout), EXIF, and the decoder helper on good and
/// bad files. The files are made here by ffmpeg and exiftool.
@Suite(.ownThread, .timeLimit(.minutes(5))) struct ThumbnailCacheTests {
    /// Sushitrain's Docs/thumbnails.md: "a file whose hash is t1337h4x0r will have its
    /// thumbnail stored at t/1/337h4x0r.jpg"; the lower-casing and the filter come first.
    @Test func theExampleOfSushitrainsDocumentation() {
        #expect(ThumbnailCache.relativePath(base64: "t1337h4x0r") == "t/1/337h4x0r.jpg")
        #expect(ThumbnailCache.relativePath(base64: "T1337+H4x0R/=") == "t/1/337h4x0r.jpg")
    }

    /// A failed thumbnail leaves no empty shard directories behind (issue 36, item 33); a made
    /// one keeps its own, and a directory another write still uses stays.
    @Test func aFailedThumbnailLeavesNoEmptyDirectories() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-thumb-dirs")
        defer { dir.remove() }
        let cache = ThumbnailCache(root: dir.path)
        let failed = ContentHash(SHA256.hash(data: Data("failed".utf8)))
        let made = ContentHash(SHA256.hash(data: Data("made".utf8)))
        let failing = try cache.temporaryPath(for: failed, size: 128)
        cache.finished(failing)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty, "empty directories left")
        let writing = try cache.temporaryPath(for: made)
        try Data("jpeg".utf8).write(to: URL(fileURLWithPath: writing))
        let sharing = try cache.temporaryPath(for: made)  // a second write of the same content, still going
        try cache.commit(writing, for: made)
        cache.finished(writing)
        #expect(cache.contains(made))
        cache.finished(sharing)
        #expect(cache.contains(made), "the made thumbnail and its directories stay")
    }

    /// A worked example: the 5-byte file "hello" is one block; its blocks hash is SHA-256 over
    /// that block's SHA-256, 9595c9df…3d50, in base64 lZXJ35AHUUjrBoYDZd8zWEt1v/eCpRDGzUiDpBmDPVA=
    /// (computed apart from Kaiten, with Python's hashlib and base64).
    @Test func theThumbnailOfAKnownFile() throws {
        let block = ContentHash(SHA256.hash(data: Data("hello".utf8)))
        let hash = BEPFileInfo.blocksHash(ofHashes: [block])
        #expect(hash.hex == "9595c9df90075148eb06860365df33584b75bff782a510c6cd4883a419833d50")
        #expect(ThumbnailCache.relativePath(for: hash) == "l/z/xj35ahuujrboydzd8zwet1vecprdgzuidpbmdpva.jpg")
        #expect(ThumbnailCache(root: "/c/").path(for: hash) == "/c/l/z/xj35ahuujrboydzd8zwet1vecprdgzuidpbmdpva.jpg")
        // Other sizes are Kaiten's own, apart from the shared layout.
        #expect(ThumbnailCache.relativePath(for: hash, size: 128) == "128px/l/z/xj35ahuujrboydzd8zwet1vecprdgzuidpbmdpva.jpg")
    }

    @Test func mediaKindsByName() {
        #expect(MediaKind(path: "a/IMG_0001.JPG") == .image)
        #expect(MediaKind(path: "b.heic") == .image)
        #expect(MediaKind(path: "clip.MOV") == .video)
        #expect(MediaKind(path: "notes.txt") == nil)
        #expect(MediaKind(path: ".jpg") == nil)
        #expect(MediaKind.isJPEG("x/y.jpeg") && !MediaKind.isJPEG("y.png"))
    }
}

@Suite(.ownThread, .timeLimit(.minutes(5))) struct JPEGMetadataTests {
    @Test func readsWhatExiftoolWrote() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-exif")
        defer { dir.remove() }
        try TestMedia.jpeg(dir.file("big.jpg"), width: 1600, height: 1200)
        try TestMedia.jpeg(dir.file("small.jpg"), width: 320, height: 240)
        try TestMedia.exif(
            dir.file("big.jpg"), thumbnail: dir.file("small.jpg"), orientation: 6, dateTimeOriginal: "2024:05:06 07:08:09", offset: "+02:00")
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("big.jpg"))))
        let metadata = try #require(JPEGMetadata(prefix: Array(bytes.prefix(128 << 10))))
        #expect(metadata.orientation == 6)
        #expect(metadata.dateTimeOriginal == "2024:05:06 07:08:09")
        #expect(metadata.offsetTimeOriginal == "+02:00")
        #expect(metadata.thumbnailWidth == 320 && metadata.thumbnailHeight == 240)
        let range = try #require(metadata.thumbnail)
        #expect(Array(bytes[range]) == [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("small.jpg")))))

        // A JPEG without EXIF, and not a JPEG at all.
        let plain = try JPEGMetadata(prefix: [UInt8](Data(contentsOf: URL(fileURLWithPath: dir.file("small.jpg")))))
        #expect(plain == JPEGMetadata())
        #expect(JPEGMetadata(prefix: Array("not a jpeg".utf8)) == nil)
    }

    /// Cut short anywhere, or with bytes flipped anywhere, the parser answers (never traps) and
    /// never points outside what it was given.
    @Test func damagedSegmentsNeverTrap() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-exif")
        defer { dir.remove() }
        try TestMedia.jpeg(dir.file("big.jpg"), width: 640, height: 480)
        try TestMedia.jpeg(dir.file("small.jpg"), width: 160, height: 120)
        try TestMedia.exif(dir.file("big.jpg"), thumbnail: dir.file("small.jpg"), orientation: 3, dateTimeOriginal: "2020:01:02 03:04:05")
        let bytes = Array([UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("big.jpg")))).prefix(16 << 10))
        for cut in stride(from: 0, to: bytes.count, by: 7) {
            let metadata = JPEGMetadata(prefix: Array(bytes.prefix(cut)))
            if let range = metadata?.thumbnail { #expect(range.upperBound <= cut) }
        }
        var random = SplitMix64(seed: 14)
        for _ in 0..<3000 {
            var damaged = bytes
            for _ in 0..<4 {
                let at = Int(random.next() % UInt64(min(damaged.count, 12_000)))
                damaged[at] = UInt8(truncatingIfNeeded: random.next())
            }
            if let range = JPEGMetadata(prefix: damaged)?.thumbnail { #expect(range.upperBound <= damaged.count) }
        }
    }
}

/// The helper process on real files: the thumbnail's size and orientation, and a clear error
/// (never a crash of the caller) for each kind of bad file.
@Suite(.ownThread, .timeLimit(.minutes(5)), .serialized) struct MediaHelperTests {
    static func helpers() throws -> MediaHelpers {
        MediaHelpers(executable: try MediaHelpers.locate(), count: 1, timeout: 60)
    }

    func thumbnail(_ helpers: MediaHelpers, _ input: String, kind: MediaKind, into dir: TemporaryDirectory, orientation: Int = 0)
        async -> Result<MediaPicture, MediaError>
    {
        let output = dir.file("out-\(UUID().uuidString).jpg")
        return await helpers.run(MediaJob(kind: kind == .video ? .video : .image, input: input, output: output, size: 255, max_pixels: 64_000_000, orientation: orientation))
    }

    @Test func picturesAndAFrame() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-media")
        defer { dir.remove() }
        let helpers = try Self.helpers()
        defer { helpers.close() }
        try TestMedia.jpeg(dir.file("wide.jpg"), width: 1600, height: 1200)
        try TestMedia.png(dir.file("tall.png"), width: 300, height: 900)
        try TestMedia.png(dir.file("tiny.png"), width: 40, height: 30)
        try TestMedia.video(dir.file("clip.mp4"), seconds: 4)
        let wide = try await thumbnail(helpers, dir.file("wide.jpg"), kind: .image, into: dir).get()
        #expect(wide.width == 255 && wide.height == 191 && wide.bytes > 1000)
        let tall = try await thumbnail(helpers, dir.file("tall.png"), kind: .image, into: dir).get()
        #expect(tall.width == 85 && tall.height == 255)
        // Never enlarged.
        let tiny = try await thumbnail(helpers, dir.file("tiny.png"), kind: .image, into: dir).get()
        #expect(tiny.width == 40 && tiny.height == 30)
        // An embedded thumbnail's orientation (6: turned 90° clockwise) is applied.
        let turned = try await thumbnail(helpers, dir.file("wide.jpg"), kind: .image, into: dir, orientation: 6).get()
        #expect(turned.width == 191 && turned.height == 255)
        let frame = try await thumbnail(helpers, dir.file("clip.mp4"), kind: .video, into: dir).get()
        #expect(frame.width == 255 && frame.height == 143)
    }

    /// A HEIC (libvips uses its embedded thumbnail when large enough), and its EXIF capture
    /// date as libvips reads it.
    @Test func aHEICAndItsDate() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-media")
        defer { dir.remove() }
        let helpers = try Self.helpers()
        defer { helpers.close() }
        try TestMedia.jpeg(dir.file("photo.jpg"), width: 800, height: 600)
        try TestMedia.exif(dir.file("photo.jpg"), dateTimeOriginal: "2022:02:03 04:05:06")
        try TestMedia.heic(dir.file("photo.heic"), from: dir.file("photo.jpg"), thumbnail: 320)
        let picture = try await thumbnail(helpers, dir.file("photo.heic"), kind: .image, into: dir).get()
        #expect(picture.width == 255 && picture.height == 191, "\(picture)")
        #expect(try await helpers.imageCaptureTime(dir.file("photo.heic")).get() == "2022:02:03 04:05:06")

        // Its embedded thumbnail, found from the first 128 KiB and rebuilt as a HEIF of its own.
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("photo.heic"))))
        let found = try #require(HEIFThumbnail(prefix: Array(bytes.prefix(128 << 10))))
        #expect(found.width == 320 && found.height == 240)
        #expect(found.extents.allSatisfy { $0.offset + $0.length <= Int64(bytes.count) })
        #expect(found.length < Int64(bytes.count) / 2, "\(found.length) of \(bytes.count)")
        var data: [UInt8] = []
        for extent in found.extents { data += bytes[Int(extent.offset)..<Int(extent.offset + extent.length)] }
        try Data(found.standalone(data: data)).write(to: URL(fileURLWithPath: dir.file("alone.heic")))
        let alone = try await thumbnail(helpers, dir.file("alone.heic"), kind: .image, into: dir).get()
        #expect(alone.width == 255 && alone.height == 191, "\(alone)")
        // A JPEG, or a HEIF cut before its index ends, has none.
        #expect(HEIFThumbnail(prefix: [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("photo.jpg"))))) == nil)
        #expect(HEIFThumbnail(prefix: Array(bytes.prefix(200))) == nil)
        var random = SplitMix64(seed: 7)
        for _ in 0..<2000 {
            var damaged = Array(bytes.prefix(4096))
            for _ in 0..<3 { damaged[Int(random.next() % 4096)] = UInt8(truncatingIfNeeded: random.next()) }
            // What is found is safe to use as it is used (HEIFFuzzTests has the wider search).
            if let found = HEIFThumbnail(prefix: damaged) { HEIFFuzzTests.checkUsable(found, "damaged prefix") }
        }
    }

    @Test func badFilesGetAnErrorEach() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-media")
        defer { dir.remove() }
        let helpers = try Self.helpers()
        defer { helpers.close() }
        try TestMedia.jpeg(dir.file("whole.jpg"), width: 1200, height: 900, noise: true)
        let whole = try Data(contentsOf: URL(fileURLWithPath: dir.file("whole.jpg")))
        try whole.prefix(whole.count / 3).write(to: URL(fileURLWithPath: dir.file("truncated.jpg")))
        try Data().write(to: URL(fileURLWithPath: dir.file("empty.jpg")))
        try Data("<svg xmlns='http://www.w3.org/2000/svg'/>".utf8).write(to: URL(fileURLWithPath: dir.file("disguised.jpg")))
        // 100 megapixels of one colour: a few hundred KB that would decode to 300 MB.
        try TestMedia.png(dir.file("bomb.png"), width: 10_000, height: 10_000, color: "black")
        try TestMedia.audioOnly(dir.file("silent-film.mp4"))
        let cut = try Data(contentsOf: URL(fileURLWithPath: dir.file("silent-film.mp4")))
        try cut.prefix(200).write(to: URL(fileURLWithPath: dir.file("cut.mp4")))

        func failure(_ name: String, _ kind: MediaKind) async -> String {
            switch await thumbnail(helpers, dir.file(name), kind: kind, into: dir) {
            case .success: return "made a thumbnail"
            case .failure(let error): return error.description
            }
        }
        let truncated = await failure("truncated.jpg", .image)
        #expect(truncated.hasPrefix("cannot make the thumbnail") && truncated.contains("Premature end"), "\(truncated)")
        #expect(await failure("empty.jpg", .image).contains("not an image"))
        #expect(await failure("disguised.jpg", .image).contains("blocked"), "SVG is not among the allowed loaders")
        let bomb = await failure("bomb.png", .image)
        #expect(bomb.contains("100 megapixels") && bomb.contains("limit of 64"), "\(bomb)")
        #expect(await failure("silent-film.mp4", .video) == "no video stream")
        #expect(await failure("cut.mp4", .video).contains("not a video"))
        // The helper is still there for the next good file.
        try TestMedia.png(dir.file("fine.png"), width: 64, height: 64)
        #expect(try await thumbnail(helpers, dir.file("fine.png"), kind: .image, into: dir).get().width == 64)
    }

    /// A peer's "video" that is an HLS playlist or an ffconcat list names other files for the
    /// decoder to open (here a local video, the sentinel): the helper refuses such containers,
    /// so no frame of the sentinel reaches a thumbnail. The sentinel itself thumbnails.
    @Test func aContainerCannotMakeTheHelperOpenOtherFiles() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-media-lists")
        defer { dir.remove() }
        let helpers = try Self.helpers()
        defer { helpers.close() }
        let sentinel = dir.file("sentinel.mp4")
        try TestMedia.video(sentinel, seconds: 2, width: 320, height: 240)
        let segment = dir.file("sentinel.ts")
        try TestMedia.ffmpeg(["-i", sentinel, "-c", "copy", "-f", "mpegts", segment])
        #expect(try await thumbnail(helpers, sentinel, kind: .video, into: dir).get().width == 255)
        let playlist = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nfile://\(segment)\n#EXT-X-ENDLIST\n"
        try Data(playlist.utf8).write(to: URL(fileURLWithPath: dir.file("playlist.mp4")))
        try Data("ffconcat version 1.0\nfile '\(sentinel)'\n".utf8).write(to: URL(fileURLWithPath: dir.file("list.mp4")))
        for name in ["playlist.mp4", "list.mp4"] {
            switch await thumbnail(helpers, dir.file(name), kind: .video, into: dir) {
            case .success(let picture): Issue.record("\(name): a thumbnail of another file was made: \(picture)")
            case .failure(let error): #expect(error.description.contains("not a video"), "\(name): \(error)")
            }
        }
    }

    /// The helper's C under AddressSanitizer: compiled here with a small driver, run on a PNG
    /// over the pixel limit (the name of its loader was read after the header holding it had
    /// been freed, and reached the log and /thumb's body) and on good and bad files.
    @Test func theHelpersCUnderAddressSanitizer() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-asan")
        defer { dir.remove() }
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        let root = sources.deletingLastPathComponent().deletingLastPathComponent()
        // The Swift toolchain's clang carries its AddressSanitizer runtime; gcc needs libasan.
        guard let compiler = ProcessRunner.which("clang") ?? ProcessRunner.which("gcc") else {
            throw TestMedia.Missing(description: "no C compiler (the toolchain's clang, or gcc) to build the helper's C with AddressSanitizer")
        }
        let pkgConfig = try ProcessRunner.run(
            try #require(ProcessRunner.which("pkg-config")), ["--cflags", "--libs", "vips", "libavformat", "libavcodec", "libswscale", "libavutil"])
        #expect(pkgConfig.status == 0, "\(pkgConfig.stderr)")
        let flags = pkgConfig.stdout.split(whereSeparator: \.isWhitespace).map(String.init)
        let driver = dir.file("driver")
        let build = try ProcessRunner.run(
            compiler,
            ["-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1",
             "-I", root.appendingPathComponent("Sources/C/CKaitenMedia/include").path,
             root.appendingPathComponent("Sources/C/CKaitenMedia/kaiten_media.c").path,
             sources.appendingPathComponent("AddressSanitizer/driver.c").path, "-o", driver] + flags + ["-lz", "-lm"])
        try #require(build.status == 0, "\(build.stderr)")
        try TestMedia.png(dir.file("fine.png"), width: 64, height: 64)
        try TestMedia.png(dir.file("bomb.png"), width: 10_000, height: 10_000, color: "black")
        try Data("<svg xmlns='http://www.w3.org/2000/svg'/>".utf8).write(to: URL(fileURLWithPath: dir.file("disguised.png")))
        let environment = [
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            // glib's type system keeps its allocations for the process's life: leaks are not the question.
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
        ]
        let run = try ProcessRunner.run(
            driver, [dir.path, dir.file("fine.png"), dir.file("bomb.png"), dir.file("disguised.png")], environment: environment, timeout: 120)
        #expect(!run.stderr.contains("AddressSanitizer"), "\(run.stderr)")
        #expect(run.status == 0, "exit \(run.status): \(run.stderr)")
        #expect(run.stdout.contains("huge.png: declares 900 megapixels, over the limit of 64 for pngload"), "\(run.stdout)")
        #expect(run.stdout.contains("fine.png: 64 x 64"), "\(run.stdout)")
        #expect(run.stdout.contains("bomb.png: declares 100 megapixels"), "\(run.stdout)")
    }

    /// A decoder that dies (killed here, as a crash or the memory limit would end it) costs its
    /// job, with the reason; the next job gets a new helper.
    @Test func aHelperThatDiesCostsOneJob() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-media")
        defer { dir.remove() }
        // A stand-in helper that dies on its first job.
        let script = dir.file("dying-helper")
        try "#!/bin/sh\nread line\nkill -SEGV $$\n".write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        let dying = MediaHelpers(executable: script, count: 1, timeout: 10)
        let result = await dying.run(MediaJob(kind: .image, input: "/nonexistent", output: dir.file("x.jpg"), size: 255, max_pixels: 1))
        guard case .failure(let error) = result else {
            Issue.record("a dead helper made a thumbnail")
            return
        }
        #expect(error.description.contains("signal 11"), "\(error)")
        // And one that never answers is stopped at the timeout.
        let silent = dir.file("silent-helper")
        try "#!/bin/sh\nexec sleep 600\n".write(toFile: silent, atomically: true, encoding: .utf8)
        chmod(silent, 0o755)
        let slow = MediaHelpers(executable: silent, count: 1, timeout: 1)
        let started = Date()
        let timedOut = await slow.run(MediaJob(kind: .image, input: "/nonexistent", output: dir.file("y.jpg"), size: 255, max_pixels: 1))
        guard case .failure(let late) = timedOut else {
            Issue.record("a silent helper made a thumbnail")
            return
        }
        #expect(late.description.contains("longer than 1 s"))
        #expect(Date().timeIntervalSince(started) < 10)
    }
}
