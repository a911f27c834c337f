import Crypto
import Dispatch
import KaitenProtocol
import Logging
import NIOConcurrencyHelpers
#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOSSL

/// The BEP session on one channel: Hello, ClusterConfig, index batches, requests in both
/// directions, keepalive and Close. All state lives on the channel's event loop.
///
/// Peer input is checked where it enters: a bad frame, an invalid file name or an inconsistent
/// FileInfo closes the connection with a reason that names the peer; nothing reaches a `!`.
/// Where a connection's events go: an AsyncStream in production, a list in unit tests.
struct PeerEventSink: Sendable {
    let yield: @Sendable (PeerEvent) -> Void
    let finish: @Sendable () -> Void

    init(yield: @escaping @Sendable (PeerEvent) -> Void, finish: @escaping @Sendable () -> Void) {
        self.yield = yield
        self.finish = finish
    }

    init(_ continuation: AsyncStream<PeerEvent>.Continuation) {
        self.yield = { continuation.yield($0) }
        self.finish = { continuation.finish() }
    }
}

final class BEPConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = BEPFrame
    typealias OutboundOut = BEPOutbound

    private let myHello: BEPHello
    private let settings: PeerSettings
    private let logger: Logger
    private let events: PeerEventSink
    /// The folders exchanged encrypted: their indexes are decrypted as they arrive.
    private let sealed: SealedFolders
    let stats: NIOLockedValueBox<PeerStats>
    let helloPromise: EventLoopPromise<BEPHello>
    let closedPromise: EventLoopPromise<PeerCloseReason>
    /// Who the peer is, for messages: set once TLS verified the device.
    let peerLabel: NIOLockedValueBox<String>
    /// How the peer's block requests are answered: at once on the event loop (a fixed answer),
    /// or off it on ``diskWork`` (disk reads belong off the loop). Until one is set: no such file.
    enum Responder {
        case immediate(@Sendable (BEPRequest) -> BEPResponse)
        case offloaded(@Sendable (BEPRequest) -> BEPReply)
    }
    /// Where offloaded answers run: straight from the event loop to a worker thread and back,
    /// two thread hops per block (a task that awaited the disk on another queue took three).
    static let diskWork = DispatchQueue(label: "kaiten.peer.serving", attributes: .concurrent)
    var respond: Responder = .immediate({ request in
        var response = BEPResponse()
        response.id = request.id
        response.code = .noSuchFile
        return response
    })
    /// The deferred answers being worked on, bounded in bytes.
    private lazy var serving = ServingQueue(limit: settings.maxServingBytes)

    private var context: ChannelHandlerContext?
    private var started = false
    /// The session's decisions (Hello, keepalive, closing, backpressure); this handler carries
    /// out what they return.
    private var state: BEPSessionState
    /// The block requests out and waiting, and the promises of their responses.
    private var requests: RequestWindow<EventLoopPromise<BEPResponse>>
    private var keepalive: RepeatedTask?
    private var helloTimeout: Scheduled<Void>?
    /// A flush of written requests is queued on the event loop (``flushRequestsSoon(_:)``).
    private var requestFlushScheduled = false

    init(
        hello: BEPHello, settings: PeerSettings, logger: Logger, events: PeerEventSink,
        eventLoop: EventLoop, peerLabel: String, sealed: SealedFolders = SealedFolders()
    ) {
        self.sealed = sealed
        self.myHello = hello
        self.settings = settings
        self.logger = logger
        self.events = events
        self.stats = NIOLockedValueBox(PeerStats())
        self.helloPromise = eventLoop.makePromise()
        self.closedPromise = eventLoop.makePromise()
        self.peerLabel = NIOLockedValueBox(peerLabel)
        self.state = BEPSessionState(settings: settings, now: eventLoop.now)
        self.requests = RequestWindow(limit: settings.maxOutstandingRequestBytes)
    }

    static func amount(_ seconds: Double) -> TimeAmount { .nanoseconds(Int64(seconds * 1_000_000_000)) }

    // MARK: - Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        state.read(at: context.eventLoop.now)
        state.wrote(at: context.eventLoop.now)
        // Both sides send their Hello at once; neither waits (bep-brief §2.1).
        context.writeAndFlush(wrapOutboundOut(.hello(myHello)), promise: nil)
        let label = peerLabel.withLockedValue { $0 }
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let helloSeconds = Int(settings.helloTimeout)
        helloTimeout = context.eventLoop.scheduleTask(in: Self.amount(settings.helloTimeout)) {
            if let reason = bound.value.state.helloDeadlinePassed(peer: label, seconds: helloSeconds) { bound.value.drop(reason) }
        }
        let interval = Self.amount(settings.keepaliveCheckInterval)
        keepalive = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
            bound.value.checkKeepalive()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(.disconnected(""))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        let label = peerLabel.withLockedValue { $0 }
        switch error {
        case let frameError as FrameError:
            logger.warning("protocol error from \(label): \(frameError)")
            close(.protocolError(frameError.description), sendClose: true)
        case let sslError as NIOSSLError:
            drop(.disconnected("TLS: \(sslError)"))
        case let boring as BoringSSLError:
            drop(.disconnected("TLS: \(boring)"))
        case let io as IOError:
            // In words, not as NIO's internals (issue 10, item 7). The session was up, so a reset
            // is the peer going away (restarted, stopped, or replacing this connection).
            let code = io.errnoCode
            drop(.disconnected(code == ECONNRESET || code == EPIPE ? "the peer reset the connection" : String(cString: strerror(code))))
        default:
            drop(.disconnected("\(error)"))
        }
    }

    // MARK: - Reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        state.read(at: context.eventLoop.now)
        let frame = unwrapInboundIn(data)
        switch frame {
        case .hello(let hello):
            guard state.helloArrived() else { return }
            helloTimeout?.cancel()
            helloPromise.succeed(hello)
        case .message(let message, let compressed):
            stats.withLockedValue {
                $0.framesReceived += 1
                if compressed { $0.compressedFramesReceived += 1 }
            }
            handle(message)
        case .unknown(let type):
            logger.debug("skipping unknown message type \(type)")
        }
    }

    private func handle(_ message: BEPMessage) {
        switch message {
        case .clusterConfig(let clusterConfig):
            events.yield(.clusterConfig(clusterConfig))
        case .index(let index):
            deliver(folder: index.folder, files: index.files, isFullIndex: true)
        case .indexUpdate(let update):
            deliver(folder: update.folder, files: update.files, isFullIndex: false)
        case .request(let request):
            answer(request)
        case .response(let response):
            complete(response)
        case .downloadProgress, .ping:
            break
        case .close(let close):
            stats.withLockedValue { $0.peerCloseReason = close.reason }
            // Either the peer's answer to our Close (syncthing echoes "closed by remote: …") or its own.
            if state.isOpen { logger.info("\(peerLabel.withLockedValue { $0 }) closed the connection: \(close.reason)") }
            carryOut(state.peerSentClose(close.reason))
        }
    }

    /// Index batches that came before this device sent its ClusterConfig, kept until it has:
    /// only then does the connection know which folders it exchanges encrypted (a peer has no
    /// business sending an index before it heard what this device shares, and syncthing does
    /// not; an eager peer's batches are taken in order once it may).
    private var heldIndexes: [(folder: String, files: [BEPFileInfo], isFullIndex: Bool)] = []
    private var clusterConfigSent = false
    static let maxHeldIndexes = 16

    private func deliver(folder: String, files: [BEPFileInfo], isFullIndex: Bool) {
        guard clusterConfigSent else {
            heldIndexes.append((folder, files, isFullIndex))
            if heldIndexes.count > Self.maxHeldIndexes {
                close(.protocolError("sent more than \(Self.maxHeldIndexes) index batches before this device's ClusterConfig"), sendClose: true)
            }
            return
        }
        var files = files
        if let exchange = sealed.exchange(for: folder) {
            // The untrusted device relays what trusted ones sealed: an entry that does not
            // open (altered, another password, or plain text where ciphertext belongs) is
            // refused with the whole message, as syncthing refuses it.
            do {
                files = try exchange.incoming(files)
            } catch {
                close(.protocolError("index of encrypted folder \"\(folder)\": \(error)"), sendClose: true)
                return
            }
        }
        // A folder this device holds as the untrusted one: entries stay sealed, and must look it.
        let storesCiphertext = sealed.holdsCiphertext(folder)
        for file in files {
            do {
                if storesCiphertext { try file.validateSealed() } else { try file.validate() }
            } catch {
                close(.protocolError("invalid index entry in folder \"\(folder)\": \(error)"), sendClose: true)
                return
            }
        }
        stats.withLockedValue { $0.indexFilesReceived += files.count }
        let reads = state.indexBatchDelivered()
        events.yield(.index(folder: folder, files: files, isFullIndex: isFullIndex))
        carryOut(reads)
    }

    private func answer(_ request: BEPRequest) {
        // syncthing closes the connection on a request name that breaks the wire rules.
        do {
            try WireName.validate(request.name)
        } catch {
            close(.protocolError("invalid request: \(error)"), sendClose: true)
            return
        }
        switch respond {
        case .immediate(let answer):
            var response = answer(request)
            response.id = request.id
            stats.withLockedValue { $0.requestsAnswered += 1 }
            write(.response(response))
        case .offloaded(let answer):
            start(serving.arrived(request), answer)
        }
    }

    /// Answers each request on a worker thread; back on the loop the response goes out and
    /// what was waiting for room starts.
    private func start(_ requests: [BEPRequest], _ answer: @escaping @Sendable (BEPRequest) -> BEPReply) {
        guard let context, !requests.isEmpty else { return }
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        for request in requests {
            Self.diskWork.async {
                let reply: BEPOutbound
                switch answer(request) {
                case .response(var response):
                    response.id = request.id
                    reply = .message(.response(response))
                case .frame(let frame):
                    // Made for this request (its id is in the bytes); anything else is a bug
                    // that must not reach the peer as an answer to another request.
                    guard frame.id == request.id else { preconditionFailure("a frame for request \(frame.id) answers \(request.id)") }
                    reply = .frame(frame)
                }
                eventLoop.execute {
                    let handler = loopBound.value
                    let next = handler.serving.finished(request)
                    guard handler.state.isOpen else { return }
                    handler.stats.withLockedValue { $0.requestsAnswered += 1 }
                    handler.write(reply)
                    handler.startWhenWritable(next, answer)
                }
            }
        }
    }

    /// Requests whose disk work waits for the socket to take what was already answered: a
    /// peer that reads slower than the disk is served at its pace, with answers queued in the
    /// socket rather than in memory (and fresh memory for each).
    private var waitingForWritability: [BEPRequest] = []
    private var answerWhenWritable: (@Sendable (BEPRequest) -> BEPReply)?

    private func startWhenWritable(_ requests: [BEPRequest], _ answer: @escaping @Sendable (BEPRequest) -> BEPReply) {
        guard let context, !requests.isEmpty else { return }
        if context.channel.isWritable && waitingForWritability.isEmpty {
            start(requests, answer)
        } else {
            waitingForWritability += requests
            answerWhenWritable = answer
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, !waitingForWritability.isEmpty, let answer = answerWhenWritable {
            let requests = waitingForWritability
            waitingForWritability = []
            start(requests, answer)
        }
        context.fireChannelWritabilityChanged()
    }

    private func complete(_ response: BEPResponse) {
        guard let done = requests.complete(response.id) else {
            logger.debug("response to unknown request \(response.id)")
            return
        }
        done.token.succeed(response)
        send(done.send)
    }

    /// The consumer took an index batch from the event sequence.
    func indexBatchConsumed() {
        carryOut(state.indexBatchConsumed())
    }

    /// Turns backpressure on while a consumer is draining index batches, off when it stops
    /// (so that a caller waiting for block responses is never stalled by unread index events).
    func setIndexBackpressure(_ enabled: Bool) {
        carryOut(state.setIndexBackpressure(enabled))
    }

    private func carryOut(_ reads: BEPSessionState.ReadsAction?) {
        guard let reads, let context else { return }
        switch reads {
        case .pause:
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        case .resume:
            context.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
            context.read()
        }
    }

    // MARK: - Writing

    func send(_ message: BEPMessage) -> EventLoopFuture<Void> {
        guard let context, state.isOpen else {
            return helloPromise.futureResult.eventLoop.makeFailedFuture(closedError())
        }
        let promise = context.eventLoop.makePromise(of: Void.self)
        if case .clusterConfig = message { state.sentClusterConfig(at: context.eventLoop.now) } else { state.wrote(at: context.eventLoop.now) }
        context.writeAndFlush(wrapOutboundOut(.message(message)), promise: promise)
        if case .clusterConfig = message, !clusterConfigSent {
            clusterConfigSent = true
            let held = heldIndexes
            heldIndexes = []
            for batch in held where state.isOpen { deliver(folder: batch.folder, files: batch.files, isFullIndex: batch.isFullIndex) }
        }
        return promise.futureResult
    }

    private func write(_ message: BEPMessage) {
        write(.message(message))
    }

    /// Writes and flushes at once: an answer too. (Flushing several answers together made TLS
    /// gather their ciphertext in one growing buffer: more copies and fresh memory than it saved.)
    private func write(_ outbound: BEPOutbound) {
        guard let context, state.isOpen else { return }
        state.wrote(at: context.eventLoop.now)
        context.writeAndFlush(wrapOutboundOut(outbound), promise: nil)
    }

    /// Queues a block request; it goes out once it fits in the outstanding-bytes budget.
    func request(_ request: BEPRequest) -> EventLoopFuture<BEPResponse> {
        let promise = helloPromise.futureResult.eventLoop.makePromise(of: BEPResponse.self)
        guard state.isOpen, context != nil else {
            promise.fail(closedError())
            return promise.futureResult
        }
        send(requests.enqueue(request, promise))
        return promise.futureResult
    }

    /// Writes requests the window let out, in one flush.
    private func send(_ numbered: [BEPRequest]) {
        guard let context, state.isOpen, !numbered.isEmpty else { return }
        let outstanding = requests.outstandingBytes
        stats.withLockedValue {
            $0.requestsSent += numbered.count
            $0.requestBytesSent += numbered.reduce(0) { $0 + Int(max($1.size, 0)) }
            $0.maxOutstandingRequestBytes = max($0.maxOutstandingRequestBytes, outstanding)
        }
        for request in numbered { context.write(wrapOutboundOut(.message(.request(request))), promise: nil) }
        state.wrote(at: context.eventLoop.now)
        flushRequestsSoon(context)
    }

    /// Flushes once the event loop has run what was queued before: the requests that many pulls
    /// submitted together go out in one TLS record and one write, which the peer also reads and
    /// decrypts once (small files otherwise cost a record each way per file).
    private func flushRequestsSoon(_ context: ChannelHandlerContext) {
        guard !requestFlushScheduled else { return }
        requestFlushScheduled = true
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute {
            bound.value.requestFlushScheduled = false
            bound.value.context?.flush()
        }
    }

    private func checkKeepalive() {
        guard let context else { return }
        switch state.keepalive(at: context.eventLoop.now, readTimeoutSeconds: Int(settings.readTimeout)) {
        case .none: break
        case .ping:
            stats.withLockedValue { $0.pingsSent += 1 }
            write(.ping)
        case .close(let reason):
            close(reason, sendClose: true)
        }
    }

    // MARK: - Closing

    /// Closes the connection, telling the peer why first when `sendClose` is true.
    /// - Parameter grace: how long to wait for the peer to hang up after our Close, when not
    ///   the settings' ``PeerSettings/closeGrace``.
    func close(_ reason: PeerCloseReason, sendClose: Bool, grace: TimeAmountSeconds? = nil) {
        guard context != nil else { return }
        carryOut(state.close(reason, sendClose: sendClose, grace: grace.map(Self.amount)))
    }

    private func carryOut(_ action: BEPSessionState.CloseAction?) {
        guard let action, let context else { return }
        switch action {
        case .hangUp:
            context.close(promise: nil)
        case .sendClose(let reason, let grace):
            var message = BEPClose()
            message.reason = reason
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.message(.close(message)))).whenComplete { _ in
                // Give the peer a moment to read our reason and answer with its own Close.
                if grace == .zero {
                    channel.close(promise: nil)
                } else {
                    channel.eventLoop.scheduleTask(in: grace) { channel.close(promise: nil) }
                }
            }
        }
    }

    private func drop(_ reason: PeerCloseReason) {
        if state.drop(reason) { context?.close(promise: nil) }
    }

    private func finish(_ fallback: PeerCloseReason) {
        guard let end = state.channelClosed(fallback) else { return }
        keepalive?.cancel()
        helloTimeout?.cancel()
        let error = closedError()
        if end.failHello { helloPromise.fail(error) }
        for promise in requests.drain() { promise.fail(error) }
        events.yield(.closed(end.reason))
        events.finish()
        closedPromise.succeed(end.reason)
        context = nil
    }

    private func closedError() -> PeerError {
        let label = peerLabel.withLockedValue { $0 }
        switch state.closeReason {
        case .byPeer(let reason)?: return PeerError(.closedByPeer, peer: label, "closed the connection: \(reason)")
        case .protocolError(let reason)?: return PeerError(.protocolError, peer: label, reason)
        case let reason?: return PeerError(.closed, peer: label, reason.description)
        case nil: return PeerError(.closed, peer: label, "connection closed")
        }
    }
}

/// Which of a peer's block requests may be answered now: at most `limit` bytes at once (and
/// always at least one, so a request larger than the limit is answered alone), the others in
/// the order they came, as syncthing limits what it serves each device.
struct ServingQueue {
    let limit: Int
    private(set) var bytesInFlight = 0
    private var waiting: [BEPRequest] = []

    init(limit: Int) { self.limit = limit }

    /// A request came: the requests to start now.
    mutating func arrived(_ request: BEPRequest) -> [BEPRequest] {
        waiting.append(request)
        return startable()
    }

    /// A request was answered: the requests to start now.
    mutating func finished(_ request: BEPRequest) -> [BEPRequest] {
        bytesInFlight -= max(0, Int(request.size))
        return startable()
    }

    private mutating func startable() -> [BEPRequest] {
        var out: [BEPRequest] = []
        while let next = waiting.first {
            let size = max(0, Int(next.size))
            guard bytesInFlight == 0 || bytesInFlight + size <= limit else { break }
            waiting.removeFirst()
            bytesInFlight += size
            out.append(next)
        }
        return out
    }
}
