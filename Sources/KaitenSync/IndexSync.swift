import Foundation
import KaitenConfig
import KaitenDiscovery
import KaitenFiles
import KaitenIndex
import KaitenPeer
import KaitenProtocol
import Logging
import Synchronization

/// Connections to peers left open after an index sync, for block requests.
public final class PeerSession: Sendable {
    public let connections: [DeviceID: PeerConnection]
    /// Per folder, the peers whose index this session brought up to date.
    public let refreshed: [String: Set<DeviceID>]
    /// Per peer, what it holds of this device's local index of each folder (what was sent).
    let announced: [DeviceID: [String: RemoteIndexState]]
    /// The index batches peers send from now on. A session of its own reads them off its
    /// connections (one reader each); one lent by ``PeerSessions`` from what they take in.
    public let updates: @Sendable () -> AsyncStream<IndexUpdate>
    /// How a lent session announces (the lender keeps what each peer holds of ours).
    let announcer: (@Sendable ([String]) async -> Void)?
    /// Lent by a service's ``PeerSessions``: its connections are the service's, and outlive it.
    public let isLent: Bool

    /// - Parameter lent: the connections are a service's and outlive the session.
    public init(
        connections: [DeviceID: PeerConnection], refreshed: [String: Set<DeviceID>],
        announced: [DeviceID: [String: RemoteIndexState]] = [:], updates: (@Sendable () -> AsyncStream<IndexUpdate>)? = nil,
        announcer: (@Sendable ([String]) async -> Void)? = nil, lent: Bool = false
    ) {
        self.isLent = lent
        self.connections = connections
        self.refreshed = refreshed
        self.announced = announced
        self.updates = updates ?? { Self.reading(connections) }
        self.announcer = announcer
    }

    /// The index batches arriving on `connections`, read off them.
    static func reading(_ connections: [DeviceID: PeerConnection]) -> AsyncStream<IndexUpdate> {
        AsyncStream { continuation in
            let tasks = connections.map { device, connection in
                Task {
                    for await event in connection.events {
                        guard case .index(let folder, let files, let isFull) = event else { continue }
                        continuation.yield(IndexUpdate(device: device, folder: folder, files: files, isFullIndex: isFull))
                    }
                }
            }
            continuation.onTermination = { _ in for task in tasks { task.cancel() } }
        }
    }

    /// Announces to the open connections what changed in the local index since this session
    /// began (after an apply: the files now held). Failures only cost the announcement: the
    /// next session sends it again.
    public func announceChanges(home: KaitenHome, folders: [String], warn: (String) -> Void = { _ in }) async {
        if let announcer {
            await announcer(folders)
            return
        }
        do {
            let announcer = try LocalAnnouncer(home: home, folders: folders, warn: warn)
            defer { announcer.close() }
            for folder in folders {
                let log = try PeerGenerations.openLog(home: home, folder: folder, readOnly: true)
                defer { log.close() }
                try announcer.refresh(folder: folder, log: log, warn: warn)
            }
            for (device, connection) in openConnections {
                let shared = folders.filter { home.config.folder(id: $0)?.isShared(with: device) == true }
                try await announcer.send(to: connection, folders: shared, theirView: announced[device] ?? [:])
            }
        } catch {
            warn("could not announce this device's index: \(error)")
        }
    }

    /// The peers that count as holders of a folder's files right now: their index was
    /// refreshed by this session and their connection is still open. A peer known only from
    /// the log (offline now) holds nothing as far as a deletion is concerned.
    public func live(folder: String) -> Set<DeviceID> {
        (refreshed[folder] ?? []).filter { connections[$0]?.isOpen == true }
    }

    /// The connections that are still open: a peer that went away after the sync is no
    /// source of blocks.
    public var openConnections: [DeviceID: PeerConnection] {
        connections.filter { $0.value.isOpen }
    }

    /// Closes the session's connections, each peer given time to hang up first
    /// (``PeerConnection/oneShotCloseGrace``): the next command's connection is not turned away.
    public func close(reason: String = "done") async {
        await connections.values.closeAll(reason: reason, hangUpAfter: PeerConnection.oneShotCloseGrace)
    }

    /// Ends the session: closes its connections, unless they are lent (a service keeps them).
    public func end(reason: String) async {
        if !isLent { await close(reason: reason) }
    }
}

/// `kaiten index sync`: connect to every peer sharing the folders, receive what is new, append
/// it to each folder's log, disconnect.
public enum IndexSync {
    /// Per folder, the peers whose index a run brought up to date (the peers reachable now).
    public static func refreshedPeers(_ reports: [Report]) -> [String: Set<DeviceID>] {
        var refreshed: [String: Set<DeviceID>] = [:]
        for report in reports where report.ok {
            refreshed[report.folder, default: []].insert(report.deviceID)
        }
        return refreshed
    }

    /// What happened with one peer and one folder.
    public struct Report: Sendable, Codable {
        public var folder: String
        public var deviceID: DeviceID
        public var name: String
        public var ok: Bool
        public var problem: String?
        public var filesReceived = 0
        public var fullIndex = false
        public var indexID: String?
        public var sequence: Int64 = 0

        /// The peer as a line names it.
        public var peerLabel: String { DeviceID.label(deviceID.description, name: name) }

        // snake_case, as every other JSON Kaiten prints.
        enum CodingKeys: String, CodingKey {
            case folder, deviceID = "device_id", name, ok, problem, filesReceived = "files_received"
            case fullIndex = "full_index", indexID = "index_id", sequence
        }
    }

    /// Opens the log of each folder (creating missing ones).
    public static func openLogs(home: KaitenHome, folders: [String], warn: (String) -> Void) throws -> [String: IndexLog] {
        try FileManager.default.createDirectory(atPath: home.home.indexDirectory, withIntermediateDirectories: true)
        var logs: [String: IndexLog] = [:]
        for folder in folders {
            logs[folder] = try PeerGenerations.openLog(home: home, folder: folder, readOnly: false, warn: warn)
        }
        return logs
    }

    /// Syncs the given folders (all configured folders when empty).
    /// - Parameter addresses: where to dial the peers; nil: config.xml's addresses, and
    ///   discovery for `dynamic` peers when config.xml turns it on (started for this run).
    public static func run(
        home: KaitenHome, folders requested: [String], timeout: Double = 120,
        logger: Logger = Logger(label: "kaiten.sync"), addresses: PeerAddressBook? = nil, warn: (String) -> Void = { _ in }
    ) async throws -> [Report] {
        try await run(
            home: home, folders: requested, timeout: timeout, logger: logger, keepOpen: false, addresses: addresses, warn: warn
        ).reports
    }

    /// Syncs the given folders and keeps each peer's connection open (for pulling blocks).
    /// Close the session when done.
    /// - Parameter serve: answers the peers' block requests on the kept connections (the
    ///   block server); without it they get NO_SUCH_FILE.
    /// - Parameter only: dial only these peers (a service redialling the ones it lost); all when nil.
    /// - Parameter lanes: connections wanted per peer (``Lanes``); a peer that agrees gets more
    ///   than one, and block requests are spread over them. 1 for a process that also accepts
    ///   connections (its listener would turn the peer's extra ones away).
    /// - Parameter deferringNeeds: the paths this device needs are announced as such only by
    ///   the session's ``PeerSession/announceChanges(home:folders:warn:)`` (``Announcement/DeferredNeeds``):
    ///   for an apply, which pulls them first.
    public static func runKeepingConnections(
        home: KaitenHome, folders requested: [String], timeout: Double = 120,
        logger: Logger = Logger(label: "kaiten.sync"), serve: RequestHandler? = nil, only: Set<DeviceID>? = nil,
        addresses: PeerAddressBook? = nil, directOnly: Bool = false, lanes: Lanes = .one, dialing: DialsInProgress? = nil,
        settings: PeerSettings = PeerSettings(), deferringNeeds: Bool = false, warn: (String) -> Void = { _ in }
    ) async throws -> (reports: [Report], session: PeerSession) {
        try await run(
            home: home, folders: requested, timeout: timeout, logger: logger, keepOpen: true, serve: serve, only: only,
            addresses: addresses, directOnly: directOnly, lanes: lanes, dialing: dialing, settings: settings,
            deferringNeeds: deferringNeeds, warn: warn)
    }

    /// Answers one block request from a peer; `sealed`: it came through the connection's
    /// encryption (an untrusted device's request, answered sealed by the connection).
    public typealias RequestHandler = @Sendable (BEPRequest, DeviceID, _ sealed: Bool) -> BEPReply

    static func run(
        home: KaitenHome, folders requested: [String], timeout: Double, logger: Logger, keepOpen: Bool,
        serve: RequestHandler? = nil, only: Set<DeviceID>? = nil, addresses: PeerAddressBook?, directOnly: Bool = false,
        lanes: Lanes = .one, dialing: DialsInProgress? = nil, settings: PeerSettings = PeerSettings(), deferringNeeds: Bool = false,
        warn: (String) -> Void
    ) async throws -> (reports: [Report], session: PeerSession) {
        if let addresses {
            return try await run(
                home: home, folders: requested, timeout: timeout, logger: logger, keepOpen: keepOpen, serve: serve, only: only,
                book: addresses, directOnly: directOnly, lanes: lanes, dialing: dialing, settings: settings, deferringNeeds: deferringNeeds,
                warn: warn)
        }
        return try await Discovery.using(home: home, logger: logger) { book in
            try await run(
                home: home, folders: requested, timeout: timeout, logger: logger, keepOpen: keepOpen, serve: serve, only: only,
                book: book, directOnly: directOnly, lanes: lanes, dialing: dialing, settings: settings, deferringNeeds: deferringNeeds,
                warn: warn)
        }
    }

    static func run(
        home: KaitenHome, folders requested: [String], timeout: Double, logger: Logger, keepOpen: Bool,
        serve: RequestHandler?, only: Set<DeviceID>?, book: PeerAddressBook, directOnly: Bool, lanes: Lanes, dialing: DialsInProgress?,
        settings: PeerSettings, deferringNeeds: Bool, warn: (String) -> Void
    ) async throws -> (reports: [Report], session: PeerSession) {
        var kept: [DeviceID: PeerConnection] = [:]
        let folders = try home.config.folders(named: requested)
        let me = home.identity.deviceID
        let logs = try openLogs(home: home, folders: folders.map(\.id), warn: warn)
        // This device's own index of each folder, brought up to date before any peer hears of it.
        let announcer = try LocalAnnouncer(home: home, folders: folders.map(\.id), warn: warn)
        defer { announcer.close() }
        try announcer.refresh(logs: logs, deferringNeeds: deferringNeeds, warn: warn)
        let indexIDs = try announcer.indexIDs(for: home.config.folders.map(\.id))
        var announced: [DeviceID: [String: RemoteIndexState]] = [:]
        let hello = KaitenVersion.hello(deviceName: home.config.device(id: me)?.name ?? "")

        var reports: [Report] = []
        var hellos: [DeviceID: BEPHello] = [:]
        defer { PeerGenerations.record(hellos, home: home.home) }
        for device in home.config.devices where device.id != me && only.map({ $0.contains(device.id) }) ?? true {
            let shared = folders.filter { $0.isShared(with: device.id) }
            guard !shared.isEmpty else { continue }
            var perFolder = Dictionary(
                uniqueKeysWithValues: shared.map {
                    ($0.id, Report(folder: $0.id, deviceID: device.id, name: device.name, ok: false))
                })
            // A peer that still counts a connection of ours as alive (its predecessor was killed a
            // moment ago) accepts a new one and closes it before its ClusterConfig, until it
            // notices: asked again a few times, as syncthing redials, before that is a failure.
            // Only a peer this home has exchanged indexes with before can be in that state; one
            // that never has and closes is one that does not know this device, said at once.
            let metBefore = shared.contains { logs[$0.id]?.checkpoints[device.id] != nil }
            let wanted = keepOpen ? lanes.count(for: device) : 1
            var hello = hello
            if wanted > 1 { hello.numConnections = Int32(wanted) }
            var yielded = false
            for delay in [0, 500, 1000, 2000, 3000] {
                if delay > 0 { try? await Task.sleep(for: .milliseconds(delay)) }
                // The peer's own dial arrived and is kept (``DialsInProgress``): it is reported
                // by the exchange that connection runs, not here.
                if dialing?.state(device.id) == .yielded { yielded = true; break }
                defer { dialing?.attemptEnded(device.id) }
                do {
                    let connection = try await dial(
                        device, identity: home.identity, hello: hello, addresses: book, settings: settings, logger: logger,
                        retryClosed: metBefore, directOnly: directOnly)
                    if dialing?.connected(device.id, connection) == false {
                        await connection.close(reason: "both devices dialled each other; the connection the other one dialled is kept")
                        yielded = true
                        break
                    }
                    hellos[device.id] = connection.hello
                    announced[device.id] = try await exchange(
                        connection, device: device, shared: shared, home: home, logs: logs, announcer: announcer,
                        indexIDs: indexIDs, timeout: timeout, serve: serve, deferringNeeds: deferringNeeds, perFolder: &perFolder,
                        warn: warn)
                    if keepOpen {
                        kept[device.id] = connection
                        // Both Hellos asked for several: the others are opened beside the pulls.
                        if wanted > 1, connection.hello.numConnections > 1, !connection.isRelayed {
                            openLanes(
                                wanted - 1, beside: connection, device: device, identity: home.identity, hello: hello, addresses: book,
                                settings: settings, serve: serve, logger: logger)
                        }
                    } else {
                        await connection.close(reason: "index sync done", hangUpAfter: PeerConnection.oneShotCloseGrace)
                    }
                } catch let error as PeerError where error.code == .closedBeforeClusterConfig && delay < 3000 && metBefore {
                    continue
                } catch {
                    if dialing?.state(device.id) == .yielded { yielded = true; break }
                    for folder in shared { perFolder[folder.id]?.problem = "\((error as? PeerError)?.reason ?? "\(error)")" }
                }
                break
            }
            if !yielded { reports += shared.compactMap { perFolder[$0.id] } }
        }
        // The snapshots one after the other, each taking its index out of the heap, and after
        // what the local index kept for sending (a fresh home's: an entry per path) is let go:
        // together they were the run's peak.
        announcer.forgetRecent()
        for (_, log) in logs { log.maintain(warn: warn) }
        for (_, log) in logs { log.close() }
        // The global index left the heap in small pieces: given back before the local one's
        // snapshot allocates again.
        FreedHeap.giveBack()
        announcer.close(maintaining: warn)
        return (reports, PeerSession(connections: kept, refreshed: refreshedPeers(reports), announced: announced))
    }

    /// One peer's session once the handshake is done, whichever side dialled: Kaiten's
    /// ClusterConfig, the peer's index taken into the logs, then what the peer lacks of this
    /// device's own index sent. Fills `perFolder`; returns what the peer now holds of ours.
    static func exchange(
        _ connection: PeerConnection, device: DeviceConfiguration, shared: [FolderConfiguration], home: KaitenHome,
        logs: [String: IndexLog], announcer: LocalAnnouncer, indexIDs: [String: UInt64], timeout: Double,
        serve: RequestHandler?, deferringNeeds: Bool = false, perFolder: inout [String: Report], warn: (String) -> Void
    ) async throws -> [String: RemoteIndexState] {
        let me = home.identity.deviceID
        defer { IndexCompleteness.exchangeEnded(home.home, folders: shared.map(\.id), device: device.id) }
        // What the start ran once (the arguments, config.xml, the TLS handshake) is done: its
        // code is unmapped before the peer's index comes in, so that the intake's peak is the
        // index and the code the intake runs, not every folio of code touched on the way.
        MappedCode.unmapIdlePages()
        // The folders shared with the peer encrypted: from here on, what goes to it of them is
        // sealed and what comes from it opened (before the ClusterConfig tells it of them).
        connection.sealed.set(try SealedFolders.exchanges(for: device.id, in: shared))
        // The folders held here as the untrusted device, with the token each stores.
        connection.sealed.setHeld(try SealedFolders.held(for: device.id, in: shared))
        if let serve {
            let peer = device.id
            await connection.setBlockingRequestHandler { request, sealed in serve(request, peer, sealed) }
        }
        var since: [String: RemoteIndexState] = [:]
        for folder in shared {
            if let checkpoint = logs[folder.id]?.checkpoints[device.id] {
                since[folder.id] = RemoteIndexState(indexID: checkpoint.indexID, maxSequence: checkpoint.maxSequence)
            }
        }
        nonisolated(unsafe) let stateOf = announcer
        let ourClusterConfig = {
            ClusterConfigBuilder.make(
                folders: home.config.folders, devices: home.config.devices, me: me, peer: device.id,
                localIndexIDs: indexIDs, localMaxSequence: stateOf.state.mapValues(\.maxSequence), remote: since,
                sealed: connection.sealed.all, held: connection.sealed.held)
        }
        do {
            try await connection.sendClusterConfig(ourClusterConfig())
        } catch let error as PeerError where error.code == .closed {
            // Closed by the peer right after the handshake: the same as closing before its
            // ClusterConfig (it may still count a predecessor's connection as alive; dialled again).
            throw PeerError(.closedBeforeClusterConfig, peer: error.peer, "\(error.reason) before sending its ClusterConfig")
        }
        var peerIndexIDs: [String: UInt64] = [:]
        var theirViewOfUs: [String: RemoteIndexState] = [:]
        var received = perFolder
        // What this device's ClusterConfig announced is sent as soon as the peer's ClusterConfig
        // says what it holds of it, while its own index comes in, as syncthing does: a peer that
        // waits for this device's index before sending its own (another Kaiten) would otherwise
        // wait for the index this device waits for. Awaited before the local index changes.
        nonisolated(unsafe) let sender = announcer
        var announcedEarly: Task<Void, Error>?
        var sentEarly: [String: RemoteIndexState] = [:]
        let receiver: IndexReceiver
        do {
            receiver = try await connection.receiveIndexes(
                wanted: Set(shared.map(\.id)), me: me, since: since, timeout: timeout,
                onClusterConfig: { clusterConfig in
                    // A folder held here as the untrusted device is listed once the first trusted
                    // peer gave its token: stored, and the ClusterConfig sent again listing it.
                    if try !HeldFolders.storeTokens(from: clusterConfig, connection: connection, peer: device.id, home: home).isEmpty {
                        try await connection.sendClusterConfig(ourClusterConfig())
                    }
                    for folder in shared {
                        if let ours = clusterConfig.device(me, in: folder.id) {
                            theirViewOfUs[folder.id] = RemoteIndexState(indexID: ours.indexID, maxSequence: ours.maxSequence)
                        }
                        if let theirs = clusterConfig.device(device.id, in: folder.id) {
                            peerIndexIDs[folder.id] = theirs.indexID
                            IndexCompleteness.expect(
                                home.home, folder: folder.id, device: device.id, indexID: theirs.indexID,
                                maxSequence: theirs.maxSequence)
                        }
                    }
                    if announcedEarly == nil {
                        let both = shared.map(\.id).filter { clusterConfig.device(device.id, in: $0) != nil && theirViewOfUs[$0] != nil }
                        let view = theirViewOfUs
                        sentEarly = sender.state.filter { both.contains($0.key) }
                        announcedEarly = Task { try await sender.send(to: connection, folders: both, theirView: view) }
                    }
                },
                onBatch: { folder, files, isFull in
                    guard let log = logs[folder], let indexID = peerIndexIDs[folder] else { return }
                    try log.apply(device: device.id, indexID: indexID, files: files, isFullIndex: isFull)
                    // A big index gets snapshots as it comes (a logarithmic number of them), as a
                    // service's intake does: the view of it in memory stays a fraction of it.
                    log.maintain(warn: warn)
                    received[folder]?.filesReceived += files.count
                    if isFull { received[folder]?.fullIndex = true }
                })
        } catch {
            // The early send reads the local index this function's callers close once it
            // throws: it ends before they do. Closing the connection fails a write the peer
            // no longer reads, so the wait is bounded.
            if let announcedEarly {
                announcedEarly.cancel()
                await connection.close(reason: "\((error as? PeerError)?.reason ?? "\(error)")")
                _ = await announcedEarly.result
            }
            throw error
        }
        perFolder = received
        try await announcedEarly?.value
        // The peer holds now what was sent: only what the refresh below adds goes after it.
        for (folder, state) in sentEarly { theirViewOfUs[folder] = state }
        // A peer whose index is empty may send no batch at all: its index ID is stored anyway
        // (as an empty full index), so that the updates it sends later on this connection
        // are taken in under it.
        for folder in shared where !receiver.notSharedByPeer.contains(folder.id) {
            if let log = logs[folder.id], let indexID = peerIndexIDs[folder.id], log.checkpoints[device.id]?.indexID != indexID {
                try log.apply(device: device.id, indexID: indexID, files: [], isFullIndex: true)
            }
        }
        // What this device holds, as the index just received moved the global view.
        let sharedBoth = shared.map(\.id).filter { !receiver.notSharedByPeer.contains($0) }
        for folder in sharedBoth {
            guard let log = logs[folder] else { continue }
            // What the index just received left in memory goes to a snapshot first: the refresh
            // then walks it in name order and records this device's index in batches, instead of
            // holding both views of every path at once (a fresh home's peak).
            log.maintain(eager: true, warn: warn)
            // What the view held until that snapshot left the heap in small pieces: given back
            // before the refresh allocates, or both phases' high-water marks add up (glibc keeps
            // what an arena freed for that arena, and the refresh's task may run on another
            // thread). A million files from syncthing 1.19.2: peak 127–133 → 108–118 MiB.
            FreedHeap.giveBack()
            try announcer.refresh(folder: folder, log: log, deferringNeeds: deferringNeeds, warn: warn)
        }
        try await announcer.send(to: connection, folders: sharedBoth, theirView: theirViewOfUs)
        for folder in shared {
            if receiver.notSharedByPeer.contains(folder.id) {
                // An untrusted device lists a folder only once a trusted one gave it the
                // password token, which this connection's ClusterConfig just did.
                perFolder[folder.id]?.problem =
                    folder.encryptedDevices[device.id] != nil
                    ? "the untrusted device does not list folder \"\(folder.id)\" yet: it does once it has stored the password "
                        + "token this connection gave it (sync again), or once the folder is added there, receive-encrypted"
                    : "the peer does not share folder \"\(folder.id)\" with this device: on the peer, share it with "
                        + "this device (its ID is `kaiten id`), with the same folder ID"
                continue
            }
            if receiver.folders[folder.id]?.isPaused == true {
                perFolder[folder.id]?.problem = "the peer has this folder paused"
            }
            let hasProblem = perFolder[folder.id]?.problem != nil
            perFolder[folder.id]?.ok = !hasProblem
            if let checkpoint = logs[folder.id]?.checkpoints[device.id] {
                perFolder[folder.id]?.indexID = String(checkpoint.indexID, radix: 16)
                perFolder[folder.id]?.sequence = checkpoint.maxSequence
            }
        }
        return announcer.state.filter { sharedBoth.contains($0.key) }
    }

    /// A session a peer started (it dialled this device): the same exchange as a dialled one,
    /// over every folder shared with it. The connection stays open.
    public static func accept(
        _ connection: PeerConnection, home: KaitenHome, timeout: Double = 120, serve: RequestHandler? = nil,
        warn: (String) -> Void = { _ in }
    ) async throws -> (reports: [Report], announced: [String: RemoteIndexState]) {
        guard let device = home.config.device(id: connection.deviceID) else {
            throw PeerError(.unknownDevice, peer: connection.deviceID.shortDescription, "not a configured peer")
        }
        let shared = home.config.folders.filter { $0.isShared(with: device.id) }
        let logs = try openLogs(home: home, folders: shared.map(\.id), warn: warn)
        defer { for (_, log) in logs { log.close() } }
        let announcer = try LocalAnnouncer(home: home, folders: shared.map(\.id), warn: warn)
        defer { announcer.close() }
        try announcer.refresh(logs: logs, warn: warn)
        let indexIDs = try announcer.indexIDs(for: home.config.folders.map(\.id))
        PeerGenerations.record([device.id: connection.hello], home: home.home)
        var perFolder = Dictionary(
            uniqueKeysWithValues: shared.map { ($0.id, Report(folder: $0.id, deviceID: device.id, name: device.name, ok: false)) })
        let announced = try await exchange(
            connection, device: device, shared: shared, home: home, logs: logs, announcer: announcer, indexIDs: indexIDs,
            timeout: timeout, serve: serve, perFolder: &perFolder, warn: warn)
        return (shared.compactMap { perFolder[$0.id] }, announced)
    }

    /// - Parameter retryClosed: dial again (up to 6.5 s) when the peer closes during the hello.
    static func dial(
        _ device: DeviceConfiguration, identity: Identity, hello: BEPHello, addresses book: PeerAddressBook,
        settings: PeerSettings = PeerSettings(), logger: Logger, retryClosed: Bool = true, directOnly: Bool = false
    ) async throws -> PeerConnection {
        // Direct addresses before relays, as syncthing ranks them.
        let found = await book.routes(for: device)
        var routes = found.filter { !$0.address.isRelay } + (directOnly ? [] : found.filter(\.address.isRelay))
        guard !routes.isEmpty else {
            throw PeerError(
                .invalidAddress, peer: device.id.shortDescription,
                directOnly && !found.isEmpty ? "no direct address (only relays)" : book.whyNoRoute(for: device))
        }
        var lastError: Error = PeerError(.unreachable, peer: device.id.shortDescription, "unreachable")
        // A peer that still counts an earlier connection of ours as alive (this process's
        // predecessor was killed a moment ago) closes a new one right after the TLS handshake
        // until it notices (syncthing 1.25+ does so while its wanted connection count is met).
        // It is asked again a few times, as syncthing itself redials, before that counts as a
        // failure; a refused or unreachable address is not retried.
        var refuted: Set<PeerAddress> = []
        for delay in [0, 500, 1000, 2000, 3000] {
            if delay > 0 { try? await Task.sleep(for: .milliseconds(delay)) }
            var closedDuringHello = false
            var pending = routes.filter { !refuted.contains($0.address) }
            while !pending.isEmpty {
                let round = pending
                pending = []
                for route in round {
                    do {
                        let connection = try await PeerDialer.connect(
                            to: route.address, expecting: device.id, identity: identity, hello: hello, settings: settings, logger: logger)
                        connection.noteReached(via: route.how)
                        return connection
                    } catch {
                        lastError = error
                        if (error as? PeerError)?.code == .closed { closedDuringHello = true }
                        // Heard on the LAN, and not the device: its slot goes to the next sender.
                        if route.source == .lan, let code = (error as? PeerError)?.code, code == .unexpectedDevice || code == .tlsRefused {
                            book.refute(device.id, host: route.address.host)
                            refuted.insert(route.address)
                        }
                    }
                }
                // Others heard since an impostor was found out: dialled too, in this attempt.
                pending = await book.routes(afterRefuting: refuted, tried: routes, device: device)
                routes += pending
            }
            if !closedDuringHello || !retryClosed { break }
        }
        throw lastError
    }
}

/// The peers a long-running Kaiten means to dial, is dialling or has just reached, for its
/// listener. When two devices dial each other at once, each one's dial waits for an answer the
/// other gives only once its own exchange is done (a Kaiten takes one exchange at a time), so
/// exactly one of the two connections must give way, whatever the timing: the one dialled by
/// the device with the higher ID (``PeerSessions/accept(_:warn:)``). The lower one keeps its
/// dial only once it got through, since a peer that does not listen (a one-shot verb) is
/// reached only by its own; the higher one gives its dial up (``yield(_:)``) as soon as the
/// lower one's arrives, even before its own is under way (still waiting for its turn), since
/// a dial that waits its turn behind an exchange that waits for the other is how both hang.
public final class DialsInProgress: Sendable {
    public enum State: Sendable, Equatable {
        /// A dial is planned or under way and has not reached the peer (yet).
        case planned
        /// A dial reached the peer (TLS done); its exchange is under way.
        case connected
        /// The peer's own dial is kept: this device's dial to it is abandoned.
        case yielded
    }
    private struct Entry {
        var state: State = .planned
        /// The dials that planned this peer (a connect and a redial may overlap).
        var plans = 0
        /// The connection a dial got, while its exchange runs: closed by ``yield(_:)``.
        var connection: PeerConnection?
    }
    private let devices = Mutex<[DeviceID: Entry]>([:])
    /// Set by ``abandonAll()``: every dial planned from then on gives way at once.
    private let abandoned = Atomic<Bool>(false)
    public init() {}

    /// The process stops: every dial stops where it is (its connection closed) and none starts.
    public func abandonAll() async {
        abandoned.store(true, ordering: .relaxed)
        let connections = devices.withLock { devices -> [PeerConnection] in
            for peer in devices.keys { devices[peer]?.state = .yielded }
            return devices.values.compactMap(\.connection)
        }
        await connections.closeAll(reason: "stopping")
    }

    /// `peers` are to be dialled: from now until ``unplan(_:)``, even while the dial waits its
    /// turn behind other exchanges.
    func plan(_ peers: Set<DeviceID>) {
        devices.withLock { devices in
            for peer in peers {
                devices[peer, default: Entry()].plans += 1
                if abandoned.load(ordering: .relaxed) { devices[peer]?.state = .yielded }
            }
        }
    }

    func unplan(_ peers: Set<DeviceID>) {
        devices.withLock { devices in
            for peer in peers {
                devices[peer]?.plans -= 1
                if (devices[peer]?.plans ?? 0) <= 0 { devices[peer] = nil }
            }
        }
    }

    /// A dial reached the peer; false if it is to give way (the caller closes `connection`).
    func connected(_ peer: DeviceID, _ connection: PeerConnection) -> Bool {
        devices.withLock { devices in
            guard let entry = devices[peer] else { return true }
            if entry.state == .yielded { return false }
            devices[peer]?.state = .connected
            devices[peer]?.connection = connection
            return true
        }
    }

    /// A dial attempt is over (its exchange done or failed): another attempt may follow.
    func attemptEnded(_ peer: DeviceID) {
        devices.withLock { devices in
            guard devices[peer] != nil else { return }
            devices[peer]?.connection = nil
            if devices[peer]?.state == .connected { devices[peer]?.state = .planned }
        }
    }

    /// The peer's dial is kept: this device's dial to it stops here (its connection closed if
    /// it got one, no further attempt). Nothing happens when no dial is planned.
    func yield(_ peer: DeviceID) async {
        let connection = devices.withLock { devices -> PeerConnection? in
            guard devices[peer] != nil else { return nil }
            devices[peer]?.state = .yielded
            defer { devices[peer]?.connection = nil }
            return devices[peer]?.connection
        }
        await connection?.close(reason: "both devices dialled each other; the connection the other one dialled is kept")
    }

    public func state(_ device: DeviceID) -> State? { devices.withLock { $0[device]?.state } }
}
