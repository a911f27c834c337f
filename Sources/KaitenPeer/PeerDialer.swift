import KaitenConfig
import KaitenProtocol
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL

/// Opens connections to peers: TCP, TLS 1.3, then the Hello exchange.
public enum PeerDialer {
    /// Connects to `address` and accepts the connection only if the peer's certificate is
    /// `expected`'s.
    /// - Throws: ``PeerError``: `.unreachable` (refused, timed out, no route), `.unexpectedDevice`
    ///   (someone else answered), `.tlsRefused`, or `.closed` when the peer hung up during the
    ///   Hello exchange.
    public static func connect(
        to address: PeerAddress, expecting expected: DeviceID, identity: Identity, hello: BEPHello,
        settings: PeerSettings = PeerSettings(), logger: Logger = Logger(label: "kaiten.peer"),
        group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> PeerConnection {
        let context = try TLSContexts.client(identity: identity)
        let presented = NIOLockedValueBox<DeviceID?>(nil)
        let (events, continuation) = AsyncStream<PeerEvent>.makeStream()
        let label = expected.shortDescription
        let partsPromise = group.next().makePromise(of: PeerPipeline.Parts.self)
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(.seconds(10))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let tls = try NIOSSLClientHandler(
                        context: context, serverHostname: nil,
                        customVerificationCallback: { certificates, promise in
                            let id = TLSContexts.deviceID(of: certificates)
                            presented.withLockedValue { $0 = id }
                            promise.succeed(id == expected ? .certificateVerified : .failed)
                        })
                    let parts = try PeerPipeline.install(
                        on: channel, tls: tls, hello: hello, settings: settings, logger: logger,
                        events: PeerEventSink(continuation), peerLabel: label)
                    partsPromise.succeed(parts)
                }
            }
        let channel: Channel
        do {
            channel = try await bootstrap.connect(host: address.host, port: address.port).get()
        } catch {
            partsPromise.fail(error)
            continuation.finish()
            throw PeerError(.unreachable, peer: "\(label) at \(address)", "cannot connect: \(describe(error))")
        }
        let parts = try await partsPromise.futureResult.get()
        do {
            let peerHello = try await parts.hello.get()
            return PeerConnection(
                deviceID: expected, hello: peerHello, channel: channel, handler: parts.handler, stats: parts.stats,
                closed: parts.closed, events: events)
        } catch {
            _ = try? await channel.close()
            if let other = presented.withLockedValue({ $0 }), other != expected {
                throw PeerError(
                    .unexpectedDevice, peer: "\(label) at \(address)",
                    "the device answering there is \(other), not \(expected); refused")
            }
            if presented.withLockedValue({ $0 }) == nil {
                throw PeerError(
                    .tlsRefused, peer: "\(label) at \(address)",
                    "TLS handshake failed (\((error as? PeerError)?.reason ?? "\(error)")); is this a syncthing device speaking TLS 1.3?")
            }
            throw PeerError(
                .closed, peer: "\(label) at \(address)",
                "closed the connection during the Hello exchange (\((error as? PeerError)?.reason ?? "\(error)"))")
        }
    }

    static func describe(_ error: Error) -> String {
        if let io = error as? IOError { return io.description }
        if error is ChannelError { return "\(error)" }
        return "\(error)"
    }
}
