import ArgumentParser
import KaitenApp
import KaitenTerminal
import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension AutoApply: ExpressibleByArgument {}

extension Kaiten {
    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Keep the folders reconciled: stay connected, plan on every change, apply what is safe.",
            discussion: """
                Stays connected to every peer (dials them, accepts them, dials again with backoff \
                when one goes away), takes their index updates into the logs as they arrive, \
                announces what this device holds and serves its blocks. It watches the folders, \
                the selection files and config.xml (inotify; a full rescan every \
                --rescan-interval as the fallback) and plans and applies: after --debounce \
                seconds of quiet for a change on disk, at once for a peer's index update:

                  --apply safe  pulls, sends of changes made here, directories, modes, the \
                .stignore write, and deselect-deletions (files the peers keep) that pass every \
                brake (--max-delete, --require-peers, the last-copy rule). The default.
                  --apply all   also what the peers decided that removes local files, and \
                deletions made here sent to the peers.
                  --apply none  plans and logs only.

                Conflicts are never settled automatically: `kaiten conflicts` and `kaiten apply` \
                do that. One line per action on stderr, with a timestamp (--json: NDJSON \
                events); `kaiten status` shows the service. SIGHUP (or an edit of config.xml) \
                reads config.xml again — a broken edit is said and the last good configuration \
                kept; SIGTERM or SIGINT finish the blocks in flight and exit 0.

                Every verb works beside it. Those that read (ls, status, plan --offline, \
                conflicts, show) and edit selections (select, deselect, resolve) work as usual; \
                `index sync` says the index is kept current; `plan`, `apply`, `cat` and `get` go \
                through its control socket (state/run.sock, mode 0600), since it holds the \
                peers' connections and syncthing takes one per device: it plans, `apply` shows \
                the plan and asks, and it applies after checking the plan again like a saved \
                one (exit 3 if it moved). With --serve, `kaiten url` links work too.

                It answers syncthing's REST API, its event stream and /metrics on config.xml's \
                <gui> address (HTTPS with <gui tls="true">) with its API key, so `syncthing \
                cli`, scripts and Prometheus can watch and configure it, and Kaiten's own \
                /rest/kaiten/ endpoints (selection, plan, conflicts, last copies) (Docs/rest.md); \
                an address it cannot take is said, and it runs on. The web page (`kaiten ui`) is \
                served there too, and with --ui HOST:PORT on a listener of its own (loopback, or \
                with --allow-remote any address, over HTTPS only).

                With --mount FOLDER=DIR the folder is in the file system while it runs (see \
                `kaiten mount --help`), read through the service's own connections; the mount \
                ends with the service.

                Examples:
                  kaiten run
                  kaiten run photos --apply none --json
                  kaiten run --serve 127.0.0.1:8385 &
                  kaiten run --mount photos=$HOME/Photos
                  kaiten run --ui 127.0.0.1:8386
                  kaiten run --ui 0.0.0.0:8386 --allow-remote
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Folder IDs (all configured folders when none).")
        var folders: [String] = []

        @Option(help: "What is applied without review: none, safe or all.")
        var apply: AutoApply = .safe

        @Option(help: ArgumentHelp("Seconds between full rescans of the folders (default: each folder's rescanIntervalS in config.xml, hourly as syncthing; every minute where the inotify watch limit leaves a folder unwatched).", valueName: "seconds"))
        var rescanInterval: Double?

        @Option(help: ArgumentHelp("Seconds of quiet after a change before planning.", valueName: "seconds"))
        var debounce: Double = 1

        @Option(help: "Most deletions one round may make: a count (10) or a share of the local files (25%).")
        var maxDelete: String = "10%"

        @Option(help: "Connected peers that must hold a file before a deselected copy is deleted.")
        var requirePeers: Int = 1

        @Option(help: ArgumentHelp("Also host the on-demand server (as `kaiten serve`) at this loopback address.", valueName: "host:port"))
        var serve: String?

        @Option(
            name: .customLong("import"),
            help: ArgumentHelp(
                "Import new photos and videos from SRC into FOLDER whenever SRC appears or changes (a card inserted), as `kaiten import SRC FOLDER` does; the next round sends them (repeatable).",
                valueName: "SRC:FOLDER"))
        var imports: [String] = []

        @Option(help: ArgumentHelp("With --import: once K peers hold an imported file, deselect it; the next round frees the local copy (the last-copy rule and --max-delete still apply: raise it for a folder that offloads).", valueName: "K"))
        var offloadAfter: Int?

        @Option(
            name: .customLong("mount"),
            help: ArgumentHelp(
                "Show FOLDER's whole global tree at DIR while the service runs, as `kaiten mount` does, on the service's connections (repeatable).",
                valueName: "FOLDER=DIR"))
        var mounts: [String] = []

        @Option(help: ArgumentHelp("With --mount: the block cache's budget, a size (500M, 2G) or a share of its file system (10%).", valueName: "size"))
        var cacheBudget: String?

        @Option(help: ArgumentHelp("Seconds of silence after which a peer's connection is given up and dialled again (syncthing waits 300).", valueName: "seconds"))
        var peerTimeout: Double = 300

        @Option(help: ArgumentHelp("Serve the web page (and the REST API it calls) on a listener of its own at this address, as well as on <gui>; loopback unless --allow-remote.", valueName: "host:port"))
        var ui: String?

        @Flag(help: "With --ui: listen on any address, over HTTPS only (the home's https-cert.pem, made on first use).")
        var allowRemote = false

        @Flag(help: "Log NDJSON events instead of lines.")
        var json = false

        func validate() throws {
            guard DeleteLimit(maxDelete) != nil else { throw ValidationError("--max-delete takes a count (10) or a share (25%)") }
            guard requirePeers >= 1 else { throw ValidationError("--require-peers must be at least 1") }
            guard peerTimeout >= 1 else { throw ValidationError("--peer-timeout takes seconds, at least 1") }
            guard (rescanInterval ?? 1) >= 1 else { throw ValidationError("--rescan-interval takes seconds, at least 1") }
            guard debounce >= 0 else { throw ValidationError("--debounce takes seconds, 0 or more") }
            if let serve { _ = try Self.loopback(serve) }
            if let ui { _ = try Self.pageAddress(ui, allowRemote: allowRemote) }
            if allowRemote && ui == nil { throw ValidationError("--allow-remote goes with --ui HOST:PORT") }
            for mount in mounts where !mount.contains("=") {
                throw ValidationError("--mount takes FOLDER=DIR, e.g. --mount photos=$HOME/Photos (\(mount) has no '=')")
            }
            if let offloadAfter {
                guard offloadAfter >= 1 else { throw ValidationError("--offload-after must be at least 1") }
                guard !imports.isEmpty else { throw ValidationError("--offload-after goes with --import SRC:FOLDER") }
            }
        }

        static func loopback(_ text: String) throws -> (host: String, port: Int) {
            guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
                throw ValidationError("--serve takes host:port, e.g. 127.0.0.1:8385")
            }
            let host = String(text[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
            guard LoopbackHost.contains(host) else {
                throw ValidationError("--serve listens on loopback only (\(host) is not); use `kaiten serve --allow-remote` for more")
            }
            return (host, port)
        }

        /// The page's own listener: loopback, or any address with --allow-remote, then over
        /// HTTPS only (a session cookie and a CSRF token must not cross a network in clear).
        static func pageAddress(_ text: String, allowRemote: Bool) throws -> Service.PageListener {
            guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
                throw ValidationError("--ui takes host:port, e.g. 127.0.0.1:8386")
            }
            let host = String(text[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
            let loopback = LoopbackHost.contains(host)
            guard loopback || allowRemote else {
                throw ValidationError("--ui listens on loopback only (\(host) is not); add --allow-remote to serve the page over HTTPS on it")
            }
            return Service.PageListener(host: host, port: port, tls: allowRemote)
        }

        func run() async throws {
            try await reportingErrors {
                var request = RunRequest()
                request.service.page = try ui.map { try Self.pageAddress($0, allowRemote: allowRemote) }
                request.service.folders = folders
                request.service.mode = apply
                request.service.rescanInterval = rescanInterval
                request.service.debounce = debounce
                request.service.maxDelete = DeleteLimit(maxDelete)!
                request.service.requirePeers = requirePeers
                request.service.peerReadTimeout = peerTimeout
                request.service.serve = try serve.map(Self.loopback)
                request.imports = imports
                request.offloadAfter = offloadAfter
                request.mounts = mounts.map { spec in
                    let equals = spec.firstIndex(of: "=")!
                    let directory = String(spec[spec.index(after: equals)...])
                    let absolute = (directory as NSString).isAbsolutePath
                        ? directory : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(directory)
                    return MountRequest(folder: String(spec[..<equals]), directory: (absolute as NSString).standardizingPath, cacheBudget: cacheBudget)
                }
                let stop = StopSignal()
                stop.install()
                let (reloads, reload) = AsyncStream<Void>.makeStream()
                signal(SIGHUP, SIG_IGN)
                let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
                hangup.setEventHandler { reload.yield() }
                hangup.resume()
                defer { hangup.cancel() }
                try await global.app.run(request, events: ServiceLog(json: json).write, stop: stop, reloads: reloads)
            }
        }
    }
}
