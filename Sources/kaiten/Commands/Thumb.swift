import ArgumentParser
import KaitenApp
import Foundation
import KaitenConfig
import KaitenMedia
import KaitenService
import KaitenStream
import KaitenSync
import Synchronization

extension Kaiten {
    struct Thumb: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make thumbnails of a folder's images and videos, local or only on peers.",
            discussion: """
                Thumbnails go to a cache keyed by content, in Sushitrain's layout: the file's \
                blocks hash in base64, lower-cased, only a-z0-9 kept, the first two characters \
                as two directory levels, .jpg, neither side over 255 px. Point --cache into a \
                synced folder and the phones running Sushitrain use the thumbnails this machine \
                makes (and the other way round). A thumbnail already in the cache is not made again.

                A local copy is read from disk. For a file only on peers, as few bytes as \
                possible are fetched, every block SHA-256-verified: a JPEG's EXIF thumbnail from \
                its first block when it has one (160 px or more on its long side); a video's \
                frame through ranges (the decoder seeks; only the blocks it reads are fetched); \
                other images whole. Decoding runs in kaiten-media helper processes (libvips, \
                ffmpeg), one per core, each with a memory limit: a damaged or hostile file costs \
                its own thumbnail, with the reason, never the run.

                Formats: JPEG, PNG, WebP, HEIC/HEIF/AVIF, GIF, TIFF; MP4, MOV, MKV, WebM, AVI \
                and other containers ffmpeg reads. Other files are left out.

                Exit status: 0 when every thumbnail was made or found, 1 when any failed.

                Examples:
                  kaiten thumb photos 2024 --recursive
                  kaiten thumb photos --recursive --cache ~/Sync/thumbnails
                  kaiten thumb media film.mkv --json | jq -r '.files[0].thumbnail'
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "Files or directories, folder-relative (the whole folder when none).")
        var paths: [String] = []

        @Flag(name: [.customShort("R"), .long], help: "Go into subdirectories.")
        var recursive = false

        @Option(help: "Neither side larger than this many pixels (16 to 255; 255 is the shared cache's size).")
        var size: Int = ThumbnailCache.sharedSize

        @Option(help: ArgumentHelp("The cache directory (default: the home's thumbnails/).", valueName: "dir"))
        var cache: String?

        @Flag(help: "Make thumbnails again even when the cache has them.")
        var force = false

        @Option(help: "Refuse images (other than JPEG) and video frames larger than this.")
        var maxMegapixels: Int = 64

        @Flag(help: "Print {files: [{path, status, thumbnail, width, height, method, local, size, error}], counts, fetched bytes} as JSON.")
        var json = false

        func validate() throws {
            guard (16...ThumbnailLimits.largest).contains(size) else { throw ValidationError("--size takes 16 to \(ThumbnailLimits.largest)") }
            guard maxMegapixels > 0 else { throw ValidationError("--max-megapixels takes a positive number") }
        }

        struct Row: Encodable {
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

        struct Report: Encodable {
            var files: [Row]
            var made: Int
            var cached: Int
            var failed: Int
            var fetched_bytes: Int
            var fetched_blocks: Int
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                _ = try App.folders([folder], in: opened)
                // Files made here since the last plan are seen (issue 36, item 17): the folder's
                // scan is brought up to date first (only new or changed files are read). A running
                // service keeps it current itself.
                if ControlClient.running(opened.home) == nil, let config = opened.config.folder(id: folder) {
                    do {
                        _ = try Planner.loadFolder(config, home: opened, warn: { Terminal.warning($0) })
                    } catch {
                        Terminal.warning("\(folder): the folder was not scanned (\(error)); files made since the last plan are not seen")
                    }
                }
                let helper = try MediaHelpers.locate()
                let targets = try Thumbnails.targets(home: opened, folder: folder, paths: paths.map(Cat.clean), recursive: recursive)
                var options = Thumbnails.Options()
                options.size = size
                options.force = force
                options.maxPixels = Int64(maxMegapixels) * 1_000_000
                let cacheRoot = cache.map { ($0 as NSString).expandingTildeInPath } ?? opened.home.thumbnailsDirectory

                // Peers are dialled only if a file needs them (nothing is cached or local).
                let files: RemoteFiles
                var connected = false
                if let service = ControlClient.running(opened.home) {
                    files = RemoteFiles(home: opened, logger: global.logger, relay: service.relay)
                    connected = true
                } else {
                    try ServiceGuard.refuse("thumb", home: opened)
                    files = RemoteFiles(home: opened, logger: global.logger)
                }
                // The decoder reads remote videos by ranges from a server private to this run.
                let signer = URLSigner.ephemeral()
                let base = LateAddress()
                let rangeServer = RangeServer()
                let folder = self.folder
                if targets.contains(where: { MediaKind(path: $0) == .video }) {
                    let address = try await rangeServer.start(files: files, signer: signer)
                    base.set(address)
                }
                let helpers = MediaHelpers(executable: helper)
                let thumbnails = Thumbnails(
                    files: files, cache: ThumbnailCache(root: cacheRoot), helpers: helpers, options: options,
                    rangeURL: { folder, path in
                        base.current.map { signer.url(base: $0, folder: folder, path: path, expires: Int64(Date().timeIntervalSince1970) + 3600) }
                    })
                // Each file's line as it is done (a long run shows its progress); one that needs the
                // peers waits for the second pass, after they are dialled.
                func waitsForPeers(_ outcome: Thumbnails.Outcome) -> Bool {
                    !connected && outcome.status == .failed && outcome.unreadable?.code == .noHolderConnected
                }
                var outcomes = await make(targets, with: thumbnails) { if !waitsForPeers($0) { show($0) } }
                let unreachable = outcomes.filter(waitsForPeers)
                if !unreachable.isEmpty {
                    try await files.connect(folders: [folder], warn: { Terminal.error($0) })
                    let again = await make(unreachable.map(\.path), with: thumbnails, done: show)
                    let retried = Dictionary(again.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
                    outcomes = outcomes.map { retried[$0.path] ?? $0 }
                }
                helpers.close()
                await rangeServer.stop()
                await files.close()
                render(outcomes, fetchedBytes: files.bytesFetched, fetchedBlocks: files.blocksFetched)
                if outcomes.contains(where: { $0.status == .failed }) { throw ExitCode(1) }
            }
        }

        /// Every target, twice as many at once as there are cores (fetches overlap decoding).
        func make(_ targets: [String], with thumbnails: Thumbnails, done: (Thumbnails.Outcome) -> Void) async -> [Thumbnails.Outcome] {
            let width = max(2, ProcessInfo.processInfo.activeProcessorCount * 2)
            var outcomes: [Thumbnails.Outcome] = []
            await withTaskGroup(of: Thumbnails.Outcome.self) { group in
                var next = 0
                while next < targets.count && next < width {
                    let path = targets[next]
                    group.addTask { await thumbnails.make(folder: folder, path: path) }
                    next += 1
                }
                for await outcome in group {
                    outcomes.append(outcome)
                    done(outcome)
                    if next < targets.count {
                        let path = targets[next]
                        group.addTask { await thumbnails.make(folder: folder, path: path) }
                        next += 1
                    }
                }
            }
            return outcomes.sorted { $0.path.utf8Precedes($1.path) }
        }

        /// One file's line (text mode; --json prints everything at the end).
        func show(_ outcome: Thumbnails.Outcome) {
            guard !json else { return }
            switch outcome.status {
            case .made:
                let how = outcome.method.map { " \($0.rawValue)" } ?? ""
                print("made    \(outcome.path) (\(outcome.width ?? 0)×\(outcome.height ?? 0)\(how)\(outcome.local ? ", local" : ""))")
            case .cached:
                print("cached  \(outcome.path)")
            case .failed:
                Terminal.error("\(folder)/\(outcome.path): \(outcome.error ?? "failed")")
            }
        }

        func render(_ outcomes: [Thumbnails.Outcome], fetchedBytes: Int, fetchedBlocks: Int) {
            let made = outcomes.filter { $0.status == .made }.count
            let cached = outcomes.filter { $0.status == .cached }.count
            let failed = outcomes.filter { $0.status == .failed }.count
            if json {
                let rows = outcomes.map {
                    Row(
                        path: $0.path, status: $0.status.rawValue, thumbnail: $0.thumbnail, width: $0.width, height: $0.height,
                        method: $0.method?.rawValue, local: $0.local, size: $0.size, error: $0.error)
                }
                try? Terminal.json(
                    Report(files: rows, made: made, cached: cached, failed: failed, fetched_bytes: fetchedBytes, fetched_blocks: fetchedBlocks))
                return
            }
            print(
                "\(made) made, \(cached) already cached, \(failed) failed, of \(outcomes.count) images and videos; fetched \(Kaiten.Ls.human(Int64(fetchedBytes))) (\(fetchedBlocks) blocks) from peers"
            )
        }
    }
}

/// A `StreamServer` on 127.0.0.1, for this process's decoders only: not recorded in the home,
/// signed with a key that dies with the process.
final class RangeServer: @unchecked Sendable {
    private let lock = NSLock()
    private var stopServer: (@Sendable () -> Void)?
    private var running: Task<Void, Never>?

    func start(files: RemoteFiles, signer: URLSigner) async throws -> String {
        // Blocks one at a time and a small socket buffer: the decoder reads a little, then seeks.
        let server = StreamServer(files: files, signer: signer, readAhead: 1, sendBufferBytes: 32 << 10, log: { _ in })
        let bound = LateAddress()
        let failure = Mutex<String?>(nil)
        let task = Task {
            do {
                try await server.run(
                    host: "127.0.0.1", port: 0, record: false, ready: { bound.set($0) },
                    stop: { stop in self.lock.withLock { self.stopServer = stop } })
            } catch {
                failure.withLock { $0 = "\(error)" }
            }
        }
        lock.withLock { running = task }
        // Binding 127.0.0.1:0 takes a moment; the server says when it is done, or fails.
        while bound.current == nil {
            if let why = failure.withLock({ $0 }) { throw MediaError("cannot start the range server for the decoder: \(why)") }
            try await Task.sleep(nanoseconds: 2_000_000)
        }
        return bound.current!
    }

    func stop() async {
        let (stop, task) = lock.withLock { (stopServer, running) }
        stop?()
        _ = await task?.result
    }
}

/// An address known once a server has bound, read by closures made before.
final class LateAddress: Sendable {
    private let value = Mutex<String?>(nil)

    func set(_ address: String) { value.withLock { $0 = address } }
    var current: String? { value.withLock { $0 } }
}
