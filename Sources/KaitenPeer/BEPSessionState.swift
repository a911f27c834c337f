import KaitenProtocol
import NIOCore

/// What a BEP session decides, as a value: the Hello awaited once, the keepalive (a read timeout
/// closes, a silence on our side pings), who closes and how, and when reads pause for a consumer
/// behind on index batches. Each input returns what the handler must do; nothing here touches a
/// channel, a clock or a promise (the swift-nio state-machine pattern), so every transition is
/// tested without a socket (BEPSessionStateTests).
struct BEPSessionState {
    /// The part of ``PeerSettings`` the decisions use.
    let readTimeout: TimeAmount
    let pingAfterWriteSilence: TimeAmount
    let closeGrace: TimeAmount
    let maxUndeliveredIndexBatches: Int

    private(set) var receivedHello = false
    /// Why the session ends, once something decided it does.
    private(set) var closeReason: PeerCloseReason?
    private(set) var finished = false
    private var lastRead: NIODeadline
    private var lastWrite: NIODeadline
    /// Whether this side's ClusterConfig went out (pings wait for it).
    private var sentClusterConfig = false
    /// Index batches handed to the consumer and not yet taken.
    private var undeliveredIndexBatches = 0
    private(set) var readsPaused = false
    private var backpressureEnabled = false

    init(settings: PeerSettings, now: NIODeadline) {
        readTimeout = BEPConnectionHandler.amount(settings.readTimeout)
        pingAfterWriteSilence = BEPConnectionHandler.amount(settings.pingAfterWriteSilence)
        closeGrace = BEPConnectionHandler.amount(settings.closeGrace)
        maxUndeliveredIndexBatches = settings.maxUndeliveredIndexBatches
        lastRead = now
        lastWrite = now
    }

    /// Whether anything may still be written.
    var isOpen: Bool { closeReason == nil }

    mutating func read(at now: NIODeadline) { lastRead = now }

    mutating func wrote(at now: NIODeadline) { lastWrite = now }

    mutating func sentClusterConfig(at now: NIODeadline) {
        sentClusterConfig = true
        lastWrite = now
    }

    // MARK: Hello

    /// The peer's Hello: true the first time (delivered), false after (the decoder yields one).
    mutating func helloArrived() -> Bool {
        guard !receivedHello else { return false }
        receivedHello = true
        return true
    }

    /// The Hello deadline passed: the reason to drop the connection, if no Hello came.
    func helloDeadlinePassed(peer: String, seconds: Int) -> PeerCloseReason? {
        receivedHello ? nil : .protocolError("no Hello from \(peer) within \(seconds) s")
    }

    // MARK: Keepalive

    enum KeepaliveAction: Equatable {
        case none
        case ping
        case close(PeerCloseReason)
    }

    /// The periodic check: nothing read for the read timeout closes the session; nothing written
    /// for a while pings, once our ClusterConfig is out (syncthing 2.x takes any message before it
    /// as a protocol error: "protocol error on ping: invalid state 0").
    func keepalive(at now: NIODeadline, readTimeoutSeconds: Int) -> KeepaliveAction {
        if now - lastRead >= readTimeout { return .close(.byUs("read timeout: nothing received for \(readTimeoutSeconds) s")) }
        if now - lastWrite >= pingAfterWriteSilence, sentClusterConfig, isOpen { return .ping }
        return .none
    }

    // MARK: Closing

    enum CloseAction: Equatable {
        /// Send a Close with this reason, then hang up after `grace` (the peer's own Close may come).
        case sendClose(reason: String, thenHangUpAfter: TimeAmount)
        case hangUp
    }

    /// This side closes; nil when the session is already closing.
    mutating func close(_ reason: PeerCloseReason, sendClose: Bool, grace: TimeAmount? = nil) -> CloseAction? {
        guard closeReason == nil else { return nil }
        closeReason = reason
        guard sendClose else { return .hangUp }
        let text: String
        switch reason {
        case .byUs(let t), .protocolError(let t), .byPeer(let t), .disconnected(let t): text = t
        }
        if case .byUs = reason { return .sendClose(reason: text, thenHangUpAfter: grace ?? closeGrace) }
        return .sendClose(reason: text, thenHangUpAfter: .zero)
    }

    /// The peer sent a Close: the answer to ours (hang up), or its own decision (closed without a reply).
    mutating func peerSentClose(_ reason: String) -> CloseAction? {
        if closeReason != nil { return .hangUp }
        return close(.byPeer(reason), sendClose: false)
    }

    /// The transport failed (TLS, a reset): hang up with this reason, unless already closing.
    mutating func drop(_ reason: PeerCloseReason) -> Bool {
        guard closeReason == nil else { return false }
        closeReason = reason
        return true
    }

    struct Finish: Equatable {
        let reason: PeerCloseReason
        /// The Hello never came: whoever waits for it learns the reason.
        let failHello: Bool
    }

    /// The channel went inactive: the session's end, once.
    mutating func channelClosed(_ fallback: PeerCloseReason) -> Finish? {
        guard !finished else { return nil }
        finished = true
        if closeReason == nil { closeReason = fallback }
        let failHello = !receivedHello
        receivedHello = true
        return Finish(reason: closeReason ?? fallback, failHello: failHello)
    }

    // MARK: Index backpressure

    enum ReadsAction: Equatable {
        case pause
        case resume
    }

    /// An index batch went to the consumer: reads pause while it is several batches behind (a
    /// large index waits in the peer's send buffer, not in our memory), only while someone
    /// consumes them.
    mutating func indexBatchDelivered() -> ReadsAction? {
        undeliveredIndexBatches += 1
        guard backpressureEnabled, undeliveredIndexBatches >= maxUndeliveredIndexBatches, !readsPaused else { return nil }
        readsPaused = true
        return .pause
    }

    /// The consumer took a batch: reads resume once the backlog is down to a quarter.
    mutating func indexBatchConsumed() -> ReadsAction? {
        undeliveredIndexBatches -= 1
        return undeliveredIndexBatches <= maxUndeliveredIndexBatches / 4 ? resume() : nil
    }

    /// A consumer draining index batches turns backpressure on; off when it stops (a caller
    /// waiting for block responses is never stalled by unread index events).
    mutating func setIndexBackpressure(_ enabled: Bool) -> ReadsAction? {
        backpressureEnabled = enabled
        return enabled ? nil : resume()
    }

    private mutating func resume() -> ReadsAction? {
        guard readsPaused else { return nil }
        readsPaused = false
        return .resume
    }
}

/// The block requests this side has out, bounded in bytes (syncthing stalls above 32 MiB; a
/// request larger than the bound goes alone); the others wait in order. `Token` is what the
/// caller waits on (a promise in the handler).
///
/// A request leaves the queue as it is sent: the token, once fulfilled, holds the response and
/// its block, so a queue that kept sent entries kept their blocks alive.
struct RequestWindow<Token> {
    let limit: Int
    private var nextID: Int32 = 0
    private var pending: [Int32: (size: Int, token: Token)] = [:]
    private var queued = CircularBuffer<(BEPRequest, Token)>()
    private(set) var outstandingBytes = 0

    init(limit: Int) { self.limit = limit }

    var pendingCount: Int { pending.count }
    var queuedCount: Int { queued.count }

    /// A request to send: the numbered requests that go out now (this one, if it fits).
    mutating func enqueue(_ request: BEPRequest, _ token: Token) -> [BEPRequest] {
        queued.append((request, token))
        return sendable()
    }

    /// The response to request `id`: its token and what goes out now; nil for an id not out.
    mutating func complete(_ id: Int32) -> (token: Token, send: [BEPRequest])? {
        guard let entry = pending.removeValue(forKey: id) else { return nil }
        outstandingBytes -= entry.size
        return (entry.token, sendable())
    }

    /// Every token waiting (out or queued), the session being over.
    mutating func drain() -> [Token] {
        let tokens = pending.values.map(\.token) + queued.map(\.1)
        pending.removeAll()
        queued.removeAll()
        outstandingBytes = 0
        return tokens
    }

    private mutating func sendable() -> [BEPRequest] {
        var out: [BEPRequest] = []
        while let (request, _) = queued.first {
            let size = Int(max(request.size, 0))
            guard outstandingBytes == 0 || outstandingBytes + size <= limit else { break }
            let token = queued.removeFirst().1
            var numbered = request
            numbered.id = takeID()
            pending[numbered.id] = (size, token)
            outstandingBytes += size
            out.append(numbered)
        }
        return out
    }

    private mutating func takeID() -> Int32 {
        repeat {
            nextID = nextID == Int32.max ? 0 : nextID + 1
        } while pending[nextID] != nil
        return nextID
    }
}
