import Foundation
import KaitenApply
import KaitenConfig
import KaitenDiscovery
import KaitenIndex
import KaitenMedia
import KaitenService
import KaitenStream
import KaitenSync
import KaitenTransfer

#if canImport(Glibc)
import Glibc
#endif

/// What `get` wrote.
public struct Fetched: Sendable {
    public let report: FetchReport
    /// Where it went: the file, or the directory the subtree went under.
    public let target: String
    public let isDirectory: Bool
}

/// What `kaiten serve` listens on.
public struct ServeRequest: Sendable {
    public var host: String
    public var port: Int
    /// MiB of verified blocks to keep in memory.
    public var cacheMiB = 16

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
}

extension App {
    /// A folder-relative path as a user types it: without slashes at its ends, in NFC.
    public static func clean(_ path: String) -> String {
        path.trimmingCharacters(in: CharacterSet(charactersIn: "/")).precomposedStringWithCanonicalMapping
    }

    /// A folder held here as the untrusted device holds ciphertext only, and takes every file:
    /// reading, selecting or mounting it means nothing here.
    static func refuseCiphertext(_ folder: String, in opened: KaitenHome, _ what: String) throws {
        guard opened.config.folder(id: folder)?.type == .receiveencrypted else { return }
        throw ArgumentError(
            "folder \(folder) is held here as an untrusted device (receiveencrypted): it holds ciphertext only and takes every "
                + "file, so \(what) has no meaning for it; read it on a trusted device, or recover it with `kaiten decrypt`")
    }

    /// Files to read for `cat` and `get`: through a running service when one holds the peers'
    /// connections (its control socket), else over this process's own connections.
    func remoteFiles(
        _ opened: KaitenHome, verb: String, folder: String, disk: DiskBlockCache? = nil, readTimeout: Duration = RemoteFiles.blockTimeout,
        memoryBytes: Int = 16 << 20
    ) async throws -> RemoteFiles {
        try Self.refuseCiphertext(folder, in: opened, "`\(verb)`")
        switch try route(verb, .dialsThroughService, in: opened) {
        case .service(let service):
            _ = try Self.folders([folder], in: opened)
            return RemoteFiles(home: opened, cacheBytes: memoryBytes, logger: logger, relay: service.relay, disk: disk, readTimeout: readTimeout)
        case .here:
            let files = RemoteFiles(home: opened, cacheBytes: memoryBytes, logger: logger, disk: disk, readTimeout: readTimeout)
            try await files.connect(folders: [folder], warn: diagnostics.error)
            return files
        }
    }

    /// Reads a file's global version from the peers, block by block, each verified, handing
    /// the blocks to `write` in order. Nothing is selected.
    public func cat(_ folder: String, path: String, write: (Data) throws -> Void) async throws {
        let opened = try open()
        let files = try await remoteFiles(opened, verb: "cat", folder: folder)
        do {
            let entry = try files.entry(folder: folder, path: Self.clean(path))
            if entry.size > 0 { try await files.read(entry, range: 0...(entry.size - 1), window: 32, write) }
            await files.close()
        } catch {
            await files.close()
            throw error
        }
    }

    /// Fetches a file (or a directory's subtree) from the peers to `output` (by default its
    /// own name here). Like cp: a file given an existing directory (or a path ending in '/')
    /// goes into it. Existing files are replaced only with `force`.
    public func get(
        _ folder: String, path: String, output: String?, force: Bool, fetched: @escaping @Sendable (String) -> Void
    ) async throws -> Fetched {
        let opened = try open()
        let clean = Self.clean(path)
        let files = try await remoteFiles(opened, verb: "get", folder: folder)
        do {
            let log = try PeerGenerations.openLog(home: opened, folder: folder, readOnly: true)
            let isDirectory = log.index.global(clean)?.file.type == .directory
            log.close()
            let target = (output ?? (clean as NSString).lastPathComponent) as NSString
            var absolute =
                target.isAbsolutePath
                ? target.standardizingPath : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(target as String)
            var existingDirectory: ObjCBool = false
            if !isDirectory,
                output?.hasSuffix("/") == true
                    || (FileManager.default.fileExists(atPath: absolute, isDirectory: &existingDirectory) && existingDirectory.boolValue)
            {
                absolute = (absolute as NSString).appendingPathComponent((clean as NSString).lastPathComponent)
            }
            let report = try await files.fetch(folder: folder, path: clean, to: absolute, replace: force, onFile: fetched)
            await files.close()
            return Fetched(report: report, target: absolute, isDirectory: isDirectory)
        } catch {
            await files.close()
            throw error
        }
    }

    /// What signing a link takes: the running on-demand server's address, the folder's global
    /// index (read-only; the caller closes it) and the home's signing key.
    private func signing(_ folder: String) throws -> (base: String, log: IndexLog, signer: URLSigner) {
        let opened = try open()
        _ = try Self.folders([folder], in: opened)
        guard let record = ServerRecord.load(opened.home) else {
            throw StreamError(.unavailable, "no on-demand server is running for this home (start `kaiten run` or `kaiten serve`)")
        }
        let signer = try URLSigner.load(home: opened.home)
        return (record.baseURL, try PeerGenerations.openLog(home: opened, folder: folder, readOnly: true), signer)
    }

    /// A name a link may be signed for, or an argument error naming it.
    private static func linkable(_ path: String) throws -> String {
        let clean = Self.clean(path)
        do {
            try SafePath.validate(clean)
        } catch {
            throw ArgumentError("\(path): \(error.hint)")
        }
        return clean
    }

    /// Signed links to the thumbnails of the images and videos directly in `directory` of the
    /// global index (live files only), by path: what a page showing the directory needs, with
    /// the index and the signing key read once.
    public func thumbnailLinks(_ folder: String, directory: String, size: Int, seconds: Int64) throws -> [String: String] {
        let (base, log, signer) = try signing(folder)
        defer { log.close() }
        let expires = Int64(Date().timeIntervalSince1970) + seconds
        var links: [String: String] = [:]
        log.index.forEachGlobal(below: Self.clean(directory), recursive: false) { global in
            guard global.file.type == .file, !global.file.isDeleted, MediaKind(path: global.path) != nil, SafePath.isClean(global.path) else { return }
            links[global.path] = signer.thumbnailURL(base: base, folder: folder, path: global.path, size: size, expires: expires)
        }
        return links
    }

    /// A signed address, valid `seconds`, under which the running on-demand server serves the
    /// subtree `root` of a folder's global tree as a read-only web site (its `index.html` for
    /// each directory), every file fetched on demand and verified.
    public func siteLink(_ folder: String, root: String, seconds: Int64) throws -> String {
        let clean = Self.clean(root).isEmpty ? "" : try Self.linkable(root)
        let (base, log, signer) = try signing(folder)
        defer { log.close() }
        if !clean.isEmpty {
            guard let global = log.index.global(clean), !global.file.isDeleted, global.file.type == .directory else {
                throw StreamError(.notFound, "\(clean) is not a directory of the global index of \(folder) (see `kaiten ls \(folder)`)")
            }
        }
        return signer.siteURL(base: base, folder: folder, root: clean, expires: Int64(Date().timeIntervalSince1970) + seconds)
    }

    /// A signed link, valid `seconds`, to a live file of the global index on the running
    /// on-demand server (to its thumbnail with `thumbnailSize`).
    public func link(_ folder: String, path: String, seconds: Int64, thumbnailSize: Int?) throws -> String {
        // Sign only what the server will serve: a clean name of a live file in the index.
        let clean = try Self.linkable(path)
        let (base, log, signer) = try signing(folder)
        defer { log.close() }
        guard let global = log.index.global(clean), !global.file.isDeleted else {
            throw StreamError(.notFound, "\(clean) is not in the global index of \(folder) (see `kaiten ls \(folder)`)")
        }
        guard global.file.type == .file else {
            throw StreamError(
                .notFound, "\(clean) is a \(global.file.type == .directory ? "directory" : "symlink"), not a file; links are made for files")
        }
        let expires = Int64(Date().timeIntervalSince1970) + seconds
        if let thumbnailSize {
            return signer.thumbnailURL(base: base, folder: folder, path: clean, size: thumbnailSize, expires: expires)
        }
        return signer.url(base: base, folder: folder, path: clean, expires: expires)
    }

    /// `kaiten serve`: holds the peers' connections (dialling, listening, redialling), serves
    /// the global index over HTTP with signed links and ranges, and answers the verbs that go
    /// through a service, until `onStop` is given the function that stops it is called.
    public func serve(
        _ request: ServeRequest, log: @escaping @Sendable (String) -> Void,
        onStop: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void
    ) async throws {
        let opened = try open()
        let lock = try ServiceRecord.lock(opened.home, role: "serve")
        defer { withExtendedLifetime(lock) {} }
        let stopped = StopSignal()
        // The peers' side as `kaiten run` has it: discovery as config.xml says (announcing this
        // device), the sessions, and the listeners peers may dial.
        let link = await PeerLink.start(home: opened, logger: logger, note: log)
        let thumbnailCache = opened.home.thumbnailsDirectory
        let files = RemoteFiles(home: opened, cacheBytes: request.cacheMiB << 20, logger: logger, sessions: link.sessions)
        let endpoints: LocalEndpoints
        do {
            try await files.connect(warn: diagnostics.error)
            // The verbs that need the peers (plan, apply, cat, get) go through this process while
            // it holds their connections.
            endpoints = try await LocalEndpoints.start(
                home: opened, files: files, peerAddresses: link.addresses, folders: opened.config.folders.map(\.id), role: "serve",
                stop: stopped,
                http: LocalEndpoints.HTTP(
                    host: request.host, port: request.port,
                    thumbnails: { files in
                        await Self.thumbnailMaker(files: files, cacheRoot: thumbnailCache, log: log).map { ($0.make, $0.close) }
                    }, log: log),
                controlLog: log, controlFailed: log)
        } catch {
            await link.close(reason: "stopping")
            throw error
        }
        // A peer that goes away (restarted, a cut connection) is dialled again.
        let redial = link.sessions.keepConnected(found: link.discovery.local?.discoveries(), warn: log)
        onStop {
            stopped.raise(SIGTERM)
            endpoints.stopServing()
        }
        var failure: (any Error)?
        do { try await endpoints.httpEnded() } catch { failure = error }
        redial.cancel()
        await endpoints.close()
        await link.close(reason: "stopping")
        if let failure { throw failure }
    }

    /// Thumbnails for the HTTP server's `/thumb` (serve, and run with --serve): made by the
    /// media helper from ranges of the file served to it on a loopback port. Nil, said, when
    /// the helper is not installed or the port cannot be had.
    public static func thumbnailMaker(
        files: RemoteFiles, cacheRoot: String, log: @escaping @Sendable (String) -> Void
    ) async -> ServedThumbnails? {
        guard let helper = try? MediaHelpers.locate() else {
            log("no thumbnails: the media helper kaiten-media is not installed")
            return nil
        }
        let ranges = RangeServer()
        let signer = URLSigner.ephemeral()
        let base: String
        do {
            base = try await ranges.start(files: files, signer: signer)
        } catch {
            log("no thumbnails: \(error)")
            return nil
        }
        let helpers = MediaHelpers(executable: helper)
        let cache = ThumbnailCache(root: cacheRoot)
        let make: StreamServer.ThumbnailMaker = { folder, path, size in
            var options = Thumbnails.Options()
            options.size = size
            let thumbnails = Thumbnails(
                files: files, cache: cache, helpers: helpers, options: options,
                rangeURL: { folder, path in
                    signer.url(base: base, folder: folder, path: path, expires: Int64(Date().timeIntervalSince1970) + 3600)
                })
            let outcome = await thumbnails.make(folder: folder, path: path)
            if let unreadable = outcome.unreadable { throw unreadable }
            guard let file = outcome.thumbnail, outcome.status != .failed, let jpeg = FileManager.default.contents(atPath: file) else {
                throw MediaError(outcome.error ?? "no thumbnail")
            }
            return ([UInt8](jpeg), "\"thumb-\((file as NSString).lastPathComponent.prefix(24))-\(size)\"")
        }
        return ServedThumbnails(helpers: helpers, ranges: ranges, make: make)
    }
}

/// The thumbnail maker of an HTTP server and what it holds open.
public final class ServedThumbnails: Sendable {
    let helpers: MediaHelpers
    let ranges: RangeServer
    public let make: StreamServer.ThumbnailMaker

    init(helpers: MediaHelpers, ranges: RangeServer, make: @escaping StreamServer.ThumbnailMaker) {
        self.helpers = helpers
        self.ranges = ranges
        self.make = make
    }

    public func close() async {
        helpers.close()
        await ranges.stop()
    }
}
