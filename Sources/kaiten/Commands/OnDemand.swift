import ArgumentParser
import KaitenApp
import KaitenTerminal
import Foundation
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
                try await global.app.cat(folder, path: path) { try FileHandle.standardOutput.write(contentsOf: $0) }
            }
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
                let fetched = try await global.app.get(folder, path: path, output: output, force: force) { print("fetched \($0)") }
                for (path, why) in fetched.report.failed { Terminal.error("\(folder)/\(path): \(why)") }
                print(MediaView.summary(fetched))
                if !fetched.report.failed.isEmpty { throw VerbEnded(.failure) }
            }
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
                let stamps = LockedISO8601()
                let log: @Sendable (String) -> Void = { line in FileHandle.standardError.write(Data("\(stamps.now()) \(line)\n".utf8)) }
                var request = ServeRequest(host: host, port: port)
                request.cacheMiB = cacheMib
                try await global.app.serve(request, log: log, onStop: { stop in SignalStop.install(stop) })
                FileHandle.standardError.write(Data("stopped\n".utf8))
            }
        }
    }

    /// `/thumb` for `serve`: thumbnails from the home's cache, made on the spot when missing (a
    /// remote video read by its decoder through a range server of its own). nil without the helper.
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
                print(try global.app.link(folder, path: path, seconds: seconds, thumbnailSize: thumb ? size : nil))
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
