import Foundation
import KaitenApply
import KaitenConfig
import KaitenDiscovery
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
        /// Makes `/thumb` answer on the server (the CLI composes the media parts): given the
        /// files the server reads, a thumbnail maker and what ends it; nil: no thumbnails.
        public var thumbnails: (@Sendable (RemoteFiles) async -> (make: StreamServer.ThumbnailMaker, close: @Sendable () async -> Void)?)?
        /// `--import SRC:FOLDER`: sources watched for new media (a card inserted, a phone
        /// mounted), imported when they appear or change; the round that follows sends them.
        public var imports: [ImportWatch] = []

        public init() {}
    }

    /// A scoped round looks at the paths its triggers named; past this many it plans the whole
    /// folder instead (a walk costs less than that many lookups and scans).
    static let scopeLimit = 10_000

    let homePath: Home
    let options: Options
    let logger: Logger
    let emit: @Sendable (ServiceEvent) -> Void

    public init(home: Home, options: Options, logger: Logger, events: @escaping @Sendable (ServiceEvent) -> Void) {
        self.homePath = home
        self.options = options
        self.logger = logger
        self.emit = events
    }

    /// Runs until `stop` is raised (SIGTERM, SIGINT); `reload` (SIGHUP) reads config.xml again.
    /// A config.xml that no longer loads is said and the last good one kept.
    public func run(stop: StopSignal, reload: AsyncStream<Void>) async throws {
        let lock = try ServiceRecord.lock(homePath, role: "run")
        defer { withExtendedLifetime(lock) {} }
        var home = try KaitenHome.open(homePath)
        let started = ISO8601DateFormatter().string(from: Date())
        let reloads = Reloads(reload)
        let note: @Sendable (String) -> Void = { [emit] in emit(ServiceEvent("peer", $0)) }
        var link = await PeerLink.start(home: home, settings: PeerSettings(readTimeout: options.peerReadTimeout), logger: logger, note: note)
        var first = true
        while true {
            for refusal in home.config.sharingRefusals { emit(ServiceEvent("warning", refusal)) }
            do { try home.recordRunningConfig() } catch { emit(ServiceEvent("warning", "\(error)")) }
            let outcome = await generation(home, link: link, first: first, started: started, stop: stop, reloads: reloads)
            first = false
            guard outcome == .reload else { break }
            do {
                home = try KaitenHome.open(homePath)
                emit(ServiceEvent("config", "config.xml read again; peers and folders follow it"))
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
        }
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
    private func generation(
        _ home: KaitenHome, link: PeerLink, first: Bool, started: String, stop: StopSignal, reloads: Reloads
    ) async -> Outcome {
        let folders = home.config.folders.filter { options.folders.isEmpty || options.folders.contains($0.id) }
        let folderIDs = folders.map(\.id)
        let note: @Sendable (String) -> Void = { [emit] in emit(ServiceEvent("peer", $0)) }
        let sessions = link.sessions
        let discovery = link.discovery
        let addresses = link.addresses
        let status = StatusKeeper(home: home, options: options, folders: folderIDs, started: started)
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
        feeders.append(Task {
            for await update in updates {
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
        let changes = sessions.connectionChanges()
        feeders.append(Task {
            var connected = Set(sessions.connections().keys)
            for await _ in changes {
                // Peers come and go: the status says who is connected now.
                let connections = sessions.connections()
                status.peers(connections)
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

        // Files read on the live sessions: for --serve, and for the verbs beside the service.
        let files = RemoteFiles(home: home, cacheBytes: options.serve == nil ? 8 << 20 : options.cacheBytes, logger: logger, sessions: sessions)
        var endpoints: LocalEndpoints?
        do {
            endpoints = try await LocalEndpoints.start(
                home: home, files: files, peerAddresses: addresses, folders: folderIDs, role: "run", stop: stop,
                http: options.serve.map { serve in
                    LocalEndpoints.HTTP(
                        host: serve.host, port: serve.port, thumbnails: options.thumbnails, log: { [emit] in emit(ServiceEvent("serve", $0)) })
                },
                controlLog: { [emit] in emit(ServiceEvent("control", $0)) }, events: emit,
                controlFailed: { [emit] in emit(ServiceEvent("error", $0)) })
            if let base = endpoints?.baseURL { status.serving(base) }
        } catch {
            emit(ServiceEvent("error", "cannot serve on demand: \(error)"))
            // The control socket without the HTTP server: the verbs beside the service still work.
            endpoints = try? await LocalEndpoints.start(
                home: home, files: files, peerAddresses: addresses, folders: folderIDs, role: "run", stop: stop, http: nil,
                controlLog: { [emit] in emit(ServiceEvent("control", $0)) }, events: emit,
                controlFailed: { [emit] in emit(ServiceEvent("error", $0)) })
        }
        if first {
            emit(ServiceEvent("started", "running: folders \(folderIDs.joined(separator: ", ")), apply \(options.mode.rawValue), pid \(getpid())"))
        }
        status.peers(sessions.connections())

        var outcome = Outcome.stop
        var reason = first ? "start" : "a configuration change"
        let rounds = RoundLog()
        let standing = Standing()
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
        var woken = Triggers.Woken()
        woken.whole = true
        loop: while true {
            let retryWhole = await round(
                home: home, folders: folderIDs, sessions: sessions, live: live, woken: woken, status: status, standing: standing, stop: stop,
                reason: reason, log: rounds)
            // glibc keeps a round's freed heap unless asked, and an idle service should not sit
            // on a round's peak.
            sessions.settleIntake()
            for (folder, view) in live { view.betweenRounds(warn: { emit(ServiceEvent("warning", folder: folder, $0)) }) }
            FrameMemory.releaseKept()
            _ = releaseFreedHeap(0)
            // Everything that arrived meanwhile (during the round, or the quiet time after the
            // first trigger) is one more round: a burst of changes is one round.
            woken = await trigger.wait()
            if woken.stop || stop.isSet { break loop }
            if !woken.config {
                let news = settleDiskPaths(&woken, live: live)
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
            _ = settleDiskPaths(&woken, live: live)
            if retryWhole { woken.whole = true }
        }

        reloads.detach()
        redial.cancel()
        watcher.stop()
        for feeder in feeders { feeder.cancel() }
        await saying("closing the control socket and the on-demand server", { await endpoints?.close() })
        return outcome
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

    /// Sorts the paths the watcher reported: the echo of the service's own writes (the disk
    /// is what it last scanned or wrote there) is dropped; a real change makes the round whole
    /// (the scan finds what the watcher may not have named: a new directory's contents, an edit
    /// that is a conflict). Returns whether there is a change on disk worth waiting for quiet
    /// after (a burst of writes is one round).
    private func settleDiskPaths(_ woken: inout Triggers.Woken, live: [String: LiveFolder]) -> Bool {
        guard !woken.whole else { return woken.disk }
        let news = woken.diskPaths.contains { folder, paths in
            guard let view = live[folder] else { return true }
            return paths.contains { !view.unchanged(at: $0) }
        }
        if !news {
            // Said at debug level: what a test (or a person with --verbose) waits for to know the
            // echo was seen and set aside, before it asserts that no round followed.
            let echoes = woken.diskPaths.flatMap { folder, paths in paths.map { "\(folder)/\($0)" } }.sorted()
            logger.debug("the echo of this service's own writes, not news: \(echoes.prefix(5).joined(separator: ", "))\(echoes.count > 5 ? " and \(echoes.count - 5) more" : "")")
        }
        woken.diskPaths = [:]
        // The round runs for what else woke it, and says so.
        if !news { woken.reason = woken.reasonBesidesPaths }
        if news {
            woken.whole = true
            woken.peerPaths = [:]
        }
        return news
    }

    /// One round: plans what the triggers call for — the paths they named when that is enough
    /// (``scopes(of:live:)``), else every path of every folder — and applies what the mode
    /// admits; then brings this device's announcements in line with what changed. Returns
    /// whether the next round must look at every path (a scoped one left something failed:
    /// a whole round tries it again, as every round did before rounds were scoped).
    private func round(
        home: KaitenHome, folders: [String], sessions: PeerSessions, live: [String: LiveFolder], woken: Triggers.Woken, status: StatusKeeper,
        standing: Standing, stop: StopSignal, reason: String, log: RoundLog
    ) async -> Bool {
        let warn: (String) -> Void = { [emit] in emit(ServiceEvent("warning", $0)) }
        status.roundStarted(doing: "planning (after \(reason))")
        defer { status.roundEnded() }
        if let scopes = scopes(of: woken, folders: folders, live: live) {
            // Only the echo of the service's own writes: nothing to look at.
            if scopes.isEmpty { return false }
            // The plan goes out of scope before the folders' scans are brought up to date: it
            // shares their storage, and a scan held twice is copied whole at the first change.
            func applyScoped() async -> (acted: [String: Set<String>], failed: Int)? {
                guard let prepared = scopedPlan(scopes, home: home, sessions: sessions, live: live, warn: warn) else { return nil }
                status.roundDoing("applying the plan of the paths named")
                return await decideAndApply(prepared, home: home, status: status, standing: standing, stop: stop, reason: reason, log: log)
            }
            if let (acted, failed) = await applyScoped() {
                for (folder, paths) in scopes {
                    guard let view = live[folder] else { continue }
                    let touched = paths.union(acted[folder] ?? [])
                    do { try view.rescan(touched, warn: warn) } catch { warn("\(folder): \(error)") }
                    status.roundDoing("announcing this device's index of \(folder) to the peers")
                    await view.announce(touched, sessions: sessions, warn: { [emit] in emit(ServiceEvent("warning", $0)) })
                }
                return failed > 0
            }
        }
        let session = sessions.session(folders: folders)
        let prepared: Applier.Prepared
        do {
            for view in live.values { try view.refresh() }
            prepared = try Applier.prepare(
                on: session, home: home, folders: folders, requirePeers: options.requirePeers, logs: live.mapValues(\.log), warn: warn)
        } catch {
            emit(ServiceEvent("error", "cannot plan: \(error)"))
            status.round(planned: 0, applied: 0, failed: 0, pending: 0, conflicts: 0, error: "\(error)")
            return false
        }
        for skipped in prepared.skipped { emit(ServiceEvent("warning", folder: skipped.folder, "not planned: \(skipped.reason)")) }
        standing.set(prepared.plan, mode: options.mode)
        status.roundDoing("applying the plan of every path")
        let (acted, _) = await decideAndApply(prepared, home: home, status: status, standing: nil, stop: stop, reason: reason, log: log)
        for state in prepared.states {
            guard let view = live[state.input.id] else { continue }
            view.adopt(state)
            do { try view.rescan(acted[state.input.id] ?? [], warn: warn) } catch { warn("\(state.input.id): \(error)") }
        }
        // An apply announces what it did; a round that applied nothing may still have news for
        // the peers (a file they changed that is not selected here is announced at its new
        // version): an unchanged folder costs no walk (the recorded basis).
        if acted.isEmpty {
            status.roundDoing("announcing this device's index to the peers")
            await sessions.announce(folders: folders, warn: { [emit] in emit(ServiceEvent("warning", $0)) })
        }
        return false
    }

    /// The paths a round may limit itself to, per folder, or nil when it must look at every
    /// path (the watcher's paths are settled before: ``settleDiskPaths(_:live:)``).
    private func scopes(of woken: Triggers.Woken, folders: [String], live: [String: LiveFolder]) -> [String: Set<String>]? {
        guard !woken.whole else { return nil }
        var scopes: [String: Set<String>] = [:]
        for (folder, paths) in woken.peerPaths where folders.contains(folder) && !paths.isEmpty {
            guard live[folder] != nil else { return nil }
            scopes[folder] = paths
        }
        return scopes
    }

    /// The plan of the named paths only, from the folders' state kept in memory; nil when
    /// that is not enough (a deletion, a conflict, a new `.stignore`: things a whole plan
    /// decides across paths) or it cannot be made.
    private func scopedPlan(
        _ scopes: [String: Set<String>], home: KaitenHome, sessions: PeerSessions, live: [String: LiveFolder], warn: (String) -> Void
    ) -> Applier.Prepared? {
        // The round announces what it touched itself (the paths named, not the whole index).
        let session = sessions.session(folders: Array(scopes.keys), announcer: { _ in })
        do {
            var states: [Planner.FolderState] = []
            for (folder, paths) in scopes.sorted(by: { $0.key < $1.key }) {
                guard let view = live[folder] else { return nil }
                states.append(try view.scopedState(paths, requirePeers: options.requirePeers, connected: session.refreshed[folder], warn: warn))
            }
            let plan = try Planner.stamp(states, home: home, requirePeers: options.requirePeers)
            guard plan.folders.allSatisfy(\.isPathLocal) else { return nil }
            return Applier.Prepared(plan: plan, states: states, session: session, warnings: [], skipped: [])
        } catch {
            warn("planning only the changed paths failed (\(error)); planning every path")
            return nil
        }
    }

    /// Says the plan, applies what the mode admits (brakes holding deletions back), records
    /// the outcome. Returns the paths acted on, per folder (empty when nothing ran), and how
    /// many actions failed.
    /// - Parameter standing: for a scoped plan, what the last whole plan left pending (its
    ///   conflicts and what the mode did not admit), which the status keeps showing.
    private func decideAndApply(
        _ prepared: Applier.Prepared, home: KaitenHome, status: StatusKeeper, standing: Standing?, stop: StopSignal, reason: String,
        log: RoundLog
    ) async -> (acted: [String: Set<String>], failed: Int) {
        let paths = prepared.states.allSatisfy { $0.input.scope != nil } ? prepared.states.reduce(0) { $0 + ($1.input.scope?.count ?? 0) } : nil
        let reason = paths.map { "\(reason) (\($0) path\($0 == 1 ? "" : "s") looked at)" } ?? reason
        let plan = prepared.plan
        let planned = plan.folders.reduce(0) { $0 + $1.actions.count }
        let conflicts = plan.folders.reduce(0) { $0 + $1.conflicts.count }
        let (heldPending, heldConflicts) = standing?.get() ?? (0, 0)
        var admitted = options.mode.filter(plan)
        let count = admitted.folders.reduce(0) { $0 + $1.actions.count }
        guard planned > 0 || conflicts > 0 else {
            if standing == nil { _ = log.same("") }
            status.round(planned: 0, applied: 0, failed: 0, pending: heldPending, conflicts: heldConflicts, error: nil, paths: paths)
            return ([:], 0)
        }
        // The same plan again (held by a brake, left for review) is said once, not every round.
        let fingerprint = plan.folders.map { f in f.actions.map { "\($0.action.rawValue) \($0.path) \($0.version)" }.joined(separator: "\n") + "\(f.conflicts.count)" }
            .joined(separator: "\n")
        let repeated = standing == nil && log.same(fingerprint)
        if !repeated {
            emit(ServiceEvent(
                "plan", "after \(reason): \(planned) action\(planned == 1 ? "" : "s") planned, \(count) admitted by --apply \(options.mode.rawValue), \(conflicts) conflict\(conflicts == 1 ? "" : "s") (left for `kaiten apply` / `kaiten conflicts`)"))
            sayConflicts(plan)
        }
        guard count > 0 else {
            status.round(planned: planned, applied: 0, failed: 0, pending: heldPending + planned, conflicts: heldConflicts + conflicts, error: nil, paths: paths)
            return ([:], 0)
        }
        let emit = self.emit
        let pipeline = ApplyPipeline(
            home: home, maxDelete: options.maxDelete, brakes: .holdDeletions, requirePeers: options.requirePeers, sendTimeout: 0)
        let outcome = try? await pipeline.run(lock: .refuse, prepare: { prepared }, choice: .fresh(decide: { _ in admitted }), stop: stop) { event in
            switch event {
            case .done(let folder, let action, let note):
                emit(ServiceEvent("done", folder: folder, path: action.path, action: action.action.rawValue, note ?? action.reason))
            case .failed(let folder, let action, let reason):
                emit(ServiceEvent("failed", folder: folder, path: action.path, action: action.action.rawValue, reason))
            case .kept(let folder, let action, let reason):
                emit(ServiceEvent("kept", folder: folder, path: action.path, action: action.action.rawValue, reason))
            case .conflictCopy(let folder, let path, let copy):
                emit(ServiceEvent("conflict-copy", folder: folder, path: path, "moved aside as \(copy)"))
            case .removedTemporary, .start, .progress, .sendHeld, .sendNotHeld, .awaitingPeers:
                break
            }
        }
        let report: ApplyReport
        switch outcome?.ending {
        case .applied(let applied, let done, let held):
            for brake in held where !repeated { emit(ServiceEvent("kept", folder: brake.folder, brake.heldBack)) }
            admitted = applied
            report = done
        case .refused(let refusal):
            // Another apply (a person's, through the socket or not) holds the lock, or a folder
            // cannot be written: the next round tries again.
            if !repeated { emit(ServiceEvent("plan", "\(refusal); the next round tries again")) }
            status.round(
                planned: planned, applied: 0, failed: 0, pending: heldPending + planned, conflicts: heldConflicts + conflicts,
                error: "\(refusal)", paths: paths)
            return ([:], 1)
        case .nothingToApply, nil:
            return ([:], 0)
        }
        let ran = admitted.folders.reduce(0) { $0 + $1.actions.count }
        if report.done > 0 || report.failed.count > 0 || !repeated { emit(ServiceEvent(
            "applied",
            "\(report.done) done, \(report.failed.count) failed, \(report.keptForSafety.count) kept for safety, \(planned - ran) left for review"
                + (report.notDone > 0 ? ", \(report.notDone) not done (stopping; resumed at the next start)" : "")
        )) }
        status.round(
            // done may count more than the plan's actions (a directory made on the way): never below 0.
            planned: planned, applied: report.done, failed: report.failed.count, pending: heldPending + max(0, planned - report.done),
            conflicts: heldConflicts + conflicts, error: nil, paths: paths)
        var acted: [String: Set<String>] = [:]
        for folder in admitted.folders {
            var paths = Set(folder.actions.map(\.path))
            for copy in report.conflictCopies where copy.folder == folder.id { paths.insert(copy.path) }
            paths.remove(".stignore")
            acted[folder.id] = paths
        }
        return (acted, report.failed.count)
    }
}

extension Service {
    /// The most conflicts a round names one by one; `kaiten conflicts` lists every one.
    static let conflictsNamed = 20

    /// Names each conflict a plan leaves (its path, why, and how to settle it), the first
    /// ``conflictsNamed`` of them.
    func sayConflicts(_ plan: Plan) {
        var named = 0
        var more = 0
        for folder in plan.folders {
            for conflict in folder.conflicts {
                guard named < Self.conflictsNamed else {
                    more += 1
                    continue
                }
                named += 1
                let choices = conflict.choices.isEmpty
                    ? "" : "; settle with: kaiten resolve \(folder.id) \(conflict.path) " + conflict.choices.map { "--\($0)" }.joined(separator: " | ")
                emit(ServiceEvent("conflict", folder: folder.id, path: conflict.path, "\(conflict.kind.rawValue): \(conflict.reason)\(choices)"))
            }
        }
        if more > 0 { emit(ServiceEvent("conflict", "and \(more) more: kaiten conflicts lists them all")) }
    }
}

/// glibc's `malloc_trim` (declared in malloc.h, which the Glibc module does not export).
@_silgen_name("malloc_trim")
private func releaseFreedHeap(_ keep: Int) -> Int32

