import Crypto
import Foundation
import KaitenConfig
import KaitenEncryption
import KaitenProtocol
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import NIOPosix
import NIOSSL

/// An established BEP connection to one verified peer.
///
/// Created by ``PeerDialer/connect(to:expecting:identity:hello:settings:logger:)`` or handed out
/// by a ``PeerListener``; the Hello exchange is done. The first message Kaiten must send is a
/// ClusterConfig (``sendClusterConfig(_:)``). What the peer sends arrives in ``events``, in order.
public final class PeerConnection: Sendable {
    /// The peer's device ID, from the certificate it presented.
    public let deviceID: DeviceID
    /// The peer's Hello: device name, client name and version.
    public let hello: BEPHello
    /// Where the peer is connected from or to.
    public let remoteAddress: String
    /// The peer's IP address, without the port (nil through a relay or a non-IP channel).
    public let remoteHost: String?
    /// When the connection was made.
    public let openedAt = Date()

    /// An address as people write it: `127.0.0.1:22000`, `[::1]:22000` (NIO's description is
    /// `[IPv4]127.0.0.1/127.0.0.1:22000`).
    public static func shown(_ address: SocketAddress?) -> String {
        guard let address else { return "?" }
        guard let ip = address.ipAddress, let port = address.port else { return address.description }
        return ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)"
    }
    /// Everything the peer says, in order; ends with `.closed`.
    public let events: PeerEvents
    /// How the connection came about: `static`, `lan`, `global` (dialled at an address from
    /// there), `relay` (through a relay, either way), `incoming` (the peer dialled).
    public var reachedVia: String { via.withLockedValue { $0 } }
    /// Whether it runs through a relay (a direct connection replaces it when one comes).
    public var isRelayed: Bool { reachedVia == "relay" }
    private let via: NIOLockedValueBox<String>

    /// The folders this connection exchanges encrypted (the peer is untrusted for them).
    public let sealed: SealedFolders
    private let channel: Channel
    private let handler: NIOLoopBound<BEPConnectionHandler>
    private let statsBox: NIOLockedValueBox<PeerStats>
    private let closedFuture: EventLoopFuture<PeerCloseReason>
    /// Further connections to the same peer that share this one's block requests (``addLane(_:)``).
    private let lanes = NIOLockedValueBox<Lanes>(Lanes())

    private struct Lanes {
        var open: [PeerConnection] = []
        var turn = 0
        /// Set once this connection is closing: a lane that comes later is refused.
        var ended = false
        /// The task opening lanes (``openLanes(_:)``), which closing waits for.
        var opening: Task<Void, Never>?
    }

    init(
        deviceID: DeviceID, hello: BEPHello, channel: Channel, handler: NIOLoopBound<BEPConnectionHandler>,
        stats: NIOLockedValueBox<PeerStats>, totals: ByteTotals, sealed: SealedFolders, closed: EventLoopFuture<PeerCloseReason>,
        events: AsyncStream<PeerEvent>, reachedVia: String
    ) {
        self.totals = totals
        self.sealed = sealed
        self.via = NIOLockedValueBox(reachedVia)
        self.deviceID = deviceID
        self.hello = hello
        self.channel = channel
        self.handler = handler
        self.statsBox = stats
        self.closedFuture = closed
        self.events = PeerEvents(
            stream: events,
            consumedIndexBatch: { [loop = channel.eventLoop] in
                loop.execute { handler.value.indexBatchConsumed() }
            })
        self.remoteAddress = Self.shown(channel.remoteAddress)
        self.remoteHost = channel.remoteAddress?.ipAddress
    }

    /// Records where the dialler found the address it connected to (`lan`, `global`, …).
    public func noteReached(via how: String) {
        via.withLockedValue { $0 = how }
    }

    /// A short name for messages: the peer's short device ID.
    public var label: String { deviceID.shortDescription }

    /// Whether the connection is still up (the peer has not hung up, nor have we).
    public var isOpen: Bool { channel.isActive }

    /// Counters about this connection.
    public var stats: PeerStats { statsBox.withLockedValue { $0 } }

    /// The bytes of BEP received and sent on this connection (inside TLS; a lane's are its own).
    public var bytesReceived: Int { totals.received.load(ordering: .relaxed) }
    public var bytesSent: Int { totals.sent.load(ordering: .relaxed) }
    private let totals: ByteTotals

    /// Sends any message; an index of a folder exchanged encrypted goes out encrypted.
    public func send(_ message: BEPMessage) async throws {
        var message = message
        switch message {
        case .index(var index):
            if let exchange = sealed.exchange(for: index.folder) {
                index.files = try exchange.outgoing(index.files)
                message = .index(index)
            }
        case .indexUpdate(var update):
            if let exchange = sealed.exchange(for: update.folder) {
                update.files = try exchange.outgoing(update.files)
                message = .indexUpdate(update)
            }
        default:
            break
        }
        let handler = self.handler
        try await channel.eventLoop.flatSubmit { handler.value.send(message) }.get()
    }

    /// Sends our ClusterConfig (must be the first message after the Hello, and may be resent).
    public func sendClusterConfig(_ clusterConfig: BEPClusterConfig) async throws {
        try await send(.clusterConfig(clusterConfig))
    }

    /// Requests bytes of a file; at most 32 MiB are outstanding per connection, the rest wait.
    /// With lanes (``addLane(_:)``), requests take this connection and its lanes in turn; one
    /// that a lane loses (it closed) is asked again here.
    /// - Returns: the response as the peer sent it (check `code`; the data is unverified).
    public func request(_ request: BEPRequest) async throws -> BEPResponse {
        if let lane = nextLane() {
            do {
                return try await lane.requestHere(request)
            } catch {
                guard !lane.isOpen else { throw error }
                lanes.withLockedValue { $0.open.removeAll { $0 === lane } }
            }
        }
        return try await requestHere(request)
    }

    private func requestHere(_ request: BEPRequest) async throws -> BEPResponse {
        let handler = self.handler
        return try await channel.eventLoop.flatSubmit { handler.value.request(request) }.get()
    }

    /// The next connection in turn for a request, nil for this one.
    private func nextLane() -> PeerConnection? {
        lanes.withLockedValue { lanes in
            guard !lanes.open.isEmpty else { return nil }
            lanes.turn &+= 1
            let slot = lanes.turn % (lanes.open.count + 1)
            return slot == 0 ? nil : lanes.open[slot - 1]
        }
    }

    /// Runs `open`, which dials further connections to the same peer and adds each with
    /// ``addLane(_:)``, in the background; closing this connection cancels it and waits for it
    /// before closing the lanes, so that no lane outlives it (a peer would make a lane left
    /// open its primary connection to this device, and send the next session's indexes there).
    public func openLanes(_ open: @escaping @Sendable (PeerConnection) async -> Void) {
        let task = Task { await open(self) }
        let refused = lanes.withLockedValue { lanes -> Bool in
            guard !lanes.ended, lanes.opening == nil else { return true }
            lanes.opening = task
            return false
        }
        if refused {
            task.cancel()
            return
        }
        // The peer ending this connection ends its lanes too.
        closedFuture.whenComplete { _ in Task { await self.close(reason: "the primary connection has ended") } }
    }

    /// Adds a further connection to the same peer (a secondary one: syncthing 1.25+ keeps
    /// several per device when both Hellos ask for them, `num_connections`) that carries a
    /// share of this connection's block requests: TLS and the peer's reading and checking
    /// then spread over more than one core on each side. Returns false, adding nothing, when
    /// this connection is closing or closed: the caller closes the lane.
    public func addLane(_ lane: PeerConnection) -> Bool {
        lanes.withLockedValue { lanes -> Bool in
            guard !lanes.ended, isOpen, lane.deviceID == deviceID else { return false }
            lanes.open.append(lane)
            return true
        }
    }

    /// The lanes currently open beside this connection.
    public var laneCount: Int { lanesInUse.count }

    /// The lanes currently open beside this connection, in the order they were added.
    public var lanesInUse: [PeerConnection] { lanes.withLockedValue { $0.open.filter(\.isOpen) } }

    /// Fetches one block of a file and checks its SHA-256.
    /// - Throws: ``PeerError`` with `.requestFailed` (the peer's error code) or `.hashMismatch`.
    public func fetchBlock(folder: String, file: BEPFileInfo, block: BEPBlockInfo) async throws -> Data {
        if let exchange = sealed.exchange(for: folder) {
            return try await fetchSealedBlock(folder: folder, file: file, block: block, exchange: exchange)
        }
        var request = BEPRequest()
        request.folder = folder
        request.name = file.name
        request.offset = block.offset
        request.size = block.size
        request.hash = block.hash
        request.weakHash = block.weakHash
        request.blockNo = Int32(clamping: block.offset / Int64(file.effectiveBlockSize))
        let response = try await self.request(request)
        guard response.code == .noError else {
            throw PeerError(
                .requestFailed, peer: label,
                "refused \(file.name) at offset \(block.offset): \(Self.describe(response.code))")
        }
        let data = response.data
        // Held as the untrusted device: the hash is a sealed one, which only a device with the
        // password can check (syncthing takes such blocks on trust too); the size must match.
        if sealed.holdsCiphertext(folder) {
            guard data.count == Int(block.size) else {
                throw PeerError(
                    .hashMismatch, peer: label, "sent \(data.count) bytes for \(file.name) at offset \(block.offset), not \(block.size)")
            }
            return data
        }
        guard data.count == Int(block.size), SHA256.hash(data: data).elementsEqual(block.hash) else {
            throw PeerError(
                .hashMismatch, peer: label, "sent data for \(file.name) at offset \(block.offset) whose SHA-256 is wrong")
        }
        return data
    }

    /// A block of a folder the peer holds encrypted: asked by its encrypted name, offset and
    /// size, the answer's tag checked, then the plain block's SHA-256.
    private func fetchSealedBlock(folder: String, file: BEPFileInfo, block: BEPBlockInfo, exchange: UntrustedExchange) async throws -> Data {
        let number = Int(block.offset / Int64(file.effectiveBlockSize))
        var request = try exchange.encryptedRequest(name: file.name, offset: block.offset, size: Int(block.size), number: number, hash: block.hash)
        request.folder = folder
        let response = try await self.request(request)
        guard response.code == .noError else {
            throw PeerError(
                .requestFailed, peer: label,
                "refused \(file.name) at offset \(block.offset) (stored encrypted): \(Self.describe(response.code))")
        }
        do {
            return Data(try exchange.openAnswer(response.data, name: file.name, offset: block.offset, size: Int(block.size), hash: block.hash))
        } catch {
            throw PeerError(
                .hashMismatch, peer: label,
                "sent a block of \(file.name) at offset \(block.offset) that does not decrypt and verify: \(error)")
        }
    }

    /// Sends a Close with `reason` and waits until the connection is gone: until the peer hangs
    /// up, or `grace` (the settings' ``PeerSettings/closeGrace`` when nil) has passed.
    ///
    /// A one-shot verb waits longer (``oneShotCloseGrace``): syncthing reads our Close only
    /// after it has taken in every message before it (it stores an index batch before it reads
    /// the next message), and until then it counts this connection as alive and turns away a
    /// new one from this device right after the TLS handshake. Hanging up sooner does not make
    /// it read faster; it only got the next `kaiten` command turned away.
    public func close(reason: String, hangUpAfter grace: TimeAmountSeconds? = nil) async {
        let opening = lanes.withLockedValue { lanes in
            lanes.ended = true
            return lanes.opening
        }
        opening?.cancel()
        await opening?.value
        let open = lanes.withLockedValue { lanes in
            defer { lanes.open = [] }
            return lanes.open
        }
        await open.closeAll(reason: reason)
        let handler = self.handler
        try? await channel.eventLoop.submit { handler.value.close(.byUs(reason), sendClose: true, grace: grace) }.get()
        _ = try? await closedFuture.get()
    }

    /// Waits until the connection has ended, and says how.
    public func waitUntilClosed() async -> PeerCloseReason {
        (try? await closedFuture.get()) ?? .disconnected("")
    }

    /// While on, reading from the peer pauses whenever several index batches wait unconsumed in
    /// ``events``. Turn it on only while something drains ``events``.
    public func setIndexBackpressure(_ enabled: Bool) {
        let handler = self.handler
        channel.eventLoop.execute { handler.value.setIndexBackpressure(enabled) }
    }

    /// Replaces how the peer's block requests are answered (default: NO_SUCH_FILE).
    public func setRequestHandler(_ respond: @escaping @Sendable (BEPRequest) -> BEPResponse) async {
        let handler = self.handler
        try? await channel.eventLoop.submit { handler.value.respond = .immediate(respond) }.get()
    }

    /// Replaces how the peer's block requests are answered, by a handler that may block on the
    /// disk: it runs on a worker thread, never on the event loop. `respond` is told whether the
    /// request came in sealed (a folder exchanged encrypted: its answer is sealed here).
    public func setBlockingRequestHandler(_ respond: @escaping @Sendable (BEPRequest, _ sealed: Bool) -> BEPReply) async {
        let handler = self.handler
        let sealed = self.sealed
        let answer: @Sendable (BEPRequest) -> BEPReply = { request in
            guard let exchange = sealed.exchange(for: request.folder) else { return respond(request, false) }
            return SealedFolders.answer(request, exchange: exchange, respond: respond)
        }
        try? await channel.eventLoop.submit { handler.value.respond = .offloaded(answer) }.get()
    }

    static func describe(_ code: BEPErrorCode) -> String {
        switch code {
        case .noError: return "no error"
        case .generic: return "generic error (folder unknown, not shared, or paused)"
        case .noSuchFile: return "no such file (missing, changed, or not a regular file)"
        case .invalidFile: return "invalid file (ignored or internal)"
        case .UNRECOGNIZED(let n): return "error code \(n)"
        }
    }
}

/// Wires a channel for BEP: TLS, frame codec, session handler.
enum PeerPipeline {
    struct Parts: Sendable {
        let handler: NIOLoopBound<BEPConnectionHandler>
        let stats: NIOLockedValueBox<PeerStats>
        let totals: ByteTotals
        let sealed: SealedFolders
        let hello: EventLoopFuture<BEPHello>
        let closed: EventLoopFuture<PeerCloseReason>
    }

    static func install(
        on channel: Channel, tls: NIOSSLHandler, hello: BEPHello, settings: PeerSettings, logger: Logger,
        events: PeerEventSink, peerLabel: String
    ) throws -> Parts {
        let sealed = SealedFolders()
        let handler = BEPConnectionHandler(
            hello: hello, settings: settings, logger: logger, events: events, eventLoop: channel.eventLoop,
            peerLabel: peerLabel, sealed: sealed)
        let totals = ByteTotals()
        try channel.pipeline.syncOperations.addHandlers([
            tls,
            ByteCounter(totals),
            ByteToMessageHandler(FrameDecoder(limits: settings.limits)),
            FrameWriter(),
            handler,
        ])
        return Parts(
            handler: NIOLoopBound(handler, eventLoop: channel.eventLoop), stats: handler.stats, totals: totals, sealed: sealed,
            hello: handler.helloPromise.futureResult, closed: handler.closedPromise.futureResult)
    }
}

/// The bytes a connection received and sent, read from any thread.
final class ByteTotals: Sendable {
    let received = Atomic<Int>(0)
    let sent = Atomic<Int>(0)
}

/// Counts the bytes that pass between TLS and BEP's framing, both ways.
final class ByteCounter: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let totals: ByteTotals

    init(_ totals: ByteTotals) { self.totals = totals }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        totals.received.add(unwrapInboundIn(data).readableBytes, ordering: .relaxed)
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        totals.sent.add(unwrapOutboundIn(data).readableBytes, ordering: .relaxed)
        context.write(data, promise: promise)
    }
}

extension PeerConnection {
    /// How long a one-shot verb's session waits for the peer to hang up after its Close
    /// (``close(reason:hangUpAfter:)``).
    public static let oneShotCloseGrace: TimeAmountSeconds = 10
}

extension Sequence where Element == PeerConnection {
    /// Closes every connection at once: each waits for its peer to hang up (up to its grace),
    /// and one slow peer must not hold up the others' goodbyes.
    public func closeAll(reason: String, hangUpAfter grace: TimeAmountSeconds? = nil) async {
        await withTaskGroup(of: Void.self) { group in
            for connection in self { group.addTask { await connection.close(reason: reason, hangUpAfter: grace) } }
        }
    }
}
