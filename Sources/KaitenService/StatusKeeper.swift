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
import Glibc

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
        record.withLock { $0.requirePeers = options.requirePeers }
        save()
    }

    private func now() -> String { stamps.withLock { $0.string(from: Date()) } }

    private func save() { record.withLock { $0 }.save(home.home) }

    func indexUpdated() {
        let at = now()
        record.withLock { $0.lastIndexUpdate = at }
        save()
    }

    /// The on-demand server's port, once it serves.
    var servingPort: Int? {
        record.withLock { $0.serveURL }.flatMap { url in url.split(separator: ":").last.flatMap { Int($0.prefix { $0.isNumber }) } }
    }

    func serving(_ url: String) {
        record.withLock { $0.serveURL = url }
        save()
    }

    func restAPI(_ url: String) {
        record.withLock { $0.restURL = url }
        save()
    }

    func page(_ url: String) {
        record.withLock { $0.pageURL = url }
        save()
    }

    func peers(_ connections: [DeviceID: PeerConnection]) {
        let me = home.identity.deviceID
        let peers = home.config.devices.filter { $0.id != me }.map {
            ServiceRecord.Peer(
                id: $0.id.description, name: $0.name, connected: connections[$0.id] != nil,
                address: connections[$0.id]?.remoteAddress, via: connections[$0.id]?.reachedVia)
        }
        let changed = record.withLock { record -> Bool in
            let old = record.peers.map { "\($0.id)\($0.connected)\($0.address ?? "")\($0.via ?? "")" }
            record.peers = peers
            return old != peers.map { "\($0.id)\($0.connected)\($0.address ?? "")\($0.via ?? "")" }
        }
        if changed { save() }
    }

    /// The round running now: when it began, what it does, and whether the record shows it.
    private struct Running {
        var number: Int
        var since: String
        var doing: String
        var shown = false
    }
    private let running = Mutex<Running?>(nil)
    private let roundsStarted = Atomic<Int>(0)
    /// How long a round runs before the record says so (``ServiceRecord/Busy/after``; tests shorten it).
    var busyAfter = ServiceRecord.Busy.after

    /// A round begins. If it is still running after ``busyAfter`` seconds, the record says since
    /// when and what it is doing (a service that seems stuck says where); short rounds cost no write.
    func roundStarted(doing: String) {
        let number = roundsStarted.add(1, ordering: .relaxed).newValue
        let since = now()
        running.withLock { $0 = Running(number: number, since: since, doing: doing) }
        let after = busyAfter
        let timer = Task { [weak self] in
            try? await Task.sleep(for: .seconds(after))
            guard let self else { return }
            let busy = self.running.withLock { running -> ServiceRecord.Busy? in
                guard running?.number == number else { return nil }
                running?.shown = true
                return running.map { ServiceRecord.Busy(since: $0.since, doing: $0.doing) }
            }
            if let busy { self.show(busy) }
        }
        busyTimer.withLock { $0 = timer }
    }

    /// The last round's busy timer (tests wait for it to have decided, rather than for a time).
    private let busyTimer = Mutex<Task<Void, Never>?>(nil)

    func busyTimerDecided() async {
        await busyTimer.withLock { $0 }?.value
    }

    /// What the running round does now.
    func roundDoing(_ doing: String) {
        let busy = running.withLock { running -> ServiceRecord.Busy? in
            running?.doing = doing
            guard let running, running.shown else { return nil }
            return ServiceRecord.Busy(since: running.since, doing: doing)
        }
        if let busy { show(busy) }
    }

    /// The round is over.
    func roundEnded() {
        let shown = running.withLock { running -> Bool in
            defer { running = nil }
            return running?.shown ?? false
        }
        if shown { show(nil) }
    }

    private func show(_ busy: ServiceRecord.Busy?) {
        record.withLock { $0.busy = busy }
        save()
    }

    /// The last round's outcome, nil before the first.
    var lastRound: ServiceRecord.Round? { record.withLock { $0.lastRound } }

    /// The last rounds' outcomes, the newest first (at most ``roundsKept``).
    var recentRounds: [ServiceRecord.Round] { recent.withLock { Array($0.reversed()) } }
    static let roundsKept = 20
    private let recent = Mutex<[ServiceRecord.Round]>([])

    func round(planned: Int, applied: Int, failed: Int, pending: Int, conflicts: Int, error: String?, paths: Int? = nil) {
        let at = now()
        record.withLock {
            let number = ($0.lastRound?.number ?? 0) + 1
            $0.lastRound = ServiceRecord.Round(
                at: at, planned: planned, applied: applied, failed: failed, pending: pending, conflicts: conflicts, error: error,
                number: number, paths: paths)
            let round = $0.lastRound!
            recent.withLock { rounds in
                rounds.append(round)
                if rounds.count > Self.roundsKept { rounds.removeFirst(rounds.count - Self.roundsKept) }
            }
        }
        save()
    }
}
