import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenScan
import KaitenStream
import KaitenSync
import KaitenTransfer

#if canImport(Glibc)
import Glibc
#endif

/// Thumbnails of a folder's images and videos, whether the file is here or only on peers,
/// reading as few bytes as it can: a local copy directly; a remote JPEG's EXIF thumbnail from
/// its first block when it has one; a remote video's frame through ranges of a signed URL
/// (the helper's decoder seeks, on-demand fetches only the blocks each range covers); any
/// other remote image whole. Every fetched block is verified as always (``RemoteFiles``).
/// Results go to the ``ThumbnailCache``; decoding happens in ``MediaHelpers``.
public final class Thumbnails: Sendable {
    public struct Options: Sendable {
        /// Neither side larger than this (Sushitrain's 255 is the shared cache's size).
        public var size = ThumbnailCache.sharedSize
        /// Images (other than JPEG, decoded shrunk) and video frames declaring more pixels are refused.
        public var maxPixels: Int64 = 64_000_000
        /// Make thumbnails that are in the cache already, again.
        public var force = false
        /// The shortest long side an embedded EXIF thumbnail may have to be used instead of the
        /// image: 160 is EXIF's own size (160 × 120), what most cameras embed.
        public var embeddedMinimum = 160
        /// The video frame: the key frame at or before this second.
        public var videoAt = 1.0

        public init() {}
    }

    public enum Status: String, Sendable, Codable {
        case made, cached, failed
    }

    /// Where the picture came from.
    public enum Method: String, Sendable, Codable {
        case exifThumbnail = "exif-thumbnail", heifThumbnail = "heif-thumbnail", image, videoFrame = "video-frame"
    }

    public struct Outcome: Sendable {
        public var path: String
        public var status: Status
        /// The thumbnail's file (made or found).
        public var thumbnail: String?
        public var width: Int?
        public var height: Int?
        public var method: Method?
        /// Whether a local copy was read (nothing fetched from peers).
        public var local = false
        public var size: Int64 = 0
        public var error: String?
        /// Why the file could not be read at all (not in the index, no peer holds it), apart
        /// from a file that is there but makes no picture.
        public var unreadable: StreamError?
    }

    public let files: RemoteFiles
    public let cache: ThumbnailCache
    let helpers: MediaHelpers
    public let options: Options
    /// A signed URL through which the helper reads a remote file by ranges; nil: no server.
    let rangeURL: @Sendable (_ folder: String, _ path: String) -> String?

    public init(
        files: RemoteFiles, cache: ThumbnailCache, helpers: MediaHelpers, options: Options = Options(),
        rangeURL: @escaping @Sendable (_ folder: String, _ path: String) -> String?
    ) {
        self.files = files
        self.cache = cache
        self.helpers = helpers
        self.options = options
        self.rangeURL = rangeURL
        signal(SIGPIPE, SIG_IGN)  // a helper that dies leaves a broken pipe, not a dead kaiten
    }

    /// A file to make a thumbnail of: its content (the cache key) and where its bytes are.
    struct Source {
        var path: String
        var kind: MediaKind
        var hash: ContentHash
        var size: Int64
        /// A current local copy.
        var localPath: String?
        var remote: RemoteFiles.Entry?
    }

    /// Finds `path` in the global index, or (a file only this device has, not yet announced by
    /// any peer) in the folder's scan when the file on disk is still what was scanned.
    func source(folder: String, path: String) throws -> Source {
        guard let kind = MediaKind(path: path) else { throw MediaError("not an image or a video (by its name)") }
        do {
            let entry = try files.entry(folder: folder, path: path, reachable: false)
            return Source(path: path, kind: kind, hash: entry.global.contentHash, size: entry.size, localPath: entry.localPath, remote: entry)
        } catch let error {
            guard let config = files.home.config.folders.first(where: { $0.id == folder }) else { throw error }
            let scan = ScanCache.load(path: files.home.home.scanCachePath(folderID: folder))
            guard let mine = scan[path], mine.kind == .file else { throw error }
            let full = config.path + "/" + path
            var info = stat()
            guard lstat(full, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, Int64(info.st_size) == mine.size,
                Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec) == mine.modifiedNs
            else { throw error }
            return Source(path: path, kind: kind, hash: mine.contentHash, size: mine.size, localPath: full, remote: nil)
        }
    }

    /// The thumbnail of one file: from the cache, or made and stored there.
    public func make(folder: String, path: String) async -> Outcome {
        var outcome = Outcome(path: path, status: .failed)
        let source: Source
        do {
            source = try self.source(folder: folder, path: path)
        } catch {
            outcome.error = "\(error)"
            outcome.unreadable = error as? StreamError
            return outcome
        }
        outcome.size = source.size
        outcome.local = source.localPath != nil
        let final = cache.path(for: source.hash, size: options.size)
        if !options.force && cache.contains(source.hash, size: options.size) {
            outcome.status = .cached
            outcome.thumbnail = final
            return outcome
        }
        do {
            let (picture, method) = try await render(source, folder: folder)
            outcome.status = .made
            outcome.thumbnail = final
            outcome.width = picture.width
            outcome.height = picture.height
            outcome.method = method
        } catch {
            outcome.error = "\(error)"
            outcome.unreadable = error as? StreamError
        }
        return outcome
    }

    /// Makes the thumbnail into the cache.
    func render(_ source: Source, folder: String) async throws -> (MediaPicture, Method) {
        let temporary = try cache.temporaryPath(for: source.hash, size: options.size)
        var scratch: String?
        defer {
            unlink(temporary)
            if let scratch { unlink(scratch) }
            cache.finished(temporary)
        }
        var job = MediaJob(kind: source.kind == .video ? .video : .image, input: "", output: temporary, size: options.size, max_pixels: options.maxPixels, at: options.videoAt)
        var method: Method = source.kind == .video ? .videoFrame : .image
        if let local = source.localPath {
            job.input = local
        } else if let remote = source.remote {
            if let unreachable = remote.unreachable { throw unreachable }
            switch source.kind {
            case .video:
                guard let url = rangeURL(folder, source.path) else { throw MediaError("no range server to read the video through") }
                job.input = url
            case .image:
                if MediaKind.isJPEG(source.path), let embedded = try await embeddedThumbnail(remote) {
                    scratch = try Self.scratchFile(embedded.bytes)
                    job.input = scratch!
                    job.orientation = embedded.orientation
                    method = .exifThumbnail
                } else if MediaKind.isHEIF(source.path), let heif = try await heifThumbnail(remote) {
                    scratch = try Self.scratchFile(heif)
                    job.input = scratch!
                    method = .heifThumbnail
                    // A thumbnail item this decoder cannot take: the image itself, fetched whole.
                    if case .success(let picture) = await helpers.run(job) {
                        try cache.commit(temporary, for: source.hash, size: options.size)
                        return (picture, method)
                    }
                    unlink(temporary)
                    unlink(scratch!)
                    scratch = try await download(remote)
                    job.input = scratch!
                    method = .image
                } else {
                    scratch = try await download(remote)
                    job.input = scratch!
                }
            }
        } else {
            throw MediaError("neither a local copy nor a peer to read it from")
        }
        let picture = try await helpers.run(job).get()
        try cache.commit(temporary, for: source.hash, size: options.size)
        return (picture, method)
    }

    /// The EXIF thumbnail of a remote JPEG, from its first block alone, when there is one at
    /// least `embeddedMinimum` pixels on its long side.
    func embeddedThumbnail(_ entry: RemoteFiles.Entry) async throws -> (bytes: [UInt8], orientation: Int)? {
        guard entry.size >= 4 else { return nil }
        // APP1 (EXIF) is at most 64 KiB and comes before the image data: inside the first block.
        let prefix = try await firstBlock(entry)
        guard let metadata = JPEGMetadata(prefix: prefix), let range = metadata.thumbnail,
            max(metadata.thumbnailWidth ?? 0, metadata.thumbnailHeight ?? 0) >= options.embeddedMinimum
        else { return nil }
        return (Array(prefix[range]), metadata.orientation ?? 1)
    }

    /// A remote HEIF's embedded thumbnail, rebuilt as a HEIF of its own: the index from the
    /// file's first block, then only the thumbnail item's bytes.
    func heifThumbnail(_ entry: RemoteFiles.Entry) async throws -> [UInt8]? {
        guard entry.size >= 16 else { return nil }
        let prefix = try await firstBlock(entry)
        guard let thumbnail = HEIFThumbnail(prefix: prefix), max(thumbnail.width, thumbnail.height) >= options.embeddedMinimum,
            thumbnail.length < min(entry.size, 16 << 20),
            thumbnail.extents.allSatisfy({ $0.offset + $0.length <= entry.size })
        else { return nil }
        var data: [UInt8] = []
        data.reserveCapacity(Int(thumbnail.length))
        for extent in thumbnail.extents {
            try await files.read(entry, range: extent.offset...(extent.offset + extent.length - 1), window: 1) { data += $0 }
        }
        return thumbnail.standalone(data: data)
    }

    /// The file's first 128 KiB: within its first block, which is never smaller (one fetch).
    func firstBlock(_ entry: RemoteFiles.Entry) async throws -> [UInt8] {
        let length = min(entry.size, Int64(128 << 10))
        var prefix: [UInt8] = []
        prefix.reserveCapacity(Int(length))
        try await files.read(entry, range: 0...(length - 1), window: 1) { prefix += $0 }
        return prefix
    }

    /// The whole of a remote file, in a scratch file.
    func download(_ entry: RemoteFiles.Entry) async throws -> String {
        let path = try Self.scratchFile([])
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw MediaError("\(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        do {
            if entry.size > 0 {
                try await files.read(entry, range: 0...(entry.size - 1)) { data in
                    try data.withUnsafeBytes { buffer in
                        var done = 0
                        while done < buffer.count {
                            let n = write(fd, buffer.baseAddress! + done, buffer.count - done)
                            if n < 0 && errno == EINTR { continue }
                            guard n > 0 else { throw MediaError("\(path): \(String(cString: strerror(errno)))") }
                            done += n
                        }
                    }
                }
            }
        } catch {
            unlink(path)
            throw error
        }
        return path
    }

    /// A private file in the temporary directory holding `bytes`.
    static func scratchFile(_ bytes: [UInt8]) throws -> String {
        var template = Array((NSTemporaryDirectory() as NSString).appendingPathComponent("kaiten-media-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw MediaError("cannot make a scratch file: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                unlink(path)
                throw MediaError("\(path): \(String(cString: strerror(errno)))")
            }
            done += n
        }
        return path
    }

    /// The media files `paths` name in `folder` (files, and the files of directories: their
    /// direct children, or everything under them when `recursive`), from the global index and
    /// the local scan, in path order. The whole folder when `paths` is empty.
    public static func targets(home: KaitenHome, folder: String, paths: [String], recursive: Bool) throws -> [String] {
        let log = try PeerGenerations.openLog(home: home, folder: folder, readOnly: true)
        defer { log.close() }
        let scan = ScanCache.load(path: home.home.scanCachePath(folderID: folder))
        var found = Set<String>()
        for requested in paths.isEmpty ? [""] : paths {
            if !requested.isEmpty, let g = log.index.global(requested), !g.file.isDeleted, g.file.type == .file {
                found.insert(requested)
                continue
            }
            if !requested.isEmpty, let mine = scan[requested], mine.kind == .file {
                found.insert(requested)
                continue
            }
            let under = log.index.list(under: requested, recursive: recursive, includeDeleted: false)
            let prefix = requested.isEmpty ? "" : requested + "/"
            let local = scan.files(withPrefix: prefix).filter { recursive || !$0.path.dropFirst(prefix.count).contains("/") }
            if under.isEmpty && local.isEmpty && !requested.isEmpty {
                throw MediaError("\(folder)/\(requested): not in the global index nor on disk (see `kaiten ls \(folder)`)")
            }
            for entry in under where entry.file.type == .file && MediaKind(path: entry.path) != nil { found.insert(entry.path) }
            for file in local where file.kind == .file && MediaKind(path: file.path) != nil { found.insert(file.path) }
        }
        return found.sorted()
    }
}
