import Foundation
import KaitenProtocol
import KaitenServer
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// The REST API's HTTP listener: each request is checked by ``APIAccess`` and answered by
/// ``APIRouter``. Bodies are bounded, a slow client is let go, and no answer to a refused
/// request carries data.
public final class APIServer: Sendable {
    public let access: APIAccess
    /// The browsers' sessions and CSRF tokens (the service's, kept across reloads).
    let sessions: APISessions
    /// HTTPS (`<gui tls="true">`): a plain HTTP request on the port is sent to https://.
    let tls: NIOSSLContext?
    let log: @Sendable (String) -> Void
    private let router = Mutex<APIRouter?>(nil)
    /// What is open now: a close ends it all at once (a long poll waits up to an hour, an idle
    /// client keeps its connection; neither may hold up a reload).
    private let open = Mutex(Open())

    private struct Open {
        var closed = false
        var server: ConnectionServer?
        var channels: [ObjectIdentifier: any Channel] = [:]
        var requests: [Int: Task<APIResponse, Never>] = [:]
        var nextRequest = 0
    }
    /// The largest request body read (a whole config.xml as JSON is a few hundred KiB).
    public static let maximumBody = 4 << 20

    /// A server that answers once ``answer(with:)`` gives it its router (503 until then).
    public init(access: APIAccess, sessions: APISessions = APISessions(), tls: NIOSSLContext? = nil, log: @escaping @Sendable (String) -> Void) {
        self.access = access
        self.sessions = sessions
        self.tls = tls
        self.log = log
    }

    public convenience init(
        access: APIAccess, sessions: APISessions = APISessions(), tls: NIOSSLContext? = nil, router: APIRouter, log: @escaping @Sendable (String) -> Void
    ) {
        self.init(access: access, sessions: sessions, tls: tls, log: log)
        answer(with: router)
    }

    /// A TLS context from PEM texts (the home's https-cert.pem and https-key.pem).
    public static func tlsContext(certificatePEM: String, keyPEM: String) throws -> NIOSSLContext {
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(certificatePEM.utf8)).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        return try NIOSSLContext(configuration: configuration)
    }

    /// Where requests go from now on.
    public func answer(with router: APIRouter) { self.router.withLock { $0 = router } }

    /// Binds `host:port`; returns the port bound (with 0, the one the system chose). Serving
    /// goes on until ``close()``; ``run()`` waits for it.
    public func bind(host: String, port: Int) async throws -> Int {
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        let server = try await ConnectionServer.bind(
            bootstrap, to: .host(host, port: port),
            wrap: { [tls] channel in
                if let tls { try channel.pipeline.syncOperations.addHandler(TLSSniffer(tls)) }
                try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                try channel.pipeline.syncOperations.addHandler(RequestHeadDeadline(seconds: 15))
                return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(
                    wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
            },
            serve: { connection in await self.serve(connection) })
        let closedMeanwhile = open.withLock { open -> Bool in
            open.server = server
            return open.closed
        }
        if closedMeanwhile { server.close() }
        return server.port ?? port
    }

    /// Until the listener is closed and every connection has ended.
    public func run() async {
        await open.withLock { $0.server }?.run()
    }

    /// Stops listening, cancels the requests being answered (a waiting poll answers what it
    /// has) and closes every connection.
    public func close() {
        let (server, channels, requests) = open.withLock { open in
            open.closed = true
            return (open.server, Array(open.channels.values), Array(open.requests.values))
        }
        server?.close()
        for request in requests { request.cancel() }
        for channel in channels { channel.close(promise: nil) }
    }

    func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async {
        let channel = connection.channel
        let key = ObjectIdentifier(channel)
        guard open.withLock({ open -> Bool in
            if !open.closed { open.channels[key] = channel }
            return !open.closed
        }) else {
            try? await connection.executeThenClose { _, _ in }
            return
        }
        defer { _ = open.withLock { $0.channels.removeValue(forKey: key) } }
        do {
            try await connection.executeThenClose { inbound, outbound in
                var head: HTTPRequestHead?
                var body: [UInt8] = []
                var tooLarge = false
                for try await part in inbound {
                    switch part {
                    case .head(let h):
                        head = h
                        body = []
                        tooLarge = false
                    case .body(var buffer):
                        if body.count + buffer.readableBytes > Self.maximumBody {
                            tooLarge = true
                        } else if let bytes = buffer.readBytes(length: buffer.readableBytes) {
                            body += bytes
                        }
                    case .end:
                        guard let h = head else { continue }
                        head = nil
                        let response: APIResponse
                        if tooLarge {
                            response = .text("request body larger than \(Self.maximumBody) bytes", status: 413)
                        } else if tls != nil, (try? await channel.pipeline.handler(type: NIOSSLServerHandler.self).get()) == nil {
                            response = Self.redirectToHTTPS(h)
                        } else {
                            response = await answer(h, body: body)
                        }
                        let keepAlive = h.isKeepAlive && !tooLarge && !open.withLock { $0.closed }
                        // Asked for, it happens whether or not the answer reached the client.
                        let state = router.withLock { $0 }?.state
                        defer {
                            switch response.afterwards {
                            case .restart?: state?.restart()
                            case .shutdown?: state?.shutdown()
                            case nil: break
                            }
                        }
                        if let forward = response.forward {
                            try await Self.forward(h, to: forward, keepAlive: keepAlive, outbound)
                        } else {
                            try await write(response, to: h, keepAlive: keepAlive, outbound)
                        }
                        if !keepAlive {
                            outbound.finish()
                            return
                        }
                    }
                }
            }
        } catch {
            // The client went away or sent garbage: its connection ends, the server goes on.
        }
    }

    func answer(_ head: HTTPRequestHead, body: [UInt8]) async -> APIResponse {
        var headers: [String: String] = [:]
        for (name, value) in head.headers where headers[name.lowercased()] == nil { headers[name.lowercased()] = value }
        let request = APIRequest(method: head.method.rawValue, uri: head.uri, headers: headers, body: body)
        let response: APIResponse
        switch access.decide(request, sessions: sessions) {
        case .answer(let answer):
            response = answer
        case .allow(let headers):
            if let router = router.withLock({ $0 }) {
                response = await answering(request, with: router).adding(headers)
            } else {
                response = .text("starting", status: 503)
            }
        }
        // The path only: a query may hold what should not be in a log.
        log("\(request.method) \(request.path) \(response.status)")
        return response
    }

    /// The router's answer, in a task a close cancels.
    private func answering(_ request: APIRequest, with router: APIRouter) async -> APIResponse {
        let task = Task { await router.respond(to: request) }
        let ticket = open.withLock { open -> Int? in
            guard !open.closed else { return nil }
            open.nextRequest += 1
            open.requests[open.nextRequest] = task
            return open.nextRequest
        }
        if ticket == nil { task.cancel() }
        let response = await task.value
        if let ticket { _ = open.withLock { $0.requests.removeValue(forKey: ticket) } }
        return response
    }

    func write(
        _ response: APIResponse, to head: HTTPRequestHead, keepAlive: Bool, _ out: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>
    ) async throws {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: response.contentType)
        headers.add(name: "Content-Length", value: "\(head.method == .HEAD ? 0 : response.body.count)")
        headers.add(name: "Cache-Control", value: "max-age=0, no-cache, no-store")
        headers.add(name: "X-Content-Type-Options", value: "nosniff")
        headers.add(name: "X-Frame-Options", value: "SAMEORIGIN")
        if response.status != 403 || response.body != APIResponse.text("Host check error", status: 403).body,
            let id = router.withLock({ $0 })?.state.myID
        {
            headers.add(name: "X-Syncthing-Id", value: id.description)
        }
        for header in response.headers { headers.add(name: header.name, value: header.value) }
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let status = HTTPResponseStatus(statusCode: response.status)
        try await out.write(.head(HTTPResponseHead(version: head.version, status: status, headers: headers)))
        if head.method != .HEAD, !response.body.isEmpty {
            try await out.write(.body(.byteBuffer(ByteBuffer(bytes: response.body))))
        }
        try await out.write(.end(nil))
    }
}

extension APIServer {
    /// Asks the loopback server `forward` names for the same resource (the range headers
    /// kept) and passes its answer on part by part: a video's range is streamed, not held.
    static func forward(
        _ head: HTTPRequestHead, to forward: APIResponse.Forward, keepAlive: Bool, _ out: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>
    ) async throws {
        let upstream = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(10))
            .connect(host: "127.0.0.1", port: forward.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        try await upstream.executeThenClose { inbound, outbound in
            var headers = HTTPHeaders()
            headers.add(name: "Host", value: "127.0.0.1:\(forward.port)")
            for name in ["Range", "If-Range", "Accept"] {
                if let value = head.headers.first(name: name) { headers.add(name: name, value: value) }
            }
            headers.add(name: "Connection", value: "close")
            try await outbound.write(.head(HTTPRequestHead(version: .http1_1, method: head.method == .HEAD ? .HEAD : .GET, uri: forward.uri, headers: headers)))
            try await outbound.write(.end(nil))
            for try await part in inbound {
                switch part {
                case .head(let response):
                    var passed = HTTPHeaders()
                    for (name, value) in response.headers where !["connection", "keep-alive", "transfer-encoding"].contains(name.lowercased()) {
                        passed.add(name: name, value: value)
                    }
                    if !keepAlive { passed.add(name: "Connection", value: "close") }
                    try await out.write(.head(HTTPResponseHead(version: head.version, status: response.status, headers: passed)))
                case .body(let buffer):
                    try await out.write(.body(.byteBuffer(buffer)))
                case .end:
                    try await out.write(.end(nil))
                    return
                }
            }
            throw HTTPForwardError.endedEarly
        }
    }

    enum HTTPForwardError: Error { case endedEarly }

    /// A plain HTTP request on the HTTPS port: where to ask instead, as syncthing answers it.
    static func redirectToHTTPS(_ head: HTTPRequestHead) -> APIResponse {
        let location = "https://\(head.headers.first(name: "host") ?? "localhost")\(head.uri)"
        let escaped = location.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "<", with: "&lt;")
        return APIResponse(
            status: 307, contentType: "text/html; charset=utf-8", body: head.method == .GET ? Array("<a href=\"\(escaped)\">Temporary Redirect</a>.\n".utf8) : [],
            headers: [.init("Location", location)])
    }
}

/// On an HTTPS listener, looks at a connection's first byte: a TLS handshake (0x16) gets the
/// TLS handler in front of HTTP; anything else stays plain, to be sent to https://.
final class TLSSniffer: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    let context: NIOSSLContext

    init(_ context: NIOSSLContext) { self.context = context }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        if buffer.readableBytes > 0, buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) == 0x16 {
            do {
                try context.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: self.context), position: .after(self))
            } catch {
                context.close(promise: nil)
                return
            }
        }
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(self, promise: nil)
    }
}
