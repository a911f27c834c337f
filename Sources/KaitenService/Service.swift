import Foundation
import KaitenApply
import KaitenConfig
import KaitenHTTPAPI
import KaitenDiscovery
import KaitenFiles
import KaitenPeer
import KaitenProtocol
import KaitenReconcile
import KaitenStream
import KaitenSync
import KaitenTransfer
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten run`: the reconcile loop as a service. Composed of parts with one job each — the
/// peer sessions (connect, accept, redial, index intake, announcing), the block server, the
/// change watcher, the planner and the applier — and this, which only schedules: something
/// changed (a peer's index, a file, a selection, the timer), wait for quiet, plan, apply what
/// the mode admits, record the outcome.
public final class Service: Sendable {
    public struct Options: Sendable {
        public var folders: [String] = []
        public var mode: AutoApply = .safe
        /// Seconds between full rescans (the watcher makes changes seen sooner). Nil: as
        /// config.xml's folders say (`rescanIntervalS`, syncthing's default hourly), and at
        /// least every minute while the kernel's inotify watch limit leaves a folder unwatched.
        public var rescanInterval: Double?
        /// Quiet time after a change on disk before planning, so a burst of writes is one round.
        public var debounce: Double = 1
        /// Quiet time after a peer's index update. None: a round starts at once, as syncthing
        /// pulls at once, and whatever arrives while it runs (the rest of a peer's batches) is
        /// the next round; a round of named paths costs little.
        public var peerQuiet: Double = 0
        public var maxDelete: DeleteLimit = DeleteLimit("10%")!
        public var requirePeers: Int = 1
        /// Seconds of silence after which a peer's connection is given up and dialled again
        /// (syncthing's ReceiveTimeout: 300).
        public var peerReadTimeout: Double = 300
        /// The on-demand HTTP server (`--serve`), on the service's live sessions.
        public var serve: (host: String, port: Int)?
        public var cacheBytes = 16 << 20
        /// Answers syncthing's REST API on config.xml's `<gui>` address (`kaiten run` does).
        public var restAPI = false
        /// What the REST API calls for the index, the selection and the configuration (the
        /// use-case layer gives it; without it those endpoints answer 501).
        public var useCases: (any APIUseCases)?
        /// Makes `/thumb` answer on the server (the CLI composes the media parts): given the
        /// files the server reads, a thumbnail maker and what ends it; nil: no thumbnails.
        public var thumbnails: (@Sendable (RemoteFiles) async -> (make: StreamServer.ThumbnailMaker, close: @Sendable () async -> Void)?)?
        /// `--import SRC:FOLDER`: sources watched for new media (a card inserted, a phone
        /// mounted), imported when they appear or change; the round that follows sends them.
        public var imports: [ImportWatch] = []
        /// `--ui`: the web page and the REST API it calls on a listener of its own, beside `<gui>`.
        public var page: PageListener?

        public init() {}
    }

    /// Where the page's own listener is; `tls`: HTTPS only (any address: `--allow-remote`).
    public struct PageListener: Sendable, Equatable {
        public var host: String
        public var port: Int
        public var tls: Bool

        public init(host: String, port: Int, tls: Bool) {
            self.host = host
            self.port = port
            self.tls = tls
        }
    }

    /// A scoped round looks at the paths its triggers named; past this many it plans the whole
    /// folder instead (a walk costs less than that many lookups and scans).
    static let scopeLimit = 10_000

    let homePath: Home
    let options: Options
    let logger: Logger
    let emit: @Sendable (ServiceEvent) -> Void
    /// The warnings and errors said, for the REST API.
    let said = ServiceMessages()
    /// What it does, as syncthing's events, for the REST API.
    let apiEvents = APIEvents()
    /// The REST API's browser sessions, kept across reloads.
    let browserSessions = APISessions()
    /// The REST API's listener, kept across reloads that leave `<gui>` as it was.
    let apiListener = RESTListener()
    /// The page's own listener (`--ui`), the same API behind it.
    let pageListener = RESTListener()
    let counters = ServiceCounters()
    let startTime = Date()

    public init(home: Home, options: Options, logger: Logger, events: @escaping @Sendable (ServiceEvent) -> Void) {
        self.homePath = home
        self.options = options
        self.logger = logger
        self.emit = { [said, apiEvents, counters] event in
            said.record(event)
            apiEvents.record(event)
            counters.record(event)
            events(event)
        }
    }

    /// Runs until `stop` is raised (SIGTERM, SIGINT); `reload` (SIGHUP) reads config.xml again.
    /// A config.xml that no longer loads is said and the last good one kept.
    public func run(stop: StopSignal, reload: AsyncStream<Void>) async throws {
        let lock = try ServiceRecord.lock(homePath, role: "run")
        defer { withExtendedLifetime(lock) {} }
        var stamp = FileStamp(homePath.configPath)
        var home = try KaitenHome.open(homePath)
        apiEvents.starting(home: homePath.path, myID: home.identity.deviceID)
        let started = ISO8601DateFormatter().string(from: Date())
        let reloads = Reloads(reload)
        let note: @Sendable (String) -> Void = { [emit] in emit(ServiceEvent("peer", $0)) }
        var link = await PeerLink.start(home: home, settings: PeerSettings(readTimeout: options.peerReadTimeout), logger: logger, note: note)
        var first = true
        while true {
            for refusal in home.config.sharingRefusals { emit(ServiceEvent("warning", refusal)) }
            do { try home.recordRunningConfig() } catch { emit(ServiceEvent("warning", "\(error)")) }
            let outcome = await generation(home, read: stamp, link: link, first: first, started: started, stop: stop, reloads: reloads)
            first = false
            guard outcome == .reload else { break }
            var reread = false
            do {
                stamp = FileStamp(homePath.configPath)
                home = try KaitenHome.open(homePath)
                reread = true
            } catch {
                emit(ServiceEvent("error", "\(error); config.xml does not load: the service keeps running on the last good configuration"))
            }
            // Peers stay connected across a reload unless their terms changed; a change of
            // listening or discovery starts the peers' side afresh.
            if link.fits(home) {
                await saying("applying the new terms to the peers' connections", { await link.reconfigure(home) })
            } else {
                await saying("closing the peers' connections", { await link.close(reason: "reloading") })
                link = await PeerLink.start(home: home, settings: PeerSettings(readTimeout: options.peerReadTimeout), logger: logger, note: note)
            }
            // Said once the peers' side is under the new terms: a peer removed is refused from here.
            if reread {
                apiEvents.configSaved(home.config.syncthingJSON())
                emit(ServiceEvent("config", "config.xml read again; peers and folders follow it"))
            }
        }
        await saying("closing the REST API", { await apiListener.close() })
        await saying("closing the web page's listener", { await pageListener.close() })
        await link.close(reason: "stopping")
        emit(ServiceEvent("stopped", "stopped"))
    }

    /// SIGHUP reloads: a trigger of whichever generation runs (one that arrives between two
    /// generations is handed to the next).
    final class Reloads: Sendable {
        private let target = Mutex<(triggers: Triggers?, pending: Bool)>((nil, false))
        init(_ stream: AsyncStream<Void>) {
            Task { [weak self] in
                for await _ in stream {
                    guard let self else { return }
                    let triggers = self.target.withLock { target -> Triggers? in
                        if target.triggers == nil { target.pending = true }
                        return target.triggers
                    }
                    triggers?.yield(.config)
                }
            }
        }

        /// Between generations, SIGHUP waits for the next one.
        func detach() { target.withLock { $0.triggers = nil } }

        /// The generation starting now takes SIGHUP from here on (and one that came meanwhile).
        func attach(_ triggers: Triggers) {
            let pending = target.withLock { target in
                defer { target = (triggers, false) }
                return target.pending
            }
            if pending { triggers.yield(.config) }
        }
    }

    enum Outcome { case stop, reload }

    /// One configuration's life: sessions up, rounds until stopped or the config changes.
    /// - Parameter read: config.xml as it was when `home` was read from it.
    private func generation(
        _ home: KaitenHome, read: FileStamp?, link: PeerLink, first: Bool, started: String, stop: StopSignal, reloads: Reloads
    ) async -> Outcome {
        let folders = home.config.folders.filter { options.folders.isEmpty || options.folders.contains($0.id) }
        let folderIDs = folders.map(\.id)
        let note: @Sendable (String) -> Void = { [emit] in emit(ServiceEvent("peer", $0)) }
        let sessions = link.sessions
        let discovery = link.discovery
        let addresses = link.addresses
        let status = StatusKeeper(home: home, options: options, folders: folderIDs, started: started)
        // A stop while connecting ends the dials (a peer slow to answer holds nothing up).
        stop.onRaise { _ in Task { await sessions.abandonDials() } }
        do {
            let reports = try await sessions.connect(folders: folderIDs, warn: note)
            if reports.contains(where: \.ok) { status.indexUpdated() }
            for r in reports where !r.ok {
                note("\(r.folder): \(r.peerLabel): \(r.problem ?? "unreachable")")
            }
        } catch {
            emit(ServiceEvent("error", "\(error)"))
        }
        let redial = sessions.keepConnected(found: discovery.local?.discoveries(), warn: note)
        let watcher = ChangeWatcher(
            folders: folders.map { ($0.id, $0.path) }, selectionDirectory: home.home.selectionsDirectory,
            configPath: home.home.configPath, warn: { [emit] in emit(ServiceEvent("watch", $0)) })

        let trigger = Triggers()
        var feeders: [Task<Void, Never>] = []
        let updates = sessions.updates()
        let labels = Dictionary(folders.map { ($0.id, $0.label) }, uniquingKeysWith: { first, _ in first })
        feeders.append(Task { [apiEvents] in
            for await update in updates {
                apiEvents.remoteIndexUpdated(update, label: labels[update.folder] ?? update.folder)
                status.indexUpdated()
                trigger.yield(.peers(update.device, folder: update.folder, names: update.files.map(\.name), full: update.isFullIndex))
            }
        })
        feeders.append(Task {
            for await change in watcher.changes {
                switch change {
                case .config: trigger.yield(.config)
                case .selection: trigger.yield(.disk("a selection file"))
                case .folder(let id, let path): trigger.yield(.folder(id, path: path))
                case .eventsLost(let id): trigger.yield(.eventsLost(folder: id))
                }
            }
        })
        stop.onRaise { _ in trigger.yield(.stop) }
        let configured = folders.map(\.rescanIntervalS).filter { $0 > 0 }.min().map(Double.init)
        // Nothing below wakes an idle service every second: the rescan timer sleeps until it is
        // due (a minute at most), SIGHUP and the peers' comings and goings are events.
        feeders.append(Task { [options] in
            var last = ContinuousClock.now
            while !Task.isCancelled {
                var interval = options.rescanInterval ?? configured
                if watcher.limitReached { interval = min(interval ?? 60, 60) }
                let due = interval.map { last + .seconds($0) }
                if let due, ContinuousClock.now >= due {
                    last = ContinuousClock.now
                    trigger.yield(.timer)
                    continue
                }
                // A minute at most: the watch limit may be reached meanwhile (new directories).
                let wake = min(due ?? .now + .seconds(60), .now + .seconds(60))
                try? await Task.sleep(until: wake, clock: .continuous)
            }
        })
        // What an idle service runs (a peer's ping, a status request, the timer above) maps the
        // page cache's folios of its code whole again: unmapped once a minute, as after a round,
        // and soon after a round whose unmapping the minimum gap put off.
        feeders.append(Task {
            var waited = Duration.zero
            while !Task.isCancelled {
                try? await Task.sleep(for: MappedCode.minimumGap)
                waited += MappedCode.minimumGap
                if waited >= .seconds(60) {
                    waited = .zero
                    MappedCode.unmapIdlePages()
                } else {
                    MappedCode.unmapIdlePagesIfOwed()
                }
            }
        })
        for watch in options.imports {
            feeders.append(Task { [emit] in
                var last: ImportWatch.Signature?
                while !Task.isCancelled {
                    let now = ImportWatch.Signature.of(watch.source)
                    if let now, now != last {
                        emit(ServiceEvent("import", folder: watch.folder, await watch.run()))
                        trigger.yield(.disk("an import from \(watch.source)"))
                    }
                    last = now
                    // Offload: what the peers hold now is deselected; the round the selection
                    // change starts frees it (the last-copy rule re-checked there).
                    if let tick = watch.tick, let line = await tick() { emit(ServiceEvent("offload", folder: watch.folder, line)) }
                    try? await Task.sleep(for: .seconds(ImportWatch.interval))
                }
            })
        }
        reloads.attach(trigger)
        // A change of config.xml made after it was read and before this configuration's watcher
        // started (a write during the reload) was seen by no watcher: it is read now.
        if FileStamp(homePath.configPath) != read { trigger.yield(.config) }
        let changes = sessions.connectionChanges()
        let initial = sessions.connections()
        for connection in initial.values { apiEvents.connected(connection) }
        feeders.append(Task { [apiEvents] in
            var connected = Set(initial.keys)
            for await _ in changes {
                // Peers come and go: the status says who is connected now.
                let connections = sessions.connections()
                status.peers(connections)
                for (device, connection) in connections where !connected.contains(device) { apiEvents.connected(connection) }
                for device in connected where connections[device] == nil { apiEvents.disconnected(device) }
                // A peer (re)connected: what it announced while away came in its first exchange,
                // which names no paths to the loop, so the next round looks at every path; that
                // exchange brought the index up to date.
                let now = Set(connections.keys)
                if !now.subtracting(connected).isEmpty {
                    status.indexUpdated()
                    trigger.yield(.disk("a peer connecting"))
                }
                connected = now
            }
        })

        // `kaiten ui`'s one-time link, when the REST API (which serves the page) is on.
        let loginToken: @Sendable () -> String? = { [apiListener, pageListener, browserSessions] in
            apiListener.isServing || pageListener.isServing ? browserSessions.issueLoginToken() : nil
        }
        // Files read on the live sessions: for --serve, and for the verbs beside the service.
        let files = RemoteFiles(home: home, cacheBytes: options.serve == nil ? 8 << 20 : options.cacheBytes, logger: logger, sessions: sessions)
        var endpoints: LocalEndpoints?
        do {
            endpoints = try await LocalEndpoints.start(
                home: home, files: files, peerAddresses: addresses, folders: folderIDs, role: "run", stop: stop,
                // The page plays and downloads files through signed links: with the REST API on
                // and no --serve, the on-demand server listens on a loopback port of its own.
                http: (options.serve ?? (options.restAPI ? (host: "127.0.0.1", port: 0) : nil)).map { serve in
                    LocalEndpoints.HTTP(
                        host: serve.host, port: serve.port, thumbnails: options.thumbnails, log: { [emit] in emit(ServiceEvent("serve", $0)) })
                },
                controlLog: { [emit] in emit(ServiceEvent("control", $0)) }, events: emit,
                controlFailed: { [emit] in emit(ServiceEvent("error", $0)) }, loginToken: loginToken)
            if let base = endpoints?.baseURL { status.serving(base) }
        } catch {
            emit(ServiceEvent("error", "cannot serve on demand: \(error)"))
            // The control socket without the HTTP server: the verbs beside the service still work.
            endpoints = try? await LocalEndpoints.start(
                home: home, files: files, peerAddresses: addresses, folders: folderIDs, role: "run", stop: stop, http: nil,
                controlLog: { [emit] in emit(ServiceEvent("control", $0)) }, events: emit,
                controlFailed: { [emit] in emit(ServiceEvent("error", $0)) }, loginToken: loginToken)
        }
        var apiState: ServiceAPIState?
        if options.restAPI {
            let control = ServiceAPIState.Control(
                scan: { folder, paths in
                    if let folder, !paths.isEmpty {
                        for path in paths { trigger.yield(.folder(folder, path: path)) }
                    } else {
                        trigger.yield(.disk("a scan asked through the REST API"))
                    }
                },
                reload: { trigger.yield(.config) }, stop: { stop.raise(SIGTERM) })
            let state = ServiceAPIState(
                home: home, sessions: sessions, said: said, events: apiEvents, counters: counters, status: status, addresses: addresses,
                startTime: startTime, useCases: options.useCases, control: control, files: files)
            apiState = state
            if let url = await apiListener.serve(api(home, state: state)) { status.restAPI(url) }
            if let page = options.page {
                // <gui>'s keys, user and session settings, at the page's own address.
                var configuration = api(home, state: state)
                configuration.gui.isEnabled = true
                configuration.gui.address = (page.host.contains(":") ? "[\(page.host)]" : page.host) + ":\(page.port)"
                configuration.gui.useTLS = page.tls
                configuration.role = .page
                if let url = await pageListener.serve(configuration) { status.page(url) }
            }
        }
        if first {
            apiEvents.startupComplete(myID: home.identity.deviceID)
            emit(ServiceEvent("started", "running: folders \(folderIDs.joined(separator: ", ")), apply \(options.mode.rawValue), pid \(getpid())"))
        }
        status.peers(sessions.connections())

        var outcome = Outcome.stop
        var reason = first ? "start" : "a configuration change"
        // Each folder's state kept between rounds (the log read once, the last scan); a folder
        // that cannot be opened so is planned whole every round.
        var live: [String: LiveFolder] = [:]
        for folder in folders {
            do {
                live[folder.id] = try LiveFolder(folder, home: home, warn: { [emit] in emit(ServiceEvent("warning", $0)) })
            } catch {
                emit(ServiceEvent("warning", folder: folder.id, "\(error); this folder is planned whole every round"))
            }
        }
        defer { for view in live.values { view.close() } }
        let rounds = ServiceRound(
            home: home, options: options, folders: folderIDs, sessions: sessions, live: live, status: status, standing: Standing(), stop: stop,
            log: RoundLog(), logger: logger, emit: emit)
        var woken = Triggers.Woken()
        woken.whole = true
        loop: while true {
            for folder in folderIDs { apiEvents.stateChanged(folder: folder, from: "idle", to: "scanning") }
            let retryWhole = await rounds.run(woken: woken, reason: reason)
            for folder in folderIDs { apiEvents.stateChanged(folder: folder, from: "scanning", to: "idle") }
            counters.roundEnded()
            apiState?.roundEnded(folders: folderIDs)
            // glibc keeps a round's freed heap unless asked, and an idle service should not sit
            // on a round's peak, nor keep mapped the code a round ran once.
            sessions.settleIntake()
            for (folder, view) in live { view.betweenRounds(warn: { emit(ServiceEvent("warning", folder: folder, $0)) }) }
            FrameMemory.releaseKept()
            FreedHeap.giveBack()
            MappedCode.unmapIdlePages()
            // Everything that arrived meanwhile (during the round, or the quiet time after the
            // first trigger) is one more round: a burst of changes is one round.
            woken = await trigger.wait()
            if woken.stop || stop.isSet { break loop }
            if !woken.config {
                let news = rounds.settleDiskPaths(&woken)
                try? await Task.sleep(for: .seconds(news ? options.debounce : options.peerQuiet))
                woken.merge(trigger.take())
                if woken.stop || stop.isSet { break loop }
            }
            if woken.config {
                do {
                    _ = try KaitenHome.open(homePath)
                    outcome = .reload
                    break loop
                } catch {
                    emit(ServiceEvent("error", "\(error); config.xml does not load: the service keeps running on the last good configuration"))
                }
            }
            reason = woken.reason ?? "the periodic rescan"
            _ = rounds.settleDiskPaths(&woken)
            if retryWhole { woken.whole = true }
        }

        reloads.detach()
        redial.cancel()
        watcher.stop()
        for feeder in feeders { feeder.cancel() }
        await saying("closing the control socket and the on-demand server", { await endpoints?.close() })
        return outcome
    }

    /// The REST API of this configuration: config.xml's `<gui>`, over the live sessions.
    private func api(_ home: KaitenHome, state: ServiceAPIState) -> RESTListener.Configuration {
        RESTListener.Configuration(
            gui: home.config.gui,
            state: state,
            sessions: browserSessions,
            home: home.home,
            log: { [logger] in logger.debug("rest: \($0)") },
            said: { [emit] kind, message in emit(ServiceEvent(kind, message)) })
    }

    /// Runs one step of a reload or a stop; one that takes longer than `limit` is said, once,
    /// with what it is: a reload that stalls names what it waits for instead of going quiet.
    private func saying(_ step: String, after limit: Duration = .seconds(15), _ body: () async -> Void) async {
        let watch = Task { [emit] in
            try await Task.sleep(for: limit)
            emit(ServiceEvent("warning", "still \(step) after \(limit.components.seconds) s"))
        }
        await body()
        watch.cancel()
    }
}

/// What says that a file was replaced or changed: its inode, size and modification time (a
/// crash-safe write renames a new inode into place).
public struct FileStamp: Equatable, Sendable {
    public let inode: UInt64
    public let size: Int64
    /// Nanoseconds since the epoch.
    public let modified: Int64

    public init?(_ path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
    }
}
