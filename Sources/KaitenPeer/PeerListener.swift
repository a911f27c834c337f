import KaitenConfig
import KaitenProtocol
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL

/// Accepts connections from peers on the config's listen address.
///
/// Only devices that `isAllowed` accepts get past TLS; anyone else is refused during the
/// handshake and logged with their device ID, as syncthing logs "rejected: unknown device".
public final class PeerListener: Sendable {
    private let channel: Channel
    /// The port actually bound (useful when asked for port 0).
    public let localPort: Int

    private init(channel: Channel) {
        self.channel = channel
        self.localPort = channel.localAddress?.port ?? 0
    }

    /// Binds and starts accepting.
    /// - Parameters:
    ///   - isAllowed: whether a device may connect (a device in config.xml).
    ///   - onRejected: called with the device ID and address of every refused connection.
    ///   - onConnection: called with each verified connection after the Hello exchange.
    public static func bind(
        to address: PeerAddress, identity: Identity, hello: BEPHello, settings: PeerSettings = PeerSettings(),
        logger: Logger = Logger(label: "kaiten.listen"),
        group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        isAllowed: @escaping @Sendable (DeviceID) -> Bool,
        onRejected: @escaping @Sendable (DeviceID?, String) -> Void = { _, _ in },
        onConnection: @escaping @Sendable (PeerConnection) async -> Void
    ) async throws -> PeerListener {
        let context = try TLSContexts.server(identity: identity)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let remote = PeerConnection.shown(channel.remoteAddress)
                    let presented = NIOLockedValueBox<DeviceID?>(nil)
                    let tls = NIOSSLServerHandler(
                        context: context,
                        customVerificationCallback: { certificates, promise in
                            let id = TLSContexts.deviceID(of: certificates)
                            presented.withLockedValue { $0 = id }
                            if let id, isAllowed(id) {
                                promise.succeed(.certificateVerified)
                            } else {
                                logger.info(
                                    "Connection from \(id?.description ?? "a device without a certificate") at \(remote) rejected: unknown device"
                                )
                                onRejected(id, remote)
                                promise.succeed(.failed)
                            }
                        })
                    let (events, continuation) = AsyncStream<PeerEvent>.makeStream()
                    let parts = try PeerPipeline.install(
                        on: channel, tls: tls, hello: hello, settings: settings, logger: logger,
                        events: PeerEventSink(continuation), peerLabel: remote)
                    parts.hello.whenSuccess { peerHello in
                        guard let id = presented.withLockedValue({ $0 }) else { return }
                        parts.handler.value.peerLabel.withLockedValue { $0 = id.shortDescription }
                        let connection = PeerConnection(
                            deviceID: id, hello: peerHello, channel: channel, handler: parts.handler,
                            stats: parts.stats, totals: parts.totals, sealed: parts.sealed, closed: parts.closed, events: events, reachedVia: "incoming")
                        Task { await onConnection(connection) }
                    }
                }
            }
        let channel = try await bootstrap.bind(host: address.host, port: address.port).get()
        return PeerListener(channel: channel)
    }

    /// Stops accepting (established connections stay).
    public func close() async {
        try? await channel.close()
    }
}
