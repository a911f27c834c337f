import ArgumentParser
import KaitenApp
import Foundation
import KaitenApply
import KaitenTransfer
import KaitenConfig
import KaitenProtocol
import KaitenDiscovery
import KaitenService
import KaitenIndex
import KaitenMedia
import KaitenScan
import KaitenStream
import KaitenSync
import Logging

#if canImport(Glibc)
import Glibc
#endif

extension Kaiten {
    struct Cat: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a file's global version to stdout, from peers, without selecting it.",
            discussion: """
                Every block is SHA-256-verified; a current local copy is read instead when there \
                is one. Nothing is selected and .stignore is not touched.

                Examples:
                  kaiten cat docs notes/todo.txt
                  kaiten cat media film.mkv | mpv -
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "The file, folder-relative.")
        var path: String

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                let files = try await RemoteFiles.opened(opened, verb: "cat", folder: folder, logger: global.logger)
                do {
                    let entry = try files.entry(folder: folder, path: Self.clean(path))
                    if entry.size > 0 {
                        try await files.read(entry, range: 0...(entry.size - 1), window: 32) { data in
                            try FileHandle.standardOutput.write(contentsOf: data)
                        }
                    }
                    await files.close()
                } catch {
                    await files.close()
                    throw error
                }
            }
        }

        static func clean(_ path: String) -> String {
            path.trimmingCharacters(in: CharacterSet(charactersIn: "/")).precomposedStringWithCanonicalMapping
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch a file (or a directory's subtree) from peers into a local path.",
            discussion: """
                Writes through a temp file beside the target, fsynced and renamed into place; \
                every block SHA-256-verified. Nothing is selected; .stignore is not touched. \
                Without -o the file lands in the current directory under its own name. \
                A file that already exists there is not replaced (each is named, exit 1) unless \
                --force, as with `cp -n`.

                Examples:
                  kaiten get media film.mkv -o ~/Downloads/film.mkv
                  kaiten get photos 2019/paris -o /tmp/paris
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "A file or directory, folder-relative.")
        var path: String

        @Option(name: .shortAndLong, help: ArgumentHelp("Where to write it (a directory for a directory).", valueName: "path"))
        var output: String?

        @Flag(name: .shortAndLong, help: "Replace files that already exist at the target (never a directory).")
        var force = false

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                let clean = Cat.clean(path)
                let files = try await RemoteFiles.opened(opened, verb: "get", folder: folder, logger: global.logger)
                do {
                    try await fetch(clean, opened: opened, files: files)
                    await files.close()
                } catch {
                    await files.close()
                    throw error
                }
            }
        }

        func fetch(_ clean: String, opened: KaitenHome, files: RemoteFiles) async throws {
            let log = try PeerGenerations.openLog(home: opened, folder: folder, readOnly: true)
            let isDirectory = log.index.global(clean)?.file.type == .directory
            log.close()
            let target = (output ?? (clean as NSString).lastPathComponent) as NSString
            var absolute = target.isAbsolutePath ? target.standardizingPath : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(target as String)
            // Like cp: a file given an existing directory (or a path ending in '/') goes into it
            // under its own name.
            var existingDirectory: ObjCBool = false
            if !isDirectory,
                output?.hasSuffix("/") == true
                    || (FileManager.default.fileExists(atPath: absolute, isDirectory: &existingDirectory) && existingDirectory.boolValue)
            {
                absolute = (absolute as NSString).appendingPathComponent((clean as NSString).lastPathComponent)
            }
            let report = try await files.fetch(folder: folder, path: clean, to: absolute, replace: force) { print("fetched \($0)") }
            for (path, why) in report.failed { Terminal.error("\(folder)/\(path): \(why)") }
            let place = isDirectory ? "under \(absolute)" : "to \(absolute)"
            let total = report.written + report.failed.count
            print(
                "\(report.written) of \(total) written \(place) (\(Kaiten.Ls.human(report.bytes)); blocks: \(report.blocksFetched) fetched from peers, \(report.blocksReadLocally) read from local files)"
            )
            if !report.failed.isEmpty { throw ExitCode(1) }
        }
    }

    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Serve files of the global index over HTTP, with signed links and ranges.",
            discussion: """
                GET and HEAD /file?folder=F&path=P&exp=UNIX-SECONDS&sig=S, where S is an \
                HMAC-SHA256 with a key kept in the home (state/url.key). `kaiten url` makes such \
                links. Range requests (single, open-ended, suffix, several) fetch only the blocks \
                that cover them, SHA-256-verified, with a bounded cache; a current local copy is \
                read from disk instead. 403 for a missing, wrong or expired signature, 404 for \
                an unknown folder or path, 400 for a path that is not clean.

                Listens on loopback only, unless --allow-remote (links still need signatures). \
                Logs one line per request to stderr. SIGTERM or SIGINT stop it cleanly.

                While it runs, Kaiten is also a device peers can reach: it listens for them on \
                config.xml's listen addresses, takes in the index of each peer that dials it, \
                announces its own, and answers block requests for the files it holds (as for \
                the peers it dials at start). A second connection to a connected peer is closed. \
                A peer that goes away (restarted, a cut connection) is dialled again, after 2 s, \
                then waiting twice as long each time up to 60 s. What peers announce on the open \
                connections is served at once. Verbs that only read (ls, status, plan --offline) \
                work beside it; those that need the peers (plan, apply, cat, get) go through \
                it (its control socket, state/run.sock), since syncthing accepts one connection \
                per device, and `index sync` has nothing to do.

                Examples:
                  kaiten serve &
                  mpv "$(kaiten url media film.mkv)"
                """)

        @OptionGroup var global: GlobalOptions

        @Option(help: ArgumentHelp("Address to listen on.", valueName: "host:port"))
        var listen: String = "127.0.0.1:8385"

        @Flag(help: "Allow a non-loopback --listen address.")
        var allowRemote = false

        @Option(help: "MiB of verified blocks to keep in memory.")
        var cacheMib: Int = 16

        func run() async throws {
            try await reportingErrors {
                guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]) else {
                    throw ValidationError("--listen takes host:port, e.g. 127.0.0.1:8385")
                }
                guard (0...65535).contains(port) else {
                    throw ValidationError("--listen \(listen): port \(port) is not a TCP port (0 to 65535; 0 picks a free one)")
                }
                let host = String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
                let loopback = LoopbackHost.contains(host)
                guard loopback || allowRemote else {
                    throw ValidationError("\(host) is not a loopback address; pass --allow-remote to listen there (links still need signatures)")
                }
                let opened = try global.openHome()
                let lock = try ServiceRecord.lock(opened.home, role: "serve")
                defer { withExtendedLifetime(lock) {} }
                let signer = try URLSigner.load(home: opened.home)
                let stamps = LockedISO8601()
                let log: @Sendable (String) -> Void = { line in FileHandle.standardError.write(Data("\(stamps.now()) \(line)\n".utf8)) }
                // Discovery as config.xml says, for as long as it serves (announcing this device).
                let discovery = await Discovery.start(home: opened, listens: true, logger: global.logger, warn: log)
                let sessions = PeerSessions(
                    home: opened, logger: global.logger, serve: BlockServer(home: opened).answer, addresses: discovery)
                sessions.sayConnections(to: log)
                let files = RemoteFiles(home: opened, cacheBytes: cacheMib << 20, logger: global.logger, sessions: sessions)
                try await files.connect(warn: { Terminal.error($0) })
                // Peers may dial this device while it serves (the config's listen addresses).
                let (listeners, peerAddresses) = await files.sessions.listen(warn: log)
                if !peerAddresses.isEmpty { log("listening for peers on \(peerAddresses.joined(separator: ", "))") }
                discovery.setListenAddresses(peerAddresses)
                // A peer that goes away (restarted, a cut connection) is dialled again.
                let redial = files.sessions.keepConnected(found: discovery.local?.discoveries(), warn: log)
                defer { redial.cancel() }
                // The verbs that need the peers (plan, apply, cat, get) go through this process
                // while it holds their connections.
                let stopped = StopSignal()
                let control = ControlServer(
                    home: opened, sessions: files.sessions, files: files, folders: opened.config.folders.map(\.id), role: "serve",
                    stop: stopped, log: log)
                let controlTask = Task {
                    do { try await control.run() } catch { log("no control socket, so apply, cat and get cannot work beside this server: \(error)") }
                }
                let thumbnails = await Kaiten.thumbnailMaker(files: files, cacheRoot: opened.home.thumbnailsDirectory, log: log)
                let server = StreamServer(files: files, signer: signer, peerAddresses: peerAddresses, thumbnails: thumbnails?.make, log: log)
                try await server.run(host: host, port: port) { stop in
                    SignalStop.install {
                        stopped.raise(SIGTERM)
                        stop()
                    }
                }
                await thumbnails?.close()
                control.close()
                _ = await controlTask.result
                for listener in listeners { await listener.close() }
                await files.close()
                await discovery.close()
                FileHandle.standardError.write(Data("stopped\n".utf8))
            }
        }
    }

    /// `/thumb` for `serve`: thumbnails from the home's cache, made on the spot when missing (a
    /// remote video read by its decoder through a range server of its own). nil without the helper.
    final class ServedThumbnails: Sendable {
        let helpers: MediaHelpers
        let ranges: RangeServer
        let make: StreamServer.ThumbnailMaker

        init(helpers: MediaHelpers, ranges: RangeServer, make: @escaping StreamServer.ThumbnailMaker) {
            self.helpers = helpers
            self.ranges = ranges
            self.make = make
        }

        func close() async {
            helpers.close()
            await ranges.stop()
        }
    }

    static func thumbnailMaker(files: RemoteFiles, cacheRoot: String, log: @escaping @Sendable (String) -> Void) async -> ServedThumbnails? {
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
                rangeURL: { folder, path in signer.url(base: base, folder: folder, path: path, expires: Int64(Date().timeIntervalSince1970) + 3600) })
            let outcome = await thumbnails.make(folder: folder, path: path)
            if let unreadable = outcome.unreadable { throw unreadable }
            guard let file = outcome.thumbnail, outcome.status != .failed,
                let jpeg = FileManager.default.contents(atPath: file)
            else {
                throw MediaError(outcome.error ?? "no thumbnail")
            }
            return ([UInt8](jpeg), "\"thumb-\((file as NSString).lastPathComponent.prefix(24))-\(size)\"")
        }
        return ServedThumbnails(helpers: helpers, ranges: ranges, make: make)
    }
}

extension Kaiten {
    struct URLCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "url",
            abstract: "Print a signed, expiring link to a file, for the running `kaiten serve`.",
            discussion: """
                Examples:
                  mpv "$(kaiten url media film.mkv)"
                  kaiten url docs report.pdf --ttl 15m
                  curl -o cover.jpg "$(kaiten url photos 2024/IMG_0001.HEIC --thumb)"
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "The file, folder-relative.")
        var path: String

        // Taken as given even when it starts with '-', so that a negative duration gets its
        // own message rather than "missing value".
        @Option(parsing: .unconditional, help: "How long the link works: 90s, 15m, 1h, 2d.")
        var ttl: String = "1h"

        @Flag(help: "A link to the file's thumbnail (a JPEG, made on first use) instead of the file.")
        var thumb = false

        @Option(help: "With --thumb: neither side larger than this (16 to 255; 255 when omitted).")
        var size: Int?

        func run() async throws {
            try await reportingErrors {
                // Usage mistakes are one line each (exit 64), checked before anything is opened.
                guard let seconds = Self.duration(ttl) else {
                    throw ArgumentError("--ttl \(ttl): a link lives a positive duration, like 90s, 15m, 1h or 2d")
                }
                if size != nil && !thumb { throw ArgumentError("--size is for thumbnail links: add --thumb, or leave --size out") }
                let size = size ?? ThumbnailLimits.largest
                guard (16...ThumbnailLimits.largest).contains(size) else { throw ArgumentError("--size \(size): 16 to \(ThumbnailLimits.largest)") }
                // Sign only what the server will serve: a clean name of a live file in the index.
                let clean = Cat.clean(path)
                do {
                    try SafePath.validate(clean)
                } catch let error as ApplyError {
                    throw ArgumentError("\(path): \(error.hint)")
                }
                let opened = try global.openHome()
                _ = try App.folders([folder], in: opened)
                guard let record = ServerRecord.load(opened.home) else {
                    throw StreamError(.unavailable, "no kaiten serve is running for this home (start one with `kaiten serve`)")
                }
                let log = try PeerGenerations.openLog(home: opened, folder: folder, readOnly: true)
                defer { log.close() }
                guard let global = log.index.global(clean), !global.file.isDeleted else {
                    throw StreamError(.notFound, "\(clean) is not in the global index of \(folder) (see `kaiten ls \(folder)`)")
                }
                guard global.file.type == .file else {
                    throw StreamError(.notFound, "\(clean) is a \(global.file.type == .directory ? "directory" : "symlink"), not a file; links are made for files")
                }
                let signer = try URLSigner.load(home: opened.home)
                let expires = Int64(Date().timeIntervalSince1970) + seconds
                if thumb {
                    print(signer.thumbnailURL(base: record.baseURL, folder: folder, path: clean, size: size, expires: expires))
                } else {
                    print(signer.url(base: record.baseURL, folder: folder, path: clean, expires: expires))
                }
            }
        }

        static func duration(_ text: String) -> Int64? {
            let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
            if let value = Int64(text) { return value > 0 ? value : nil }
            guard let unit = text.last.flatMap({ units[$0] }), let value = Int64(text.dropLast()), value > 0 else { return nil }
            return value * unit
        }
    }
}

extension RemoteFiles {
    /// Files to read for `cat` and `get`: through a running service when one holds the peers'
    /// connections (its control socket), else over this process's own connections.
    static func opened(_ home: KaitenHome, verb: String, folder: String, logger: Logger) async throws -> RemoteFiles {
        if let service = ControlClient.running(home.home) {
            _ = try App.folders([folder], in: home)
            return RemoteFiles(home: home, logger: logger, relay: service.relay)
        }
        try ServiceGuard.refuse(verb, home: home)
        let files = RemoteFiles(home: home, logger: logger)
        try await files.connect(folders: [folder], warn: { Terminal.error($0) })
        return files
    }
}

/// SIGTERM and SIGINT run `stop` once (and are otherwise ignored).
enum SignalStop {
    nonisolated(unsafe) static var sources: [DispatchSourceSignal] = []

    static func install(_ stop: @escaping @Sendable () -> Void) {
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { stop() }
            source.resume()
            sources.append(source)
        }
    }
}

/// One ISO 8601 formatter shared by concurrent request handlers.
final class LockedISO8601: @unchecked Sendable {
    private let formatter = ISO8601DateFormatter()
    private let lock = NSLock()

    func now() -> String {
        lock.lock()
        defer { lock.unlock() }
        return formatter.string(from: Date())
    }
}
