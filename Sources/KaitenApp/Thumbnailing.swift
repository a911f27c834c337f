import Foundation
import KaitenConfig
import KaitenMedia
import KaitenService
import KaitenStream
import KaitenSync
import Synchronization

/// What `kaiten thumb` asks for.
public struct ThumbnailRequest: Sendable {
    public var folder: String
    public var paths: [String]
    public var recursive = false
    public var options = Thumbnails.Options()
    /// The cache's root; nil: the home's.
    public var cache: String?

    public init(folder: String, paths: [String]) {
        self.folder = folder
        self.paths = paths
    }
}

/// What a thumbnail run made, and what it fetched from the peers for it.
public struct ThumbnailRun: Sendable {
    public let outcomes: [Thumbnails.Outcome]
    public let fetchedBytes: Int
    public let fetchedBlocks: Int
}

extension App {
    /// Makes thumbnails of the request's images and videos, local or only on peers, handing
    /// each outcome to `done` as it comes. Peers are dialled only if a file needs them.
    public func thumbnails(_ request: ThumbnailRequest, done: @escaping (Thumbnails.Outcome) -> Void) async throws -> ThumbnailRun {
        let opened = try open()
        let folder = request.folder
        _ = try Self.folders([folder], in: opened)
        try Self.refuseCiphertext(folder, in: opened, "thumbnails")
        let route = try route("thumb", .dialsThroughService, in: opened)
        // Files made here since the last plan are seen: the folder's scan is brought up to date
        // first (only new or changed files are read). A running service keeps it current itself.
        if case .here = route, let config = opened.config.folder(id: folder) {
            do {
                _ = try Planner.loadFolder(config, home: opened, warn: diagnostics.warning)
            } catch {
                diagnostics.warning("\(folder): the folder was not scanned (\(error)); files made since the last plan are not seen")
            }
        }
        let helper = try MediaHelpers.locate()
        let targets = try Thumbnails.targets(home: opened, folder: folder, paths: request.paths.map(Self.clean), recursive: request.recursive)
        let options = request.options
        let cacheRoot = request.cache.map { ($0 as NSString).expandingTildeInPath } ?? opened.home.thumbnailsDirectory
        let files: RemoteFiles
        var connected = false
        switch route {
        case .service(let service):
            files = RemoteFiles(home: opened, logger: logger, relay: service.relay)
            connected = true
        case .here:
            files = RemoteFiles(home: opened, logger: logger)
        }
        // The decoder reads remote videos by ranges from a server private to this run.
        let signer = URLSigner.ephemeral()
        let base = LateAddress()
        let rangeServer = RangeServer()
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
        var outcomes = await make(targets, in: folder, with: thumbnails) { if !waitsForPeers($0) { done($0) } }
        let unreachable = outcomes.filter(waitsForPeers)
        if !unreachable.isEmpty {
            try await files.connect(folders: [folder], warn: diagnostics.error)
            let again = await make(unreachable.map(\.path), in: folder, with: thumbnails, done: done)
            let retried = Dictionary(again.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
            outcomes = outcomes.map { retried[$0.path] ?? $0 }
        }
        helpers.close()
        await rangeServer.stop()
        await files.close()
        return ThumbnailRun(outcomes: outcomes, fetchedBytes: files.bytesFetched, fetchedBlocks: files.blocksFetched)
    }

    /// Every target, twice as many at once as there are cores (fetches overlap decoding).
    func make(_ targets: [String], in folder: String, with thumbnails: Thumbnails, done: (Thumbnails.Outcome) -> Void) async -> [Thumbnails.Outcome] {
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
}

/// A `StreamServer` on 127.0.0.1, for this process's decoders only: not recorded in the home,
/// signed with a key that dies with the process.
public final class RangeServer: @unchecked Sendable {
    private let lock = NSLock()
    private var stopServer: (@Sendable () -> Void)?
    private var running: Task<Void, Never>?

    public init() {}

    public func start(files: RemoteFiles, signer: URLSigner) async throws -> String {
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

    public func stop() async {
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

/// The sides a thumbnail may be asked for (16 px to Sushitrain's 255).
public typealias ThumbnailLimits = KaitenStream.ThumbnailLimits
