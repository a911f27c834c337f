import KaitenConfig
import KaitenProtocol
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL

/// Opens connections to peers: TCP (or a relay's session), TLS 1.3, then the Hello exchange.
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
        if address.isRelay {
            return try await RelayClient.connect(
                through: address, to: expected, identity: identity, hello: hello, settings: settings, logger: logger, group: group)
        }
        let context = try TLSContexts.client(identity: identity)
        let presented = NIOLockedValueBox<DeviceID?>(nil)
        let (events, continuation) = AsyncStream<PeerEvent>.makeStream()
        let label = expected.shortDescription
        let partsPromise = group.next().makePromise(of: PeerPipeline.Parts.self)
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(.seconds(10))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
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
                deviceID: expected, hello: peerHello, channel: channel, handler: parts.handler, stats: parts.stats, totals: parts.totals, sealed: parts.sealed,
                closed: parts.closed, events: events, reachedVia: "static")
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

    /// A connection failure in words, with the remedy; never a library's internals.
    static func describe(_ error: Error) -> String {
        if let failure = error as? NIOConnectionError {
            if let first = failure.connectionErrors.first { return describe(first.error) }
            if failure.dnsAError != nil || failure.dnsAAAAError != nil {
                return "the host name \(failure.host) does not resolve; check the address in config.xml (`kaiten peer ls`)"
            }
            return "no address to try for \(failure.host)"
        }
        if let io = error as? IOError { return describe(errno: io.errnoCode) }
        if let channel = error as? ChannelError, case .connectTimeout(let limit) = channel {
            return "timed out after \(limit.nanoseconds / 1_000_000_000) s: nothing answers there (a firewall, or the peer is off)"
        }
        return "\(error)"
    }

    static func describe(errno code: Int32) -> String {
        switch code {
        case ECONNREFUSED: return "connection refused: nothing listens there (is syncthing running on the peer, at that port?)"
        case ETIMEDOUT: return "timed out: nothing answers there (a firewall, or the peer is off)"
        case EHOSTUNREACH, ENETUNREACH: return "no route to the host (another network, or the peer is off)"
        case ECONNRESET, EPIPE:
            return "the peer closed the connection; most likely it does not know this device yet: add this device's ID "
                + "(`kaiten id`) on the peer"
        case EACCES, EPERM: return "not permitted by this system (\(String(cString: strerror(code))))"
        default: return String(cString: strerror(code))
        }
    }
}
