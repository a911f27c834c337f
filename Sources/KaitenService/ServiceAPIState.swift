import Foundation
import KaitenConfig
import KaitenHTTPAPI
import KaitenIndex
import KaitenStream
import KaitenPeer
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSync
import Synchronization

/// What the REST API reads of a running service: the configuration it runs on, the peers'
/// connections as they are now, and what it said.
final class ServiceAPIState: APIState, @unchecked Sendable {  // KaitenHome is read-only after load
    let home: KaitenHome
    let sessions: PeerSessions
    let said: ServiceMessages
    let apiEvents: APIEvents
    var events: EventLog { apiEvents.log }
    let counters: ServiceCounters
    let status: StatusKeeper
    var onDemandPort: Int? { status.servingPort }
    let addresses: [String]
    let startTime: Date
    let useCases: (any APIUseCases)?
    /// Where a scan, a restart and a shutdown are asked for.
    let control: Control
    let files: RemoteFiles
    private let bound = Mutex("")
    /// What the last round found of each folder, for /metrics (a scrape reads no index).
    private let figures = Mutex<[String: Figures]>([:])
    private let memo = FolderFiguresMemo()

    struct Figures {
        var summary: APIFolderSummary?
        var lastCopies = 0
    }

    struct Control: Sendable {
        let scan: @Sendable (_ folder: String?, _ paths: [String]) -> Void
        let reload: @Sendable () -> Void
        let stop: @Sendable () -> Void
    }

    init(
        home: KaitenHome, sessions: PeerSessions, said: ServiceMessages, events: APIEvents, counters: ServiceCounters, status: StatusKeeper,
        addresses: [String], startTime: Date, useCases: (any APIUseCases)?, control: Control, files: RemoteFiles
    ) {
        self.useCases = useCases
        self.control = control
        self.files = files
        self.apiEvents = events
        self.counters = counters
        self.status = status
        self.home = home
        self.sessions = sessions
        self.said = said
        self.addresses = addresses
        self.startTime = startTime
    }

    /// The address the listener is bound to (with port 0, the one the system chose).
    var guiAddressUsed: String {
        get { bound.withLock { $0 } }
        set { bound.withLock { $0 = newValue } }
    }

    var myID: DeviceID { home.identity.deviceID }

    /// config.xml as written now: a change made through the API shows at once, before the
    /// reload it starts has brought the service under it.
    func configJSON() -> [String: Any] {
        ((try? ConfigFile.load(path: home.home.configPath)) ?? home.config).syncthingJSON()
    }

    func listeners() -> [APIListener] { addresses.map { APIListener(address: $0) } }

    func connections() -> [APIConnection] {
        let open = sessions.connections()
        return home.config.devices.filter { $0.id != myID }.map { device in
            guard let connection = open[device.id] else { return APIConnection(deviceID: device.id, connected: false, paused: device.isPaused) }
            let hello = connection.hello
            return APIConnection(
                deviceID: device.id, connected: true, paused: device.isPaused, address: connection.remoteAddress,
                clientVersion: hello.clientName == "syncthing" ? hello.clientVersion : "\(hello.clientName) \(hello.clientVersion)",
                type: connection.syncthingType, crypto: "TLS1.3", startedAt: connection.openedAt,
                inBytesTotal: Int64(connection.bytesReceived), outBytesTotal: Int64(connection.bytesSent))
        }
    }

    func messages() -> [APIMessage] { said.all() }

    func paths() -> [String: String] {
        let home = home.home
        return [
            "baseDir-config": home.path, "baseDir-data": home.path, "baseDir-userHome": NSHomeDirectory(), "config": home.configPath,
            "certFile": home.certificatePath, "keyFile": home.keyPath, "httpsCertFile": HTTPSCertificate.certificatePath(home),
            "httpsKeyFile": HTTPSCertificate.keyPath(home), "database": home.indexDirectory, "defFolder": NSHomeDirectory(),
        ]
    }

    /// Read from the folder's log and scan cache as `kaiten status` reads them beside the
    /// service (read-only; the service's rounds keep both current), or the figures kept from the
    /// last time when none of those files changed since.
    func folderSummary(_ folderID: String, device: DeviceID?) throws -> APIFolderSummary? {
        guard let folder = home.config.folder(id: folderID) else { return nil }
        let counted = try memo.summary(folder, device: device, home: home) {
            let log = try PeerGenerations.openLog(home: home, folder: folderID, readOnly: true, warn: { _ in })
            defer { log.close() }
            return try counts(folder, device: device, log: log, tree: nil)
        }
        return withState(counted, folder: folderID)
    }

    /// A folder's counts and completion from its open log (and its last scan, when read already).
    private func counts(_ folder: FolderConfiguration, device: DeviceID?, log: IndexLog, tree: LocalTree?) throws -> APIFolderSummary {
        let completion = try device.map { FolderCompletion.remote(global: log.index, device: $0) }
            ?? Planner.completion(folder, home: home, log: log, tree: tree)
        func counts(_ c: FolderCompletion.Counts) -> APIFolderSummary.Counts {
            APIFolderSummary.Counts(files: c.files, directories: c.directories, symlinks: c.symlinks, deleted: c.deleted, bytes: c.bytes)
        }
        var summary = APIFolderSummary()
        summary.global = counts(completion.global)
        summary.local = counts(completion.local)
        summary.need = counts(completion.need)
        summary.completion = completion.percent
        if device == nil { summary.selectedBytes = completion.wanted.bytes }
        summary.sequences = log.checkpoints.mapValues { Int64($0.maxSequence) }
        if let device { summary.remoteState = log.checkpoints[device] == nil ? "unknown" : "valid" }
        return summary
    }

    /// The counts with what the folder is doing now.
    private func withState(_ counted: APIFolderSummary, folder: String) -> APIFolderSummary {
        var summary = counted
        if let (state, since) = apiEvents.state(of: folder) {
            summary.state = state
            summary.stateChanged = since
        }
        return summary
    }

    func deviceStats() -> [DeviceID: APIDeviceStats] {
        let seen = apiEvents.deviceStats()
        var stats: [DeviceID: APIDeviceStats] = [:]
        for device in home.config.devices { stats[device.id] = seen[device.id] ?? APIDeviceStats(lastSeen: nil, lastConnectionDuration: 0) }
        return stats
    }

    func folderStats() -> [String: APIFolderStats] { apiEvents.folderStats(home.config.folders.map(\.id)) }

    func folderErrors(_ folder: String) -> [(path: String, error: String)] { apiEvents.folderErrors(folder) }

    func scan(folder: String?, subdirectories: [String]) -> Bool {
        if let folder, home.config.folder(id: folder) == nil { return false }
        control.scan(folder, subdirectories)
        return true
    }

    func restart() { control.reload() }

    func shutdown() { control.stop() }

    func recentRounds() -> [APIRound] {
        status.recentRounds.map { round in
            APIRound(
                number: round.number ?? 0, at: round.at, planned: round.planned, applied: round.applied, failed: round.failed,
                pending: round.pending, conflicts: round.conflicts, error: round.error)
        }
    }

    func onDemandCache() -> (bytes: Int, limit: Int, blocks: Int, fetched: Int) {
        let usage = files.cacheUsage
        return (usage.bytes, usage.limit, usage.blocks, files.blocksFetched)
    }

    /// After a round: each folder's summary and each peer's completion, said as events when
    /// they changed, and what this device's index took in since the last round.
    func roundEnded(folders: [String]) {
        apiEvents.roundEnded(folders: folders)
        for id in folders {
            guard let folder = home.config.folder(id: id) else { continue }
            defer { localIndexChanges(folder) }
            // The log opened and the last scan read once for all of the folder's figures; the
            // counts are walked again only when a file they come from changed.
            var opened: (log: IndexLog, tree: LocalTree)?
            defer { opened?.log.close() }
            func open() throws -> (log: IndexLog, tree: LocalTree) {
                if let opened { return opened }
                let log = try PeerGenerations.openLog(home: home, folder: id, readOnly: true, warn: { _ in })
                opened = (log, Planner.lastScan(id, home: home))
                return opened!
            }
            if let counted = try? memo.summary(folder, device: nil, home: home, compute: {
                let (log, tree) = try open()
                return try counts(folder, device: nil, log: log, tree: tree)
            }) {
                let summary = withState(counted, folder: id)
                apiEvents.folderSummary(id, APIRouter.statusJSON(summary, myID: myID))
                figures.withLock { $0[id, default: Figures()].summary = summary }
            }
            // Every round: a lookup per local file, not a walk of the index (the kept figures
            // may come from a status request, which does not count them).
            if let (log, tree) = try? open() {
                let copies = LastCopies.find(global: log.index, tree: tree, me: myID).count
                figures.withLock { $0[id, default: Figures()].lastCopies = copies }
            }
            for device in folder.devices where device != myID {
                if let counted = try? memo.summary(folder, device: device, home: home, compute: {
                    let (log, tree) = try open()
                    return try counts(folder, device: device, log: log, tree: tree)
                }) {
                    let summary = withState(counted, folder: id)
                    apiEvents.folderCompletion(id, device: device, APIRouter.completionJSON([summary], remote: true, device: device))
                }
            }
        }
    }

    private func localIndexChanges(_ folder: FolderConfiguration) {
        let path = home.home.localIndexPath(folderID: folder.id)
        guard FileManager.default.fileExists(atPath: path), let log = try? IndexLog.open(path: path, folderID: folder.id, readOnly: true) else { return }
        defer { log.close() }
        let me = myID
        let sequence = log.checkpoints[me]?.maxSequence ?? 0
        apiEvents.localIndex(folder.id, label: folder.label, sequence: Int64(sequence)) { since in
            let mine = me.shortID
            // New: only this device has ever written it (its version has no other device's
            // counter). The peers may hold it by the time the round ends, so what they announced
            // cannot say; a file made here and edited here again is said added again.
            var changes = APIEvents.LocalChanges()
            log.index.forEachEntry(from: me, after: Int64(since)) { entry in
                let isNew = entry.version.counters.allSatisfy { $0.id == mine }
                changes.add(APIEvents.LocalChange(entry: entry, madeHere: entry.modifiedBy == mine, isNew: isNew))
            }
            return changes
        }
    }

    func metrics() -> [MetricFamily] {
        typealias Sample = MetricFamily.Sample
        let folderFigures = figures.withLock { $0 }.sorted { $0.key < $1.key }
        let config = home.config
        let open = sessions.connections()
        let peers = config.devices.filter { $0.id != myID }
        let items = counters.items.sorted { ($0.key.folder, $0.key.action, $0.key.outcome) < ($1.key.folder, $1.key.action, $1.key.outcome) }
        let round = status.lastRound
        return [
            MetricFamily(
                "syncthing_build_info", .gauge, help: "A metric with a constant '1' value labeled by version information.",
                [Sample([("program", "kaiten"), ("version", KaitenVersion.current), ("codename", "Kaiten")], 1)]),
            MetricFamily(
                "syncthing_config_device_info", .gauge, help: "Provides additional information labels on devices",
                config.devices.map { device in
                    Sample(
                        [("device", device.id.description), ("introducer", "\(device.isIntroducer)"), ("name", device.name),
                            ("paused", "\(device.isPaused)"), ("untrusted", "\(device.isUntrusted)")], 1)
                }),
            MetricFamily(
                "syncthing_config_folder_info", .gauge, help: "Provides additional information labels on folders",
                config.folders.map { folder in
                    Sample([("folder", folder.id), ("label", folder.label), ("path", folder.path), ("paused", "\(folder.isPaused)"), ("type", folder.type.rawValue)], 1)
                }),
            MetricFamily(
                "syncthing_connections_active", .gauge, help: "Number of currently active connections, per device. If value is 0, the device is disconnected.",
                peers.map { Sample([("device", $0.id.description)], open[$0.id] == nil ? 0 : 1) }),
            MetricFamily(
                "syncthing_protocol_recv_bytes_total", .counter, help: "Total amount of data received, per device (from 0 again on each new connection)",
                peers.map { Sample([("device", $0.id.description)], Double(open[$0.id]?.bytesReceived ?? 0)) }),
            MetricFamily(
                "syncthing_protocol_sent_bytes_total", .counter, help: "Total amount of data sent, per device (from 0 again on each new connection)",
                peers.map { Sample([("device", $0.id.description)], Double(open[$0.id]?.bytesSent ?? 0)) }),
            MetricFamily(
                "syncthing_events_total", .counter, help: "Total number of created/forwarded/dropped events",
                events.madeByType.sorted { $0.key < $1.key }.map { Sample([("event", $0.key), ("state", "created")], Double($0.value)) }),
            MetricFamily("kaiten_apply_rounds_total", .counter, help: "Rounds the service ran (plan, then what --apply admits)", [Sample([], Double(counters.rounds))]),
            MetricFamily(
                "kaiten_plan_actions_total", .counter,
                help: "Actions of the service's plans by folder, kind and outcome: done, failed, kept (held back by a brake or not admitted by --apply)",
                items.map { Sample([("folder", $0.key.folder), ("action", $0.key.action), ("outcome", $0.key.outcome)], Double($0.value)) }),
            MetricFamily(
                "kaiten_plan_pending_actions", .gauge, help: "Actions the last round's plan left for review (not admitted, or held by a brake)",
                [Sample([], Double(round?.pending ?? 0))]),
            MetricFamily("kaiten_plan_conflicts", .gauge, help: "Conflicts the last round's plan left for kaiten resolve", [Sample([], Double(round?.conflicts ?? 0))]),
            MetricFamily(
                "kaiten_folder_items", .gauge,
                help: "syncthing's folder summary (its syncthing_model_folder_summary, a name promtool rejects) as of the last round; need: what the selection asks for and is not here",
                folderFigures.flatMap { folder, figures -> [Sample] in
                    guard let summary = figures.summary else { return [] }
                    return [("global", summary.global), ("local", summary.local), ("need", summary.need)].flatMap { scope, counts in
                        [("files", counts.files), ("directories", counts.directories), ("symlinks", counts.symlinks), ("deleted", counts.deleted)]
                            .map { Sample([("folder", folder), ("scope", scope), ("type", $0.0)], Double($0.1)) }
                            + [Sample([("folder", folder), ("scope", scope), ("type", "bytes")], Double(counts.bytes))]
                    }
                }),
            MetricFamily(
                "kaiten_selected_bytes", .gauge, help: "Bytes of the live files each folder's selection asks for, as of the last round",
                folderFigures.compactMap { folder, figures in figures.summary.map { Sample([("folder", folder)], Double($0.selectedBytes)) } }),
            MetricFamily(
                "kaiten_last_copy_files", .gauge, help: "Files here that no peer holds in the same content, as of the last round",
                folderFigures.map { Sample([("folder", $0.0)], Double($0.1.lastCopies)) }),
            MetricFamily(
                "kaiten_cache_bytes", .gauge, help: "Bytes of verified blocks in the on-demand cache", [Sample([], Double(files.cacheUsage.bytes))]),
        ]
    }
}

extension PeerConnection {
    /// How syncthing names a connection's kind: `tcp-client` (dialled), `tcp-server` (accepted),
    /// `relay-client`, `relay-server`.
    var syncthingType: String { (isRelayed ? "relay" : "tcp") + (reachedVia == "incoming" ? "-server" : "-client") }
}

/// The warnings and errors a service said, the latest ``limit`` of them, for `/rest/system/error`.
final class ServiceMessages: Sendable {
    static let limit = 200
    private let kept = Mutex<[APIMessage]>([])

    func record(_ event: ServiceEvent) {
        let level: APIMessage.Level
        switch event.kind {
        case "warning": level = .warning
        case "error", "failed": level = .error
        default: return
        }
        let text = event.folder.map { "folder \($0): \(event.message)" } ?? event.message
        kept.withLock {
            $0.append(APIMessage(when: event.time, level: level, message: text))
            if $0.count > Self.limit { $0.removeFirst($0.count - Self.limit) }
        }
    }

    func all() -> [APIMessage] { kept.withLock { $0 } }
}
