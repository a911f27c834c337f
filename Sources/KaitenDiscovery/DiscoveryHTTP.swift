import Foundation
import KaitenConfig
import KaitenPeer
import KaitenProtocol
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// One HTTPS request to a global discovery server, and its answer. The server is who
/// ``DiscoveryServer`` says: pinned by device ID, or checked by a certificate authority and
/// host name, or not at all when the user wrote `insecure`. An announcement presents this
/// device's certificate: that is how the server knows whose addresses they are.
enum DiscoveryHTTP {
    struct Response: Sendable {
        var status: Int
        var headers: HTTPHeaders
        var body: [UInt8]

        /// A header holding whole seconds (`Reannounce-After`, `Retry-After`), when positive.
        func seconds(_ name: String) -> Int? {
            headers.first(name: name).flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }.flatMap { $0 > 0 ? $0 : nil }
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// The most a discovery answer may be (a lookup is a few hundred bytes).
    static let maximumBody = 64 * 1024

    static func request(
        _ server: DiscoveryServer, method: HTTPMethod, query: String? = nil, json: [UInt8]? = nil, identity: Identity?,
        timeout: TimeAmount = .seconds(10), group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> Response {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        if let identity {
            let (chain, key) = try TLSContexts.material(identity)
            configuration.certificateChain = chain
            configuration.privateKey = key
        }
        let pinned = server.pinnedID
        if pinned != nil {
            configuration.certificateVerification = .noHostnameVerification
        } else if server.insecure {
            configuration.certificateVerification = .none
        }
        let context = try NIOSSLContext(configuration: configuration)
        let presented = NIOLockedValueBox<DeviceID?>(nil)
        let promise = group.next().makePromise(of: Response.self)
        let isIPAddress = (try? SocketAddress(ipAddress: server.host, port: server.port)) != nil
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(timeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if server.plainHTTP {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        try channel.pipeline.syncOperations.addHandler(ResponseCollector(promise: promise, limit: maximumBody))
                        return
                    }
                    let tls: NIOSSLClientHandler
                    if let pinned {
                        tls = try NIOSSLClientHandler(
                            context: context, serverHostname: isIPAddress ? nil : server.host,
                            customVerificationCallback: { certificates, verdict in
                                let id = TLSContexts.deviceID(of: certificates)
                                presented.withLockedValue { $0 = id }
                                verdict.succeed(id == pinned ? .certificateVerified : .failed)
                            })
                    } else {
                        tls = try NIOSSLClientHandler(context: context, serverHostname: isIPAddress ? nil : server.host)
                    }
                    try channel.pipeline.syncOperations.addHandler(tls)
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(ResponseCollector(promise: promise, limit: maximumBody))
                }
            }
        let channel: Channel
        do {
            channel = try await bootstrap.connect(host: server.host, port: server.port).get()
        } catch {
            promise.fail(error)
            throw Failure(description: "cannot connect: \(error)")
        }
        let deadline = channel.eventLoop.scheduleTask(in: timeout) {
            promise.fail(Failure(description: "no answer within \(timeout.nanoseconds / 1_000_000_000) s"))
            channel.close(promise: nil)
        }
        defer { deadline.cancel() }
        var target = server.path
        if let query { target += "?" + query }
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: target)
        head.headers.add(name: "Host", value: server.host.contains(":") ? "[\(server.host)]" : server.host)
        head.headers.add(name: "User-Agent", value: "kaiten")
        head.headers.add(name: "Connection", value: "close")
        if let json {
            head.headers.add(name: "Content-Type", value: "application/json")
            head.headers.add(name: "Content-Length", value: "\(json.count)")
        }
        channel.write(HTTPClientRequestPart.head(head), promise: nil)
        if let json { channel.write(HTTPClientRequestPart.body(.byteBuffer(channel.allocator.buffer(bytes: json))), promise: nil) }
        channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
        do {
            let response = try await promise.futureResult.get()
            channel.close(promise: nil)
            return response
        } catch {
            channel.close(promise: nil)
            if let pinned, let other = presented.withLockedValue({ $0 }), other != pinned {
                throw Failure(description: "the server's certificate is device \(other.shortDescription), not the id= in config.xml (\(pinned.shortDescription)); refused")
            }
            if let failure = error as? Failure { throw failure }
            throw Failure(description: "\(error)")
        }
    }
}

/// Collects one HTTP response (head and body, the body bounded) into a promise.
private final class ResponseCollector: ChannelInboundHandler, @unchecked Sendable {  // used on its event loop only
    typealias InboundIn = HTTPClientResponsePart
    let promise: EventLoopPromise<Response>
    let limit: Int
    var head: HTTPResponseHead?
    var body: [UInt8] = []
    typealias Response = DiscoveryHTTP.Response

    init(promise: EventLoopPromise<Response>, limit: Int) {
        self.promise = promise
        self.limit = limit
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body(var buffer):
            guard body.count + buffer.readableBytes <= limit else {
                promise.fail(DiscoveryHTTP.Failure(description: "an answer larger than \(limit / 1024) KiB"))
                context.close(promise: nil)
                return
            }
            body += buffer.readBytes(length: buffer.readableBytes) ?? []
        case .end:
            guard let head else { return }
            promise.succeed(Response(status: Int(head.status.code), headers: head.headers, body: body))
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        promise.fail(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(DiscoveryHTTP.Failure(description: "the server closed the connection before answering"))
        context.fireChannelInactive()
    }
}
