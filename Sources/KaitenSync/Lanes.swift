import KaitenConfig
import KaitenPeer
import KaitenProtocol
import Logging

extension IndexSync {
    /// How many connections a session asks each peer for (`num_connections` in its Hello).
    /// Syncthing 1.25+ keeps several per device when both sides ask for more than one (the
    /// larger count wins, 2.x asks for 3); the first carries the indexes, the others only
    /// ClusterConfig `secondary` and block requests. 1.19.2 ignores the field: one connection.
    public struct Lanes: Sendable, Equatable {
        /// Asked of a peer whose `<device>` in config.xml sets no `numConnections`.
        let standard: Int

        /// One connection per peer: the sessions of a process that also accepts connections
        /// (`run`, `serve`), whose listener keeps one per peer and would turn extra ones away.
        public static let one = Lanes(standard: 1)

        /// For a process that only dials and pulls (`apply`): `standard` connections per peer,
        /// or the `numConnections` config.xml sets for the device (syncthing's own setting).
        public static func pulling(standard: Int = 3) -> Lanes { Lanes(standard: max(1, standard)) }

        /// The connections wanted to `device`, at most 128 as syncthing caps them.
        func count(for device: DeviceConfiguration) -> Int {
            guard standard > 1 else { return 1 }
            return min(128, device.numConnections > 0 ? device.numConnections : standard)
        }
    }

    /// Dials `count` more connections to the peer of `primary`, in the background, each added
    /// to it as a lane for block requests (``PeerConnection/addLane(_:)``): ClusterConfig
    /// `secondary` first (the peer reads nothing else before a ClusterConfig), the same request
    /// handler as the primary's, and whatever the peer says on it read and dropped. A lane takes
    /// requests only once the peer's own ClusterConfig has come on it: syncthing writes nothing
    /// else on a connection before that one, which it sends when it promotes connections (~1 s
    /// after the Hello), so a request sent earlier would wait that long with the pull behind it.
    /// Stops at the first that fails: the peer closes one it does not want right after the TLS
    /// handshake.
    static func openLanes(
        _ count: Int, beside primary: PeerConnection, device: DeviceConfiguration, identity: Identity, hello: BEPHello,
        addresses book: PeerAddressBook, settings: PeerSettings, serve: RequestHandler?, logger: Logger
    ) {
        primary.openLanes { primary in
            for _ in 0..<count {
                guard primary.isOpen, !Task.isCancelled else { return }
                do {
                    let lane = try await dial(
                        device, identity: identity, hello: hello, addresses: book, settings: settings, logger: logger, retryClosed: false,
                        directOnly: true)
                    lane.sealed.set(primary.sealed.all)
                    lane.sealed.setHeld(primary.sealed.held)
                    if let serve {
                        let peer = device.id
                        await lane.setBlockingRequestHandler { serve($0, peer, $1) }
                    }
                    var secondary = BEPClusterConfig()
                    secondary.secondary = true
                    try await lane.sendClusterConfig(secondary)
                    // Everything the peer says on the lane is read; its ClusterConfigs are said here.
                    // A lane without one within 30 s is closed, which ends the wait. (10 s was
                    // too tight on a loaded machine: a clean-clone CI beside the other suites
                    // lost a lane of 2.1.3 so, and with it every lane after.) Nothing waits on a
                    // lane meanwhile: requests go to it only once it is ready.
                    let (answered, say) = AsyncStream<Void>.makeStream()
                    Task {
                        for await event in lane.events { if case .clusterConfig = event { say.yield() } }
                        say.finish()
                    }
                    let timer = Task {
                        try await Task.sleep(for: .seconds(30))
                        await lane.close(reason: "no ClusterConfig on it within 30 s")
                    }
                    let ready = await answered.first { _ in true } != nil
                    timer.cancel()
                    guard ready, !Task.isCancelled, primary.addLane(lane) else {
                        await lane.close(reason: ready ? "the session has ended" : "no ClusterConfig on it within 30 s")
                        return
                    }
                } catch {
                    logger.debug("\(device.id.shortDescription): no further connection: \(error)")
                    return
                }
            }
        }
    }
}
