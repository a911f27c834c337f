import Foundation
import KaitenApply
import KaitenConfig
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

/// One thing the service did or saw, for its log (a line, or an NDJSON event).
public struct ServiceEvent: Sendable, Encodable {
    public var time: Date
    /// `started`, `peer`, `plan`, `done`, `failed`, `kept`, `applied`, `config`, `error`, `stopped`…
    public var kind: String
    public var folder: String?
    public var path: String?
    public var action: String?
    public var message: String

    init(_ kind: String, folder: String? = nil, path: String? = nil, action: String? = nil, _ message: String) {
        time = Date()
        self.kind = kind
        self.folder = folder
        self.path = path
        self.action = action
        self.message = message
    }
}

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
        /// Quiet time after a peer's index update: the batches a peer sends together are one
        /// round, and a change made on a peer is in place here without waiting for --debounce.
        public var peerQuiet: Double = 0.05
        public var maxDelete: DeleteLimit = DeleteLimit("10%")!
        public var requirePeers: Int = 1
        /// The on-demand HTTP server (`--serve`), on the service's live sessions.
        public var serve: (host: String, port: Int)?
        public var cacheBytes = 64 << 20

        public init() {}
    }

    enum Trigger: Sendable {
        case peers(DeviceID, folder: String), disk(String), timer, config, stop

        /// Why a round runs, for its log line.
        var reason: String {
            switch self {
            case .peers(let device, let folder): return "an index update from \(device.shortDescription) for \(folder)"
            case .disk(let what): return what
            case .timer: return "the periodic rescan"
            case .config: return "config.xml"
            case .stop: return "stop"
            }
        }
    }

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
        let lock = try ServiceRecord.lock(homePath)
        defer { withExtendedLifetime(lock) {} }
        var home = try KaitenHome.open(homePath)
        let started = ISO8601DateFormatter().string(from: Date())
        let reloads = Reloads(reload)
        while true {
            let outcome = await generation(home, started: started, stop: stop, reloads: reloads)
            guard outcome == .reload else { break }
            do {
                home = try KaitenHome.open(homePath)
                emit(ServiceEvent("config", "config.xml read again; peers and folders follow it"))
            } catch {
                emit(ServiceEvent("error", "\(homePath.configPath): \(error); keeping the last good configuration"))
            }
        }
        emit(ServiceEvent("stopped", "stopped"))
    }

    /// SIGHUP reloads, as a trigger the generations share.
    final class Reloads: Sendable {
        let pending = Atomic<Int>(0)
        init(_ stream: AsyncStream<Void>) {
            Task { [weak self] in for await _ in stream { self?.pending.add(1, ordering: .relaxed) } }
        }
        func take() -> Bool { pending.exchange(0, ordering: .relaxed) > 0 }
    }

    enum Outcome { case stop, reload }

    /// One configuration's life: sessions up, rounds until stopped or the config changes.
    private func generation(_ home: KaitenHome, started: String, stop: StopSignal, reloads: Reloads) async -> Outcome {
        let folders = home.config.folders.filter { options.folders.isEmpty || options.folders.contains($0.id) }
        let folderIDs = folders.map(\.id)
        let note: @Sendable (String) -> Void = { [emit] in emit(ServiceEvent("peer", $0)) }
        let server = BlockServer(home: home)
        let sessions = PeerSessions(home: home, logger: logger, serve: server.answer)
        let status = StatusKeeper(home: home, options: options, folders: folderIDs, started: started)
        let (listeners, addresses) = await sessions.listen(warn: note)
        if !addresses.isEmpty { note("listening for peers on \(addresses.joined(separator: ", "))") }
        do {
            let reports = try await sessions.connect(folders: folderIDs, warn: note)
            for r in reports where !r.ok {
                note("\(r.folder): \(r.name.isEmpty ? String(r.deviceID.prefix(7)) : r.name): \(r.problem ?? "unreachable")")
            }
        } catch {
            emit(ServiceEvent("error", "\(error)"))
        }
        let redial = sessions.keepConnected(warn: note)
        let watcher = ChangeWatcher(
            folders: folders.map { ($0.id, $0.path) }, selectionDirectory: home.home.selectionsDirectory,
            configPath: home.home.configPath, warn: { [emit] in emit(ServiceEvent("watch", $0)) })

        let trigger = Triggers()
        var feeders: [Task<Void, Never>] = []
        let updates = sessions.updates()
        feeders.append(Task {
            for await update in updates {
                status.indexUpdated()
                trigger.yield(.peers(update.device, folder: update.folder))
            }
        })
        feeders.append(Task {
            for await change in watcher.changes {
                switch change {
                case .config: trigger.yield(.config)
                case .selection: trigger.yield(.disk("a selection file"))
                case .folder(let id, let path): trigger.yield(.disk("a change in \(id)/\(path)"))
                }
            }
        })
        stop.onRaise { _ in trigger.yield(.stop) }
        let configured = folders.map(\.rescanIntervalS).filter { $0 > 0 }.min().map(Double.init)
        feeders.append(Task { [options] in
            var last = ContinuousClock.now
            while !Task.isCancelled {
                // Once a second: idle costs next to nothing (SIGTERM wakes the loop at once).
                try? await Task.sleep(for: .seconds(1))
                if reloads.take() { trigger.yield(.config) }
                var interval = options.rescanInterval ?? configured
                if watcher.limitReached { interval = min(interval ?? 60, 60) }
                if let interval, ContinuousClock.now - last >= .seconds(interval) {
                    last = ContinuousClock.now
                    trigger.yield(.timer)
                }
                // Peers come and go: the status says who is connected now.
                status.peers(sessions.connections())
            }
        })

        // Files read on the live sessions: for --serve, and for the verbs beside the service.
        let files = RemoteFiles(home: home, cacheBytes: options.serve == nil ? 8 << 20 : options.cacheBytes, logger: logger, sessions: sessions)
        let control = ControlServer(
            home: home, sessions: sessions, files: files, folders: folderIDs, role: "run", stop: stop,
            log: { [emit] in emit(ServiceEvent("control", $0)) })
        let controlTask = Task { [emit] in
            do {
                try await control.run()
            } catch {
                emit(ServiceEvent("error", "no control socket, so apply, cat and get cannot work beside this service: \(error)"))
            }
        }
        var streamServer: Task<Void, Error>?
        let stopServer = Mutex<(@Sendable () -> Void)?>(nil)
        if let serve = options.serve {
            do {
                let signer = try URLSigner.load(home: home.home)
                let http = StreamServer(files: files, signer: signer, peerAddresses: addresses, log: { [emit] in emit(ServiceEvent("serve", $0)) })
                streamServer = Task {
                    try await http.run(host: serve.host, port: serve.port) { stopIt in stopServer.withLock { $0 = stopIt } }
                }
                status.serving("http://\(serve.host.contains(":") ? "[\(serve.host)]" : serve.host):\(serve.port)")
            } catch {
                emit(ServiceEvent("error", "cannot serve on demand: \(error)"))
            }
        }
        emit(ServiceEvent("started", "running: folders \(folderIDs.joined(separator: ", ")), apply \(options.mode.rawValue), pid \(getpid())"))
        status.peers(sessions.connections())

        var outcome = Outcome.stop
        var reason = "start"
        let rounds = RoundLog()
        loop: while true {
            await round(home: home, folders: folderIDs, sessions: sessions, status: status, stop: stop, reason: reason, log: rounds)
            // A round reads whole indexes and scans into memory and lets them go; glibc keeps
            // the freed heap unless asked, and an idle service should not sit on a round's peak.
            _ = releaseFreedHeap(0)
            // Everything that arrived meanwhile (during the round, or the quiet time after the
            // first trigger) is one more round: a burst of changes is one round.
            var woken = await trigger.wait()
            if woken.stop || stop.isSet { break loop }
            if !woken.config {
                try? await Task.sleep(for: .seconds(woken.disk ? options.debounce : options.peerQuiet))
                let more = trigger.take()
                woken.config = more.config
                if more.stop || stop.isSet { break loop }
            }
            if woken.config {
                if (try? KaitenHome.open(homePath)) != nil {
                    outcome = .reload
                    break loop
                }
                emit(ServiceEvent("error", "\(homePath.configPath) changed but does not load; keeping the last good configuration"))
            }
            reason = woken.reason ?? "the periodic rescan"
        }

        redial.cancel()
        watcher.stop()
        for feeder in feeders { feeder.cancel() }
        stopServer.withLock { $0?() }
        _ = await streamServer?.result
        control.close()
        _ = await controlTask.result
        for listener in listeners { await listener.close() }
        await sessions.close(reason: outcome == .reload ? "reloading" : "stopping")
        return outcome
    }

    /// Plans from the current index and the disk, applies what the mode admits.
    private func round(
        home: KaitenHome, folders: [String], sessions: PeerSessions, status: StatusKeeper, stop: StopSignal, reason: String, log: RoundLog
    ) async {
        let session = sessions.session(folders: folders)
        let prepared: Applier.Prepared
        do {
            prepared = try Applier.prepare(on: session, home: home, folders: folders, requirePeers: options.requirePeers, warn: { [emit] in
                emit(ServiceEvent("warning", $0))
            })
        } catch {
            emit(ServiceEvent("error", "cannot plan: \(error)"))
            status.round(planned: 0, applied: 0, failed: 0, pending: 0, conflicts: 0, error: "\(error)")
            return
        }
        for skipped in prepared.skipped { emit(ServiceEvent("warning", folder: skipped.folder, "not planned: \(skipped.reason)")) }
        let plan = prepared.plan
        let planned = plan.folders.reduce(0) { $0 + $1.actions.count }
        let conflicts = plan.folders.reduce(0) { $0 + $1.conflicts.count }
        var admitted = options.mode.filter(plan)
        var count = admitted.folders.reduce(0) { $0 + $1.actions.count }
        guard planned > 0 || conflicts > 0 else {
            _ = log.same("")
            status.round(planned: 0, applied: 0, failed: 0, pending: 0, conflicts: 0, error: nil)
            return
        }
        // The same plan again (held by a brake, left for review) is said once, not every round.
        let fingerprint = plan.folders.map { f in f.actions.map { "\($0.action.rawValue) \($0.path) \($0.version)" }.joined(separator: "\n") + "\(f.conflicts.count)" }
            .joined(separator: "\n")
        let repeated = log.same(fingerprint)
        if !repeated { emit(ServiceEvent(
            "plan", "after \(reason): \(planned) action\(planned == 1 ? "" : "s") planned, \(count) admitted by --apply \(options.mode.rawValue), \(conflicts) conflict\(conflicts == 1 ? "" : "s") (left for `kaiten apply` / `kaiten conflicts`)")) }
        guard count > 0 else {
            status.round(planned: planned, applied: 0, failed: 0, pending: planned, conflicts: conflicts, error: nil)
            return
        }
        let lock: Applier.Lock
        do {
            lock = try Applier.lock(home.home)
        } catch {
            emit(ServiceEvent("plan", "\(error.hint); the next round applies"))
            status.round(planned: planned, applied: 0, failed: 0, pending: planned, conflicts: conflicts, error: error.hint)
            return
        }
        defer { withExtendedLifetime(lock) {} }
        do {
            try Applier.checkBrakes(admitted, states: prepared.states, maxDelete: options.maxDelete)
        } catch {
            // A brake holds the deletions back, not the rest.
            if !repeated { emit(ServiceEvent("kept", "\(error.hint); deletions held back, the rest applied")) }
            for i in admitted.folders.indices { admitted.folders[i].actions.removeAll { $0.action == .delete || $0.action == .sendDelete } }
            count = admitted.folders.reduce(0) { $0 + $1.actions.count }
        }
        let emit = self.emit
        let report = await Applier.execute(admitted, prepared: prepared, home: home, requirePeers: options.requirePeers, stop: stop) { event in
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
        if report.done > 0 || report.failed.count > 0 || !repeated { emit(ServiceEvent(
            "applied",
            "\(report.done) done, \(report.failed.count) failed, \(report.keptForSafety.count) kept for safety, \(planned - count) left for review"
        )) }
        status.round(
            planned: planned, applied: report.done, failed: report.failed.count, pending: planned - report.done, conflicts: conflicts, error: nil)
    }
}

/// What woke the loop, gathered until it looks: many triggers, one round.
final class Triggers: Sendable {
    struct Woken {
        var reason: String?
        var config = false
        var stop = false
        /// Something on disk (or the timer) rather than only peers' updates.
        var disk = false
    }
    private let pending = Mutex(Woken())
    private let wake: AsyncStream<Void>
    private let wakeUp: AsyncStream<Void>.Continuation

    init() {
        (wake, wakeUp) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func yield(_ trigger: Service.Trigger) {
        pending.withLock { woken in
            switch trigger {
            case .config: woken.config = true
            case .stop: woken.stop = true
            case .disk, .timer:
                woken.disk = true
                if woken.reason == nil { woken.reason = trigger.reason }
            case .peers:
                if woken.reason == nil { woken.reason = trigger.reason }
            }
        }
        wakeUp.yield()
    }

    /// Waits for a trigger, then takes everything gathered.
    func wait() async -> Woken {
        for await _ in wake {
            let woken = take()
            if woken.reason != nil || woken.config || woken.stop { return woken }
        }
        return Woken(stop: true)
    }

    func take() -> Woken {
        pending.withLock { woken in
            defer { woken = Woken() }
            return woken
        }
    }
}

/// The last plan said, so that the same one is not said every round.
final class RoundLog: Sendable {
    private let last = Mutex<String?>(nil)
    func same(_ fingerprint: String) -> Bool {
        last.withLock { last in
            defer { last = fingerprint }
            return last == fingerprint
        }
    }
}

/// Keeps `state/service.json` current.
final class StatusKeeper: @unchecked Sendable {  // KaitenHome is read-only after load
    private let record: Mutex<ServiceRecord>
    private let home: KaitenHome
    private let stamps = Mutex(ISO8601DateFormatter())

    init(home: KaitenHome, options: Service.Options, folders: [String], started: String) {
        self.home = home
        record = Mutex(
            ServiceRecord(
                pid: getpid(), startedAt: started, applyMode: options.mode.rawValue, folders: folders, peers: [], lastIndexUpdate: nil,
                lastRound: nil, serveURL: nil))
        save()
    }

    private func now() -> String { stamps.withLock { $0.string(from: Date()) } }

    private func save() { record.withLock { $0 }.save(home.home) }

    func indexUpdated() {
        let at = now()
        record.withLock { $0.lastIndexUpdate = at }
        save()
    }

    func serving(_ url: String) {
        record.withLock { $0.serveURL = url }
        save()
    }

    func peers(_ connections: [DeviceID: PeerConnection]) {
        let me = home.identity.deviceID
        let peers = home.config.devices.filter { $0.id != me }.map {
            ServiceRecord.Peer(id: $0.id.description, name: $0.name, connected: connections[$0.id] != nil)
        }
        let changed = record.withLock { record -> Bool in
            let old = record.peers.map { "\($0.id)\($0.connected)" }
            record.peers = peers
            return old != peers.map { "\($0.id)\($0.connected)" }
        }
        if changed { save() }
    }

    func round(planned: Int, applied: Int, failed: Int, pending: Int, conflicts: Int, error: String?) {
        let at = now()
        record.withLock {
            $0.lastRound = ServiceRecord.Round(
                at: at, planned: planned, applied: applied, failed: failed, pending: pending, conflicts: conflicts, error: error)
        }
        save()
    }
}

/// glibc's `malloc_trim` (declared in malloc.h, which the Glibc module does not export).
@_silgen_name("malloc_trim")
private func releaseFreedHeap(_ keep: Int) -> Int32
