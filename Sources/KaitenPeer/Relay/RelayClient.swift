import KaitenConfig
import KaitenProtocol
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL

/// Syncthing's relays (`lib/relay/client`): a device that cannot be dialled directly joins a
/// relay and is invited to a session whenever someone asks the relay for it; the two then talk
/// BEP, TLS and all, through a plain TCP connection each to the relay, which only copies bytes.
/// Who the peer is stays the TLS certificate's business: the relay is trusted with nothing but
/// carrying bytes, and a relay that lies about a session gets a refused handshake.
public enum RelayClient {
    /// How long the relay may take to answer a request, and to accept a session.
    static let answerTimeout: TimeAmount = .seconds(10)

    /// Connects to `device` through the relay at `relay`: asks the relay for a session with it,
    /// joins the session and runs BEP over it (this side is the TLS client, as in syncthing).
    public static func connect(
        through relay: PeerAddress, to device: DeviceID, identity: Identity, hello: BEPHello,
        settings: PeerSettings = PeerSettings(), logger: Logger, group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> PeerConnection {
        let label = "\(device.shortDescription) via relay \(relay.host):\(relay.port)"
        let control = try await RelayProtocolConnection.open(to: relay, identity: identity, group: group, label: label)
        defer { control.close() }
        try await control.send(.connectRequest(device: device.bytes))
        let invitation: RelayMessage.SessionInvitation
        switch try await control.next(within: answerTimeout) {
        case .sessionInvitation(let offered):
            invitation = offered
        case .response(let code, let message):
            let meaning = code == 1 ? "the peer is not joined to this relay" : "the relay refused (\(code) \(message))"
            throw PeerError(.unreachable, peer: label, meaning)
        case .relayFull:
            throw PeerError(.unreachable, peer: label, "the relay is full")
        case let other:
            throw PeerError(.protocolError, peer: label, "the relay answered a connect request with \(other)")
        }
        guard invitation.from == device.bytes, !invitation.serverSocket else {
            throw PeerError(.protocolError, peer: label, "the relay's invitation is not for a session with this peer")
        }
        return try await joinSession(
            invitation, relayHost: relay.host, expecting: { $0 == device }, identity: identity, hello: hello, settings: settings,
            logger: logger, group: group, label: label)
    }

    /// Joins the session of `invitation` and runs BEP over it: as TLS server when the
    /// invitation says so (this device joined the relay and was asked for), as client
    /// otherwise. The peer's certificate must satisfy `expecting`.
    static func joinSession(
        _ invitation: RelayMessage.SessionInvitation, relayHost: String, expecting: @escaping @Sendable (DeviceID) -> Bool,
        identity: Identity, hello: BEPHello, settings: PeerSettings, logger: Logger, group: EventLoopGroup, label: String
    ) async throws -> PeerConnection {
        // An invitation without an address means the relay's own (syncthing's relays send none
        // when they listen on every address).
        // An IPv4-mapped IPv6 address is dialled as IPv4.
        var packed = invitation.address
        if packed.count == 16 && packed.prefix(12) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF] { packed = Array(packed.suffix(4)) }
        let given =
            packed.contains(where: { $0 != 0 })
            ? (try? SocketAddress(packedIPAddress: ByteBuffer(bytes: packed), port: 0))?.ipAddress : nil
        let host = given ?? relayHost
        let answer = group.next().makePromise(of: RelayMessage.self)
        let decoder = ByteToMessageHandler(RelayMessageDecoder(remaining: 1))
        let first = FirstRelayMessage(answer)
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(answerTimeout)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandlers([decoder, first])
                    }
                }
                .connect(host: host, port: Int(invitation.port)).get()
        } catch {
            answer.fail(error)
            throw PeerError(.unreachable, peer: label, "cannot reach the relay's session address \(host):\(invitation.port): \(error)")
        }
        let deadline = channel.eventLoop.scheduleTask(in: answerTimeout) { answer.fail(ChannelError.connectTimeout(answerTimeout)) }
        var request = channel.allocator.buffer(capacity: 48)
        RelayMessage.joinSessionRequest(key: invitation.key).encode(into: &request)
        channel.writeAndFlush(request, promise: nil)
        let joined: RelayMessage
        do {
            joined = try await answer.futureResult.get()
            deadline.cancel()
        } catch {
            deadline.cancel()
            channel.close(promise: nil)
            throw PeerError(.unreachable, peer: label, "the relay did not let this device join the session: \(error)")
        }
        guard case .response(0, _) = joined else {
            channel.close(promise: nil)
            throw PeerError(.unreachable, peer: label, "the relay refused the session: \(joined)")
        }

        // From here the connection is a pipe to the peer: BEP's TLS goes on it, and whatever the
        // peer sent already (held by the decoder) is handed to TLS when the decoder leaves.
        let presented = NIOLockedValueBox<DeviceID?>(nil)
        let (events, continuation) = AsyncStream<PeerEvent>.makeStream()
        let parts: PeerPipeline.Parts
        do {
            parts = try await channel.eventLoop.submit {
                let verify: NIOSSLCustomVerificationCallback = { certificates, promise in
                    let id = TLSContexts.deviceID(of: certificates)
                    presented.withLockedValue { $0 = id }
                    promise.succeed(id.map(expecting) == true ? .certificateVerified : .failed)
                }
                let tls: NIOSSLHandler =
                    invitation.serverSocket
                    ? NIOSSLServerHandler(context: try TLSContexts.server(identity: identity), customVerificationCallback: verify)
                    : try NIOSSLClientHandler(context: try TLSContexts.client(identity: identity), serverHostname: nil, customVerificationCallback: verify)
                let operations = channel.pipeline.syncOperations
                // It leaves at once; the decoder leaves after TLS is in place, so that the bytes
                // it holds reach TLS.
                operations.removeHandler(first, promise: nil)
                let parts = try PeerPipeline.install(
                    on: channel, tls: tls, hello: hello, settings: settings, logger: logger, events: PeerEventSink(continuation),
                    peerLabel: label)
                operations.removeHandler(decoder, promise: nil)
                return parts
            }.get()
        } catch {
            continuation.finish()
            channel.close(promise: nil)
            throw PeerError(.protocolError, peer: label, "cannot start TLS on the relayed session: \(error)")
        }
        do {
            let peerHello = try await parts.hello.get()
            guard let id = presented.withLockedValue({ $0 }) else { throw PeerError(.tlsRefused, peer: label, "no certificate") }
            let handler = parts.handler
            try await channel.eventLoop.submit { handler.value.peerLabel.withLockedValue { $0 = id.shortDescription } }.get()
            return PeerConnection(
                deviceID: id, hello: peerHello, channel: channel, handler: parts.handler, stats: parts.stats, totals: parts.totals, sealed: parts.sealed, closed: parts.closed,
                events: events, reachedVia: "relay")
        } catch {
            _ = try? await channel.close()
            if let other = presented.withLockedValue({ $0 }), !expecting(other) {
                throw PeerError(.unexpectedDevice, peer: label, "the device at the other end of the relay is \(other); refused")
            }
            throw PeerError(.closed, peer: label, "the relayed session ended during the Hello exchange (\(error))")
        }
    }

    /// TLS to a relay: ALPN `bep-relay`, this device's certificate, and the relay checked
    /// against the URI's `id=` when it has one (any relay otherwise, as syncthing does).
    static func relayTLS(identity: Identity, pinned: DeviceID?, presented: NIOLockedValueBox<DeviceID?>) throws -> (
        NIOSSLContext, NIOSSLCustomVerificationCallback
    ) {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        let (chain, key) = try TLSContexts.material(identity)
        configuration.certificateChain = chain
        configuration.privateKey = key
        configuration.applicationProtocols = ["bep-relay"]
        configuration.certificateVerification = .noHostnameVerification
        configuration.verifySignatureAlgorithms = TLSContexts.signatureAlgorithms
        configuration.signingSignatureAlgorithms = TLSContexts.signatureAlgorithms
        let verify: NIOSSLCustomVerificationCallback = { certificates, promise in
            let id = TLSContexts.deviceID(of: certificates)
            presented.withLockedValue { $0 = id }
            guard let pinned else { return promise.succeed(.certificateVerified) }
            promise.succeed(id == pinned ? .certificateVerified : .failed)
        }
        return (try NIOSSLContext(configuration: configuration), verify)
    }
}

/// The protocol connection to a relay (TLS): messages in both directions. One task reads it
/// (``next(within:)`` is never called concurrently), which is why it may be shared.
final class RelayProtocolConnection: @unchecked Sendable {
    let channel: Channel
    private var messages: AsyncThrowingStream<RelayMessage, Error>.AsyncIterator
    let label: String
    /// The relay's ID from its certificate, and the one its URI pins (if any).
    private let presented: NIOLockedValueBox<DeviceID?>
    private let pinned: DeviceID?

    private init(
        channel: Channel, messages: AsyncThrowingStream<RelayMessage, Error>, label: String, presented: NIOLockedValueBox<DeviceID?>,
        pinned: DeviceID?
    ) {
        self.channel = channel
        self.messages = messages.makeAsyncIterator()
        self.label = label
        self.presented = presented
        self.pinned = pinned
    }

    /// A failure in words: a relay that is not the one the URI pins is said to be so.
    private func failure(_ code: PeerError.Code, _ what: String) -> PeerError {
        if let pinned, let other = presented.withLockedValue({ $0 }), other != pinned {
            return PeerError(
                .unexpectedDevice, peer: label,
                "cannot connect to the relay: its certificate is device \(other.shortDescription), not the id= in the relay URI (\(pinned.shortDescription)); refused")
        }
        return PeerError(code, peer: label, what)
    }

    static func open(to relay: PeerAddress, identity: Identity, group: EventLoopGroup, label: String) async throws -> RelayProtocolConnection {
        let presented = NIOLockedValueBox<DeviceID?>(nil)
        let (context, verify) = try RelayClient.relayTLS(identity: identity, pinned: relay.relay?.id, presented: presented)
        let (stream, continuation) = AsyncThrowingStream<RelayMessage, Error>.makeStream()
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(RelayClient.answerTimeout)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandlers([
                            try NIOSSLClientHandler(context: context, serverHostname: nil, customVerificationCallback: verify),
                            ByteToMessageHandler(RelayMessageDecoder(remaining: nil)),
                            MessageToByteHandler(RelayMessageEncoder()),
                            RelayMessageCollector(continuation),
                        ])
                    }
                }
                .connect(host: relay.host, port: relay.port).get()
        } catch {
            continuation.finish()
            throw PeerError(.unreachable, peer: label, "cannot connect to the relay: \(PeerDialer.describe(error))")
        }
        return RelayProtocolConnection(channel: channel, messages: stream, label: label, presented: presented, pinned: relay.relay?.id)
    }

    func send(_ message: RelayMessage) async throws {
        do {
            try await channel.writeAndFlush(message).get()
        } catch {
            throw failure(.closed, "the relay connection failed: \(error)")
        }
    }

    /// The next message; an error when the relay hangs up, says something undecodable or is
    /// silent for `limit`.
    func next(within limit: TimeAmount) async throws -> RelayMessage {
        let timer = channel.eventLoop.scheduleTask(in: limit) { [channel] in channel.close(promise: nil) }
        defer { timer.cancel() }
        do {
            guard let message = try await messages.next() else {
                throw failure(.closed, "the relay closed the connection (or was silent for \(limit.nanoseconds / 1_000_000_000) s)")
            }
            return message
        } catch let error as PeerError {
            throw error
        } catch {
            throw failure(.protocolError, "the relay sent \(error)")
        }
    }

    func close() {
        channel.close(promise: nil)
    }
}

/// Hands the relay's messages to a stream; its end (or an error) ends the stream.
private final class RelayMessageCollector: ChannelInboundHandler, Sendable {
    typealias InboundIn = RelayMessage
    let continuation: AsyncThrowingStream<RelayMessage, Error>.Continuation

    init(_ continuation: AsyncThrowingStream<RelayMessage, Error>.Continuation) {
        self.continuation = continuation
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        continuation.yield(unwrapInboundIn(data))
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        continuation.finish(throwing: error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        continuation.finish()
        context.fireChannelInactive()
    }
}

/// The relay's one answer on a session connection.
private final class FirstRelayMessage: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = RelayMessage
    let promise: EventLoopPromise<RelayMessage>

    init(_ promise: EventLoopPromise<RelayMessage>) {
        self.promise = promise
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        promise.succeed(unwrapInboundIn(data))
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        promise.fail(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(ChannelError.eof)
        context.fireChannelInactive()
    }
}
