import KaitenConfig
import KaitenDiscovery
import KaitenPeer
import KaitenProtocol
import KaitenSync
import KaitenTransfer
import Logging

/// The service's side facing the peers: the block server, discovery, the sessions and the
/// listeners. A reload keeps it when config.xml's options (listen addresses, discovery,
/// relays) are as they were: peers whose terms did not change stay connected.
///
/// `kaiten serve` holds one for as long as it runs.
public final class PeerLink: Sendable {
    let server: BlockServer
    public let discovery: Discovery
    public let sessions: PeerSessions
    let listeners: [PeerEntrance]
    /// Where peers reach this device (the ports bound, the relays joined).
    public let addresses: [String]
    private let options: OptionsConfiguration
    private let identity: DeviceID

    private init(
        server: BlockServer, discovery: Discovery, sessions: PeerSessions, listeners: [PeerEntrance], addresses: [String],
        home: KaitenHome
    ) {
        self.server = server
        self.discovery = discovery
        self.sessions = sessions
        self.listeners = listeners
        self.addresses = addresses
        options = home.config.options
        identity = home.identity.deviceID
    }

    /// Starts discovery as config.xml says, the sessions and the listeners; `note` says what
    /// happens with the peers (connections, listening addresses).
    public static func start(home: KaitenHome, settings: PeerSettings = PeerSettings(), logger: Logger, note: @escaping @Sendable (String) -> Void) async -> PeerLink {
        let server = BlockServer(home: home)
        // Discovery as config.xml says (off in a home `kaiten init` made, unless asked for).
        let discovery = await Discovery.start(home: home, listens: true, logger: logger, warn: note)
        let sessions = PeerSessions(home: home, logger: logger, serve: server.answer, addresses: discovery, settings: settings)
        sessions.sayConnections(to: note)
        let (listeners, addresses) = await sessions.listen(warn: note)
        if !addresses.isEmpty { note("listening for peers on \(addresses.joined(separator: ", "))") }
        discovery.setListenAddresses(addresses)
        return PeerLink(server: server, discovery: discovery, sessions: sessions, listeners: listeners, addresses: addresses, home: home)
    }

    /// Whether `home` can be served by this link (the same identity, listening and discovery).
    func fits(_ home: KaitenHome) -> Bool {
        home.identity.deviceID == identity && home.config.options == options
    }

    /// Serves `home`'s folders and peers from now on (see ``PeerSessions/reconfigure(_:)``).
    func reconfigure(_ home: KaitenHome) async {
        server.reconfigure(home)
        await sessions.reconfigure(home)
    }

    public func close(reason: String) async {
        for listener in listeners { await listener.close() }
        await sessions.close(reason: reason)
        await discovery.close()
    }
}
