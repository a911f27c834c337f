import Foundation
import KaitenConfig
import KaitenDiscovery
import KaitenIndex
import KaitenPeer
import KaitenProtocol
import Logging
import Synchronization

/// One index batch a peer sent on an open connection after its first exchange.
public struct IndexUpdate: Sendable {
    public var device: DeviceID
    public var folder: String
    public var files: [BEPFileInfo]
    public var isFullIndex: Bool
}

/// The peer sessions of a long-running Kaiten (`serve`, `run`): one connection per peer,
/// dialled at start and again when it is lost, or accepted when the peer dials; each one's
/// index taken into the folder logs as it arrives (its first exchange and every update after),
/// and this device's index announced to it. One job: keeping the sessions; what is done with
/// the files is the caller's (serving ranges, reconciling).
public final class PeerSessions: @unchecked Sendable {  // the home behind its lock
    /// The configuration in force: replaced by ``reconfigure(_:)`` (a reload).
    public var home: KaitenHome { configured.current }
    let configured: ConfiguredHome
    let timeout: Double
    let logger: Logger
    let serve: IndexSync.RequestHandler?
    /// Where peers are dialled: a long-running discovery (`run`), or nil: config.xml's
    /// addresses, and discovery started for each dial when a `dynamic` peer needs it.
    let addresses: PeerAddressBook?

    struct State {
        var connections: [DeviceID: PeerConnection] = [:]
        /// Why each peer's last connection ended, for the redial loop to say once.
        var lost: [DeviceID: String] = [:]
        /// Per folder, the peers whose index is current (exchanged on the open connection).
        var current: [String: Set<DeviceID>] = [:]
        /// Per peer, what it holds of this device's local index of each folder.
        var announced: [DeviceID: [String: RemoteIndexState]] = [:]
        /// Per peer, folders it began to share on an open connection whose index has not yet
        /// reached the sequence its ClusterConfig announced (not current until it has).
        var awaited: [DeviceID: [String: Int64]] = [:]
        var intakes: [Task<Void, Never>] = []
        var subscribers: [UUID: AsyncStream<IndexUpdate>.Continuation] = [:]
        /// Told when a connection is kept or lost (``connectionChanges()``).
        var watchers: [UUID: AsyncStream<Void>.Continuation] = [:]
        var closed = false
    }
    let state = Mutex(State())
    /// Exchanges run one at a time: a dialled and an accepted session of one peer must not
    /// both pass the duplicate check, and each announces from the local index it refreshes.
    let exchanges = SerialQueue()
    let dialing = DialsInProgress()
    /// The logs that take peers' updates in, by folder.
    let intake: IntakeLogs
    /// Where what happens on an open connection is said (a peer sharing a folder or stopping):
    /// the last `warn` a caller gave, which says things the way the rest of its output does.
    /// The sessions' timeouts and limits, for every connection dialled or accepted.
    let settings: PeerSettings
    let notices = Mutex<(@Sendable (String) -> Void)?>(nil)

    /// Where a long-running process says that a peer connected or went (its log); one-shot
    /// verbs, whose output is their result, say nothing of it.
    let connectionNotices = Mutex<(@Sendable (String) -> Void)?>(nil)

    public func sayConnections(to say: @escaping @Sendable (String) -> Void) {
        connectionNotices.withLock { $0 = say }
    }

    func sayConnection(_ message: String) {
        if let say = connectionNotices.withLock({ $0 }) { say(message) } else { logger.debug("\(message)") }
    }

    func notice(_ message: String) {
        if let say = notices.withLock({ $0 }) { say(message) } else { logger.info("\(message)") }
    }

    /// - Parameter serve: answers the peers' block requests (the block server); without it
    ///   they get NO_SUCH_FILE.
    /// - Parameter settings: the sessions' timeouts and limits (syncthing's by default).
    public init(
        home: KaitenHome, timeout: Double = 120, logger: Logger, serve: IndexSync.RequestHandler?,
        addresses: PeerAddressBook? = nil, settings: PeerSettings = PeerSettings()
    ) {
        self.settings = settings
        self.addresses = addresses
        let configured = ConfiguredHome(home)
        self.configured = configured
        self.timeout = timeout
        self.logger = logger
        self.serve = serve
        let logger = logger
        intake = IntakeLogs(
            open: { [configured] folder in
                try PeerGenerations.openLog(home: configured.current, folder: folder, readOnly: false)
            }, warn: { logger.warning("\($0)") })
    }

    // MARK: - Connecting

    /// Dials every peer that shares one of `folders` (all when empty), takes in its index and
    /// sends it this device's; returns what happened with each peer and folder.
    @discardableResult
    public func connect(folders: [String] = [], warn: @escaping @Sendable (String) -> Void) async throws -> [IndexSync.Report] {
        notices.withLock { $0 = warn }
        // In turn with accepted sessions: a peer that dials in meanwhile is then seen as
        // connected (and closed as a duplicate) rather than kept beside this one.
        let outcome = Mutex<Result<[IndexSync.Report], Error>>(.success([]))
        let planned = peersSharing(folders)
        dialing.plan(planned)
        defer { dialing.unplan(planned) }
        await exchanges.run {
            do {
                // After a reload, the peers still connected are not dialled again.
                let held = Set(self.connections().keys)
                let only = held.isEmpty ? nil : Set(self.home.config.devices.map(\.id)).subtracting(held)
                let reports = only?.isEmpty == true ? [] : try await self.dial(folders: folders, only: only, warn: warn)
                outcome.withLock { $0 = .success(reports) }
            } catch {
                outcome.withLock { $0 = .failure(error) }
            }
        }
        return try outcome.withLock { $0 }.get()
    }

    /// Stops every dial under way or waiting its turn (a service asked to stop while it
    /// connects: a peer that takes its time answering must not hold the stop up).
    public func abandonDials() async { await dialing.abandonAll() }

    /// The peers that share one of `folders` (all of them when empty): those a connect dials.
    func peersSharing(_ folders: [String]) -> Set<DeviceID> {
        let me = home.identity.deviceID
        let named = Set(folders)
        let folders = home.config.folders.filter { named.isEmpty || named.contains($0.id) }
        return Set(folders.flatMap { $0.devices + $0.encryptedDevices.keys }).subtracting([me])
    }

    /// Dials (only `only`, when given) and keeps what connects; the caller holds the queue.
    func dial(folders: [String], only: Set<DeviceID>?, directOnly: Bool = false, warn: (String) -> Void) async throws
        -> [IndexSync.Report]
    {
        let (reports, fresh) = try await IndexSync.runKeepingConnections(
            home: home, folders: folders, timeout: timeout, logger: logger, serve: serve, only: only, addresses: addresses,
            directOnly: directOnly, dialing: dialing, settings: settings, warn: warn)
        for (device, connection) in fresh.connections { adopt(connection, device: device, announced: fresh.announced[device] ?? [:]) }
        return reports
    }

    /// Redials, with backoff (2 s doubling to 60 s), every configured peer that shares a folder,
    /// has an address (a tcp:// one, or `dynamic` with discovery on) and has no open
    /// connection — one that restarted, a connection cut. A peer discovery just found
    /// (`found`) is dialled at once. Cancel the task to stop.
    public func keepConnected(found: AsyncStream<DeviceID>? = nil, warn: @escaping @Sendable (String) -> Void) -> Task<Void, Never> {
        notices.withLock { $0 = warn }
        let me = home.identity.deviceID
        let wanted = home.config.devices.filter { device in
            device.id != me && mayRoute(device) && home.config.folders.contains { $0.isShared(with: device.id) }
        }.map(\.id)
        return Redialer.start(
            wanted: wanted, target: self, found: found, upgradeInterval: max(5, home.config.options.reconnectionIntervalS),
            clock: ContinuousClock(), warn: warn)
    }

    func mayRoute(_ device: DeviceConfiguration) -> Bool {
        if let addresses { return addresses.mayRoute(device) }
        return ConfiguredAddresses(relaysEnabled: home.config.options.relaysEnabled).mayRoute(device) || Discovery.isNeeded(for: [device], options: home.config.options)
    }

    /// Listens for peers as config.xml says (``PeerListeners``), each connection taken in by
    /// ``accept(_:warn:)``; a peer is allowed while the configuration in force names it (a
    /// reload that removes a peer refuses it from then on).
    public func listen(warn: @escaping @Sendable (String) -> Void) async -> (listeners: [PeerEntrance], addresses: [String]) {
        let me = home.identity.deviceID
        return await PeerListeners.open(
            home: home, settings: settings, logger: logger,
            isAllowed: { device in device != me && self.home.config.device(id: device) != nil },
            accept: { connection in await self.accept(connection, warn: warn) }, warn: warn)
    }

    /// What a peer's connection stands on: its entry and the folders shared with it. A reload
    /// that changes neither leaves its connection open.
    struct PeerTerms: Equatable {
        var device: DeviceConfiguration?
        var folders: [FolderConfiguration]

        init(_ device: DeviceID, in config: ConfigFile) {
            self.device = config.device(id: device)
            folders = config.folders.filter { $0.isShared(with: device) }
        }
    }

    /// Takes a new configuration (a reload): the connections of peers whose terms changed
    /// (removed, their entry edited, a folder shared or unshared or edited) are closed, to be
    /// dialled again under the new terms; the others stay open, and nothing is said to them.
    public func reconfigure(_ new: KaitenHome) async {
        let old = home
        configured.replace(new)
        let changed = connections().filter { device, _ in PeerTerms(device, in: old.config) != PeerTerms(device, in: new.config) }
        for (device, connection) in changed {
            sayConnection("\(peerLabel(device)): its terms in config.xml changed; connecting again under the new ones")
            await connection.close(reason: "the configuration changed")
        }
    }

    /// Takes in a connection a peer started: the same exchange as for a dialled one. A second
    /// connection to a peer already connected is closed ("already connected"), as syncthing
    /// closes it, so that exactly one stays.
    public func accept(_ connection: PeerConnection, warn: @escaping @Sendable (String) -> Void) async {
        // Dialled by a peer this device means to dial too (two Kaitens starting together, or
        // one redialling while the other starts): the dial of the device with the lower ID is
        // kept (``DialsInProgress``). The lower one keeps its own once it got through: until
        // then it is awaited (a moment, on a network that answers), and a dial that fails (the
        // peer does not listen: a one-shot verb) keeps nothing. The higher one gives its own
        // up at once, wherever it is, so that its exchange queue is free for this connection.
        let me = home.identity.deviceID
        if me.bytes.lexicographicallyPrecedes(connection.deviceID.bytes) {
            let patience = ContinuousClock.now + .seconds(15)
            while dialing.state(connection.deviceID) == .planned, ContinuousClock.now < patience {
                try? await Task.sleep(for: .milliseconds(20))
            }
            if dialing.state(connection.deviceID) == .connected {
                await connection.close(reason: "both devices dialled each other; the connection this device dialled is kept")
                return
            }
        } else {
            await dialing.yield(connection.deviceID)
        }
        await exchanges.run {
            // One connection per peer, as syncthing keeps: a second one is closed, unless it
            // is direct and the one held runs through a relay (then it replaces it, in adopt).
            if let held = self.connections()[connection.deviceID], !(held.isRelayed && !connection.isRelayed) {
                await connection.close(reason: "already connected")
                return
            }
            do {
                let (reports, announced) = try await IndexSync.accept(
                    connection, home: self.home, timeout: self.timeout, serve: self.serve, warn: warn)
                for r in reports where !r.ok { warn("\(r.folder): \(r.peerLabel): \(r.problem ?? "")") }
                self.adopt(connection, device: connection.deviceID, announced: announced)
            } catch {
                warn("\(connection.label): \(error)")
                await connection.close(reason: "\(error)")
            }
        }
    }

    /// Keeps a connection past its exchange: its later index batches are taken in.
    func adopt(_ connection: PeerConnection, device: DeviceID, announced: [String: RemoteIndexState]) {
        guard connection.isOpen else { return }
        var replaced: PeerConnection?
        // The connection is held before its intake starts: a ClusterConfig the peer sent right
        // after the exchange (an untrusted device that now has its token lists the folder) is
        // judged against a held connection, not dropped as one of a connection not kept.
        var intake: Task<Void, Never>?
        let refused: Bool = state.withLock { state in
            if state.closed { return true }
            if let held = state.connections[device], held !== connection { replaced = held }
            state.connections[device] = connection
            state.announced[device] = announced
            // The folders both share: its index of each was just exchanged.
            for folder in announced.keys { state.current[folder, default: []].insert(device) }
            let started = Task { await self.takeIn(connection, device: device) }
            state.intakes.append(started)
            intake = started
            return false
        }
        if !refused {
            // Verified by TLS: what discovery heard from that host is the device's own.
            if let host = connection.remoteHost, !connection.isRelayed { addresses?.confirm(device, host: host) }
            sayConnection("\(peerLabel(device)): connected at \(connection.remoteAddress) (\(connection.reachedVia))")
            connectionsChanged()
        }
        if !refused, let replaced {
            logger.info("\(device.shortDescription): a direct connection replaces the one through a relay")
            Task { await replaced.close(reason: "replaced by a direct connection") }
        }
        if refused {
            intake?.cancel()
            Task { await connection.close(reason: "shutting down") }
        }
    }

    /// Writes each index batch the peer sends into the folder's log, durably, then tells the
    /// subscribers. A batch that cannot be stored ends the connection: the next exchange asks
    /// for everything after the last checkpoint again.
    func takeIn(_ connection: PeerConnection, device: DeviceID) async {
        events: for await event in connection.events {
            switch event {
            case .clusterConfig(let clusterConfig):
                do {
                    try sharingChanged(clusterConfig, connection: connection, device: device)
                } catch {
                    logger.warning("\(device.shortDescription): cannot take in the folders it now shares: \(error)")
                    await connection.close(reason: "cannot take in the folders it now shares")
                    break events
                }
            case .index(let folder, let files, let isFull):
                guard home.config.folder(id: folder)?.isShared(with: device) == true else { continue }
                do {
                    try storeBatch(folder: folder, device: device, files: files, isFull: isFull)
                } catch {
                    logger.warning("\(device.shortDescription): cannot store its index update of \(folder): \(error)")
                    await connection.close(reason: "cannot store the index update")
                    break events
                }
                let update = IndexUpdate(device: device, folder: folder, files: files, isFullIndex: isFull)
                for continuation in state.withLock({ Array($0.subscribers.values) }) { continuation.yield(update) }
            case .closed:
                continue
            }
        }
        let reason = await connection.waitUntilClosed()
        // A share the peer took up on this connection is judged complete or not from now on.
        IndexCompleteness.exchangeEnded(home.home, folders: home.config.folders.map(\.id), device: device)
        let wasHeld = state.withLock { state in
            guard state.connections[device] === connection else { return false }
            state.connections[device] = nil
            state.announced[device] = nil
            state.awaited[device] = nil
            state.lost[device] = "\(reason)"
            for folder in state.current.keys { state.current[folder]?.remove(device) }
            return true
        }
        if wasHeld { sayConnection("\(peerLabel(device)): disconnected (\(reason))") }
        connectionsChanged()
    }

    /// A ClusterConfig on a connection past its exchange (the peer's configuration changed):
    /// a folder it now shares too is taken up on this connection as syncthing does (its index
    /// ID noted, this device's index sent; the peer counts as current for it once its index
    /// reaches the sequence it announced), and one it stopped sharing is dropped at once (it
    /// no longer vouches for anything there).
    func sharingChanged(_ clusterConfig: BEPClusterConfig, connection: PeerConnection, device: DeviceID) throws {
        // A secondary connection's ClusterConfig lists no folders and means nothing about them.
        guard !clusterConfig.secondary else { return }
        let me = home.identity.deviceID
        let ours = home.config.folders.filter { $0.isShared(with: device) }.map(\.id)
        if let refusal = EncryptedSharing.refusal(clusterConfig, me: me, peer: device, folders: Set(ours), sealed: connection.sealed.all, held: connection.sealed.held) {
            throw PeerError(.encryptedFolder, peer: device.shortDescription, refusal)
        }
        // A folder held here as the untrusted device that the peer now gives a token for: stored,
        // and the connection ended to be dialled again, as the exchange then lists the folder.
        let stored = try HeldFolders.storeTokens(from: clusterConfig, connection: connection, peer: device, home: home)
        if !stored.isEmpty {
            notice("\(device.shortDescription): stored the password token of \(stored.joined(separator: ", ")); connecting again to list it")
            Task { await connection.close(reason: "listing the folders held for it encrypted") }
            return
        }
        let sharedNow = Set(ours.filter { clusterConfig.device(me, in: $0) != nil && clusterConfig.device(device, in: $0) != nil })
        let (exchanged, isHeld) = state.withLock { state in
            (Set(state.announced[device]?.keys.map { $0 } ?? []), state.connections[device] === connection)
        }
        guard isHeld else { return }
        let stopped = exchanged.subtracting(sharedNow)
        let started = sharedNow.subtracting(exchanged).sorted()
        if !stopped.isEmpty {
            notice("\(device.shortDescription): no longer shares \(stopped.sorted().joined(separator: ", ")) with this device")
            state.withLock { state in
                for folder in stopped {
                    state.announced[device]?[folder] = nil
                    state.awaited[device]?[folder] = nil
                    state.current[folder]?.remove(device)
                }
            }
        }
        guard !started.isEmpty else { return }
        notice("\(device.shortDescription): now shares \(started.joined(separator: ", ")) with this device")
        for folder in started {
            let theirs = clusterConfig.device(device, in: folder)!
            let viewOfUs = clusterConfig.device(me, in: folder)!
            IndexCompleteness.expect(home.home, folder: folder, device: device, indexID: theirs.indexID, maxSequence: theirs.maxSequence)
            // The batches it sends next are stored under its index ID; a new one (it sends its
            // index from the start then, as this device's ClusterConfig held another or none)
            // replaces what the log held of it.
            let held = try intake.begin(folder: folder, device: device, indexID: theirs.indexID)
            state.withLock { state in
                state.announced[device, default: [:]][folder] = RemoteIndexState(indexID: viewOfUs.indexID, maxSequence: viewOfUs.maxSequence)
                if held >= theirs.maxSequence {
                    state.current[folder, default: []].insert(device)
                } else {
                    state.awaited[device, default: [:]][folder] = theirs.maxSequence
                }
            }
        }
        // What it lacks of this device's index of those folders, sent in turn with the other
        // exchanges (not from here: the intake goes on meanwhile).
        Task { await self.announce(folders: started, warn: { self.logger.warning("\($0)") }) }
        connectionsChanged()
    }

    /// `name (ABCDEFG)`, or the short ID of a peer without a name.
    func peerLabel(_ device: DeviceID) -> String {
        DeviceID.labelWithID(device.description, name: home.config.device(id: device)?.name)
    }

    func connectionsChanged() {
        for watcher in state.withLock({ Array($0.watchers.values) }) { watcher.yield() }
    }

    /// Yields whenever a connection is kept (dialled or accepted, its exchange done) or lost,
    /// until the sessions close: the redial loop and a service's status wait on it instead of
    /// looking every second.
    public func connectionChanges() -> AsyncStream<Void> {
        subscribe(\.watchers, buffering: .bufferingNewest(1))
    }

    /// A stream whose continuation is kept in `slot` until the stream is dropped; finished at
    /// once when the sessions are closed already.
    func subscribe<Element>(
        _ slot: WritableKeyPath<State, [UUID: AsyncStream<Element>.Continuation]> & Sendable,
        buffering: AsyncStream<Element>.Continuation.BufferingPolicy
    ) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: buffering)
        let id = UUID()
        let closed = state.withLock { state in
            if !state.closed { state[keyPath: slot][id] = continuation }
            return state.closed
        }
        if closed { continuation.finish() }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0[keyPath: slot].removeValue(forKey: id) } }
        return stream
    }

    /// Between the service's rounds: the intake logs settle (``IntakeLogs/settle()``).
    public func settleIntake() { intake.settle() }

    /// Stores a batch, then counts the peer current for a folder it began to share on this
    /// connection once its index is in.
    func storeBatch(folder: String, device: DeviceID, files: [BEPFileInfo], isFull: Bool) throws {
        let held = try intake.store(folder: folder, device: device, files: files, isFull: isFull)
        state.withLock { state in
            if let target = state.awaited[device]?[folder], held >= target {
                state.awaited[device]?[folder] = nil
                state.current[folder, default: []].insert(device)
            }
        }
    }
}

/// The configuration the sessions work under, replaced by a reload.
final class ConfiguredHome: @unchecked Sendable {  // behind its lock; KaitenHome is read-only once loaded
    private let lock = NSLock()
    private var home: KaitenHome
    init(_ home: KaitenHome) { self.home = home }
    var current: KaitenHome { lock.withLock { home } }
    func replace(_ new: KaitenHome) { lock.withLock { home = new } }
}

/// Runs async work one piece after another (an actor would interleave them at every await).
public final class SerialQueue: Sendable {
    let tail = Mutex<Task<Void, Never>?>(nil)

    public init() {}

    public func run(_ work: @escaping @Sendable () async -> Void) async {
        let task = tail.withLock { tail -> Task<Void, Never> in
            let previous = tail
            let next = Task {
                await previous?.value
                await work()
            }
            tail = next
            return next
        }
        await task.value
    }
}

extension PeerSessions: RedialTarget {
    func connectedPeers() -> [DeviceID: Bool] { connections().mapValues(\.isRelayed) }

    func takeLossReason(_ device: DeviceID) -> String? { state.withLock { $0.lost.removeValue(forKey: device) } }

    /// Dials with the other exchanges, one at a time. An upgrade from a relay (`directOnly`)
    /// is tried quietly: the relayed connection stays whatever happens.
    func dialReportingProblems(_ devices: Set<DeviceID>, directOnly: Bool) async -> [DeviceID: String] {
        let problems = Mutex<[DeviceID: String]>([:])
        let logger = logger
        let warn: @Sendable (String) -> Void
        if directOnly {
            warn = { logger.debug("\($0)") }
        } else {
            warn = { [weak self] in self?.notice($0) }
        }
        dialing.plan(devices)
        defer { dialing.unplan(devices) }
        await exchanges.run {
            do {
                let reports = try await self.dial(folders: [], only: devices, directOnly: directOnly, warn: warn)
                for report in reports where !report.ok {
                    problems.withLock { $0[report.deviceID] = report.problem ?? "unreachable" }
                }
            } catch {
                problems.withLock { for device in devices { $0[device] = "\(error)" } }
            }
        }
        return problems.withLock { $0 }
    }
}
