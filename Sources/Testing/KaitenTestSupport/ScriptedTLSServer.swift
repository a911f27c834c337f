import Foundation
import KaitenConfig
import NIOCore
import NIOPosix
import NIOSSL

/// A TLS server on 127.0.0.1 that answers from a script, to play a discovery server or a relay
/// that misbehaves: whatever a client sends is collected, and `answer` decides, each time more
/// arrives, what to write back (nil: wait for more) and whether to hang up after it.
public final class ScriptedTLSServer: Sendable {
    public let port: Int
    /// The server's certificate, by device ID (what a relay URI's or a discovery server's
    /// `id=` pins).
    public let identity: Identity
    private let channel: Channel

    public struct Reply: Sendable {
        public var bytes: [UInt8]
        public var close: Bool
        public init(_ bytes: [UInt8], close: Bool = true) {
            self.bytes = bytes
            self.close = close
        }
    }

    /// - Parameters:
    ///   - plain: no TLS (a plain HTTP endpoint).
    ///   - socket: a listening socket to serve (``NetworkNamespaces/listeningSocket(in:port:)``);
    ///     a free port on 127.0.0.1 when nil.
    public init(alpn: [String] = [], plain: Bool = false, socket: CInt? = nil, answer: @escaping @Sendable ([UInt8]) -> Reply?) async throws {
        identity = try Identity.generate(keyType: .ecdsa)
        let certificates = try NIOSSLCertificate.fromPEMBytes(Array(identity.certificatePEM.utf8))
        let key = try NIOSSLPrivateKey(bytes: Array(identity.privateKeyPEM.utf8), format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: certificates.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.applicationProtocols = alpn
        configuration.certificateVerification = .none
        let context = try NIOSSLContext(configuration: configuration)
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if !plain { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context)) }
                    try channel.pipeline.syncOperations.addHandler(Script(answer: answer))
                }
            }
        if let socket {
            channel = try await bootstrap.withBoundSocket(socket).get()
        } else {
            channel = try await bootstrap.bind(host: "127.0.0.1", port: 0).get()
        }
        port = channel.localAddress?.port ?? 0
    }

    public func close() async {
        try? await channel.close()
    }

    private final class Script: ChannelInboundHandler, @unchecked Sendable {  // on its event loop only
        typealias InboundIn = ByteBuffer
        let answer: @Sendable ([UInt8]) -> Reply?
        var received: [UInt8] = []

        init(answer: @escaping @Sendable ([UInt8]) -> Reply?) {
            self.answer = answer
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = unwrapInboundIn(data)
            received += buffer.readBytes(length: buffer.readableBytes) ?? []
            guard let reply = answer(received) else { return }
            received = []
            let close = reply.close
            context.writeAndFlush(NIOAny(context.channel.allocator.buffer(bytes: reply.bytes))).whenComplete { _ in
                if close { context.close(promise: nil) }
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: Error) {
            context.close(promise: nil)
        }
    }
}
