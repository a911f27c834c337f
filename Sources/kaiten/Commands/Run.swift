import ArgumentParser
import KaitenApp
import KaitenApply
import KaitenConfig
import KaitenProtocol
import KaitenReconcile
import KaitenMedia
import KaitenService
import KaitenTransfer
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

                Examples:
                  kaiten run
                  kaiten run photos --apply none --json
                  kaiten run --serve 127.0.0.1:8385 &
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

        @Flag(help: "Log NDJSON events instead of lines.")
        var json = false

        func validate() throws {
            guard DeleteLimit(maxDelete) != nil else { throw ValidationError("--max-delete takes a count (10) or a share (25%)") }
            guard requirePeers >= 1 else { throw ValidationError("--require-peers must be at least 1") }
            guard (rescanInterval ?? 1) >= 1 else { throw ValidationError("--rescan-interval takes seconds, at least 1") }
            guard debounce >= 0 else { throw ValidationError("--debounce takes seconds, 0 or more") }
            if let serve { _ = try Self.loopback(serve) }
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

        /// `SRC:FOLDER[/SUBDIR]` (split at the last ':' whose right side names a folder).
        static func importWatch(_ argument: String, opened: KaitenHome, offloadAfter: Int? = nil) throws -> ImportWatch {
            guard let colon = argument.lastIndex(of: ":") else { throw ValidationError("--import takes SRC:FOLDER, e.g. /media/card/DCIM:photos") }
            let source = String(argument[..<colon])
            let (folder, subdirectory) = try Import.split(String(argument[argument.index(after: colon)...]), in: opened)
            guard folder.type == .sendreceive || folder.type == .sendonly else {
                throw ArgumentError("--import \(argument): \(folder.id) is a \(folder.type.rawValue) folder; import into a sendreceive or sendonly one")
            }
            let absolute = URL(fileURLWithPath: source).standardizedFileURL.path
            let folderPath = URL(fileURLWithPath: folder.path).standardizedFileURL.path
            if absolute == folderPath || absolute.hasPrefix(folderPath + "/") || folderPath.hasPrefix(absolute + "/") {
                throw ArgumentError("--import \(argument): the source and the folder \(folder.id) overlap")
            }
            let homePath = opened.home
            return ImportWatch(source: absolute, folder: folder.id) {
                do {
                    let home = try KaitenHome.open(homePath)
                    let helpers = (try? MediaHelpers.locate()).map { MediaHelpers(executable: $0, count: 1) }
                    defer { helpers?.close() }
                    let done = try await Importer.run(
                        source: URL(fileURLWithPath: absolute).resolvingSymlinksInPath().path, folder: folder, subdirectory: subdirectory,
                        layout: try ImportLayout(ImportLayout.standard), home: home, dryRun: false, helpers: helpers)
                    let failures = done.items.compactMap { item -> String? in
                        if case .failed(let why) = item.decision { return "\((item.source as NSString).lastPathComponent): \(why)" }
                        return nil
                    }
                    return "imported \(done.imported.count) of \(done.items.count) files from \(absolute)"
                        + (failures.isEmpty ? "" : "; failed: " + failures.joined(separator: "; "))
                } catch {
                    return "import from \(absolute) failed: \(error)"
                }
            } tick: {
                guard let offloadAfter else { return nil }
                do {
                    let home = try KaitenHome.open(homePath)
                    let record = ImportRecord(home: homePath, folder: folder.id)
                    let (deselected, _) = try Importer.deselectHeld(home: home, folder: folder.id, paths: record.entries.map(\.path), peers: offloadAfter)
                    guard !deselected.isEmpty else { return nil }
                    return "\(deselected.count) imported file\(deselected.count == 1 ? "" : "s") held by \(offloadAfter) peer\(offloadAfter == 1 ? "" : "s"): deselected, freed by the next round"
                } catch {
                    return "offload: \(error)"
                }
            }
        }

        /// Every view folder's source, watched like an import source: a change re-links the view.
        static func viewWatches(_ opened: KaitenHome) -> [ImportWatch] {
            let homePath = opened.home
            return opened.config.folders.compactMap { folder -> ImportWatch? in
                guard let definition = try? ViewDefinition.load(opened.home, folder: folder.id) else { return nil }
                let id = folder.id
                return ImportWatch(source: definition.source, folder: id) {
                    do {
                        let report = try await View.sync(id, opened: try KaitenHome.open(homePath))
                        return "view of \(definition.source): \(report.linked.count) linked, \(report.relinked.count) linked again, \(report.removed.count) removed"
                            + (report.failed.isEmpty ? "" : "; failed: " + report.failed.map { "\($0.path): \($0.why)" }.joined(separator: "; "))
                    } catch {
                        return "view of \(definition.source): \(error)"
                    }
                }
            }
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                _ = try App.folders(folders, in: opened)
                var options = Service.Options()
                options.folders = folders
                options.mode = apply
                options.rescanInterval = rescanInterval
                options.debounce = debounce
                options.maxDelete = DeleteLimit(maxDelete)!
                options.requirePeers = requirePeers
                options.serve = try serve.map(Self.loopback)
                options.imports = try imports.map { try Self.importWatch($0, opened: opened, offloadAfter: offloadAfter) } + Self.viewWatches(opened)
                let thumbnailCache = opened.home.thumbnailsDirectory
                options.thumbnails = { files in
                    guard let served = await App.thumbnailMaker(files: files, cacheRoot: thumbnailCache, log: { Terminal.error($0) }) else {
                        return nil
                    }
                    return (served.make, { await served.close() })
                }
                let stop = StopSignal()
                stop.install()
                let (reloads, reload) = AsyncStream<Void>.makeStream()
                signal(SIGHUP, SIG_IGN)
                let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
                hangup.setEventHandler { reload.yield() }
                hangup.resume()
                defer { hangup.cancel() }
                let log = ServiceLog(json: json)
                let service = Service(home: global.resolvedHome, options: options, logger: global.logger, events: log.write)
                try await service.run(stop: stop, reload: reloads)
            }
        }
    }
}

/// The service's log on stderr: one line per event with a timestamp, or NDJSON.
struct ServiceLog: Sendable {
    let json: Bool

    func write(_ event: ServiceEvent) {
        let line: String
        if json {
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            line = (try? String(decoding: encoder.encode(event), as: UTF8.self)) ?? "{}"
        } else {
            let stamp = ISO8601DateFormatter().string(from: event.time)
            let subject = [event.action, event.folder.map { f in event.path.map { "\(f)/\($0)" } ?? f }].compactMap { $0 }.joined(separator: " ")
            line = "\(stamp) \(event.kind)\(subject.isEmpty ? "" : " " + subject): \(event.message)"
        }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

/// The verbs that dial the peers themselves stand back while a service holds the connections:
/// syncthing keeps one connection per device, so a second one would take the service's away
/// (and the service would take it back mid-transfer). Said plainly, exit 1, nothing done.
enum ServiceGuard {
    static func refuse(_ verb: String, home: KaitenHome) throws {
        guard let service = ServiceRecord.running(home.home) else { return }
        var remedy = "stop it (e.g. `systemctl --user stop kaiten-run`), run `kaiten \(verb)`, and start it again"
        if verb == "apply" { remedy = "it applies what its --apply \(service.applyMode) admits by itself; for the rest, " + remedy }
        if verb == "cat" || verb == "get", let url = service.serveURL {
            remedy = "it serves on demand at \(url): `kaiten url FOLDER PATH` gives a link for curl or a player; or " + remedy
        }
        throw ServiceError("kaiten run (pid \(service.pid)) holds the peers' connections (syncthing takes one per device); \(remedy)")
    }
}
