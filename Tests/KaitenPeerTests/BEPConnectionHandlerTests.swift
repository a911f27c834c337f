import Foundation
import KaitenEncryption
import KaitenProtocol
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import KaitenPeer

/// The session logic with no socket: frames in, frames out, a fake clock.
@Suite(.timeLimit(.minutes(5)))
struct BEPConnectionHandlerTests {
    final class Harness {
        let channel = EmbeddedChannel()
        let handler: BEPConnectionHandler
        let events = NIOLockedValueBox<[PeerEvent]>([])
        var loop: EmbeddedEventLoop { channel.embeddedEventLoop }

        init(settings: PeerSettings = PeerSettings(), sealed: SealedFolders = SealedFolders()) throws {
            let events = self.events
            handler = BEPConnectionHandler(
                hello: BEPHello(), settings: settings, logger: Logger(label: "test"),
                events: PeerEventSink(yield: { event in events.withLockedValue { $0.append(event) } }, finish: {}),
                eventLoop: channel.eventLoop, peerLabel: "PEERXXX", sealed: sealed)
            try channel.pipeline.syncOperations.addHandler(handler)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            // Our Hello goes out first thing.
            guard case .hello = try #require(try channel.readOutbound(as: BEPOutbound.self)) else {
                throw HarnessFailure("no hello")
            }
            try channel.writeInbound(BEPFrame.hello(BEPHello()))
        }

        /// What was flushed, once the event loop has run what it had queued (requests are
        /// flushed together after the loop's queue, as on a real one).
        func outbound() throws -> [BEPMessage] {
            channel.embeddedEventLoop.run()
            var out: [BEPMessage] = []
            while let item = try channel.readOutbound(as: BEPOutbound.self) {
                if case .message(let message) = item { out.append(message) }
            }
            return out
        }

        /// This side's ClusterConfig goes out (the session's first message after the Hello).
        func sendClusterConfig() {
            _ = handler.send(.clusterConfig(BEPClusterConfig()))
            _ = try? outbound()
        }

        var indexes: [[BEPFileInfo]] {
            events.withLockedValue { $0 }.compactMap { if case .index(_, let files, _) = $0 { files } else { nil } }
        }

        func receive(_ message: BEPMessage) throws {
            try channel.writeInbound(BEPFrame.message(message, wasCompressed: false))
        }

        var closeReason: PeerCloseReason? {
            for event in events.withLockedValue({ $0 }) { if case .closed(let r) = event { return r } }
            return nil
        }
    }

    struct HarnessFailure: Error { let text: String; init(_ t: String) { text = t } }

    static func response(id: Int32, data: [UInt8]) -> BEPMessage {
        var response = BEPResponse()
        response.id = id
        response.data = Data(data)
        return .response(response)
    }

    static func request(size: Int32) -> BEPRequest {
        var request = BEPRequest()
        request.folder = "f"
        request.name = "a"
        request.size = size
        return request
    }

    @Test func pingsAfterSixtySecondsOfWriteSilenceOnly() throws {
        let h = try Harness()
        // Before this side's ClusterConfig, never (syncthing 2.x closes on a Ping it gets before
        // the ClusterConfig: "protocol error on ping: invalid state 0"), however long the silence.
        h.loop.advanceTime(by: .seconds(75))
        #expect(try h.outbound().isEmpty, "a ping before this side's ClusterConfig")
        h.loop.advanceTime(by: .seconds(30))
        #expect(try h.outbound().isEmpty, "a ping before this side's ClusterConfig")

        // A write restarts the silence: 45 s after a message, no ping; 75 s after it, one.
        _ = h.handler.send(.clusterConfig(BEPClusterConfig()))
        #expect(try h.outbound().count == 1)
        h.loop.advanceTime(by: .seconds(45))
        #expect(try h.outbound().isEmpty, "a message was written 45 s ago: no ping yet")
        h.loop.advanceTime(by: .seconds(30))
        let later = try h.outbound()
        guard later.count == 1, case .ping = later.first else { Issue.record("want one ping, got \(later)"); return }
        // Receiving does not count as writing: a chatty peer still gets pings.
        h.loop.advanceTime(by: .seconds(40))
        try h.receive(.ping)
        h.loop.advanceTime(by: .seconds(30))
        let whileReceiving = try h.outbound()
        guard whileReceiving.count == 1, case .ping = whileReceiving.first else {
            Issue.record("want one ping, got \(whileReceiving)")
            return
        }
    }

    @Test func dropsAPeerSilentForThreeHundredSeconds() throws {
        let h = try Harness()
        h.loop.advanceTime(by: .seconds(240))
        #expect(h.channel.isActive)
        try h.receive(.ping)  // the peer is alive: the clock restarts
        h.loop.advanceTime(by: .seconds(240))
        #expect(h.channel.isActive)
        h.loop.advanceTime(by: .seconds(75))
        let sent = try h.outbound()
        guard case .close(let close) = sent.last else { Issue.record("want a Close, got \(sent)"); return }
        #expect(close.reason.contains("read timeout"))
        #expect(!h.channel.isActive)
        #expect(h.closeReason == .byUs(close.reason))
    }

    @Test func peerCloseReasonSurfaces() throws {
        let h = try Harness()
        var close = BEPClose()
        close.reason = "handling index for x: no such folder"
        try h.receive(.close(close))
        #expect(h.closeReason == .byPeer("handling index for x: no such folder"))
        #expect(!h.channel.isActive)
    }

    @Test func ourCloseSendsTheReason() throws {
        let h = try Harness()
        h.handler.close(.byUs("bye now"), sendClose: true)
        let sent = try h.outbound()
        guard case .close(let close) = sent.last else { Issue.record("got \(sent)"); return }
        #expect(close.reason == "bye now")
    }

    /// Syncthing hangs up on our Close only once it has taken in everything sent before it, and
    /// turns away a new connection from this device until then: a one-shot verb's session waits
    /// for that (the next `kaiten` command was turned away when it hung up after one second),
    /// and ends as soon as the peer hangs up. A stopping service waits one second only.
    @Test func aOneShotCloseWaitsForThePeerToHangUp() throws {
        let grace = PeerConnection.oneShotCloseGrace
        let h = try Harness()
        h.handler.close(.byUs("index sync done"), sendClose: true, grace: grace)
        h.loop.advanceTime(by: .seconds(Int64(grace) - 1))
        #expect(h.channel.isActive, "hung up before the peer had read the Close")
        h.channel.pipeline.fireChannelInactive()
        #expect(h.closeReason == .byUs("index sync done"))

        let silent = try Harness()
        silent.handler.close(.byUs("index sync done"), sendClose: true, grace: grace)
        silent.loop.advanceTime(by: .seconds(Int64(grace) - 1))
        #expect(silent.channel.isActive)
        silent.loop.advanceTime(by: .seconds(1))
        #expect(!silent.channel.isActive, "a peer that never hangs up is left after the grace")

        let service = try Harness()
        service.handler.close(.byUs("stopping"), sendClose: true)
        service.loop.advanceTime(by: .seconds(1))
        #expect(!service.channel.isActive, "a stopping service waits on a silent peer")
    }

    @Test func responsesAreMatchedOutOfOrder() throws {
        let h = try Harness()
        let futures = (0..<3).map { i in h.handler.request(Self.request(size: Int32(i + 1))) }
        let ids = try h.outbound().compactMap { message -> Int32? in
            if case .request(let r) = message { return r.id } else { return nil }
        }
        #expect(ids.count == 3)
        #expect(Set(ids).count == 3)
        try h.receive(Self.response(id: ids[2], data: [3, 3, 3]))
        try h.receive(Self.response(id: ids[0], data: [1]))
        try h.receive(Self.response(id: ids[1], data: [2, 2]))
        #expect(try futures.map { [UInt8](try $0.wait().data) } == [[1], [2, 2], [3, 3, 3]])
    }

    /// Requests made one after the other go out in one flush, after what the loop had queued.
    @Test func requestsMadeTogetherGoOutInOneFlush() throws {
        let h = try Harness()
        let futures = (0..<3).map { i in h.handler.request(Self.request(size: Int32(i + 1))) }
        #expect(try h.channel.readOutbound(as: BEPOutbound.self) == nil, "nothing flushed before the loop ran")
        h.channel.embeddedEventLoop.run()
        var requests = 0
        while let item = try h.channel.readOutbound(as: BEPOutbound.self) {
            if case .message(.request) = item { requests += 1 }
        }
        #expect(requests == 3)
        _ = futures
    }

    @Test func outstandingRequestBytesStayWithin32MiB() throws {
        let h = try Harness()
        let mib = Int32(1 << 20)
        let futures = (0..<40).map { _ in h.handler.request(Self.request(size: mib)) }
        var sent = try h.outbound().compactMap { message -> BEPRequest? in
            if case .request(let r) = message { return r } else { return nil }
        }
        #expect(sent.count == 32)
        try h.receive(Self.response(id: sent[0].id, data: []))
        sent = try h.outbound().compactMap { message -> BEPRequest? in
            if case .request(let r) = message { return r } else { return nil }
        }
        #expect(sent.count == 1)
        #expect(h.handler.stats.withLockedValue { $0.maxOutstandingRequestBytes } == 32 << 20)
        _ = futures
    }

    @Test func requestsForWhatWeDoNotAnnounceGetNoSuchFile() throws {
        let h = try Harness()
        var request = Self.request(size: 10)
        request.id = 77
        try h.receive(.request(request))
        let sent = try h.outbound()
        guard case .response(let response) = sent.first else { Issue.record("got \(sent)"); return }
        #expect(response.id == 77)
        #expect(response.code == .noSuchFile)
    }

    /// A peer's requests are answered at most `limit` bytes at a time (always at least one);
    /// the rest wait in order and start as room frees up.
    @Test func requestsAreServedWithinTheBytesInFlightBound() {
        func request(_ id: Int32, _ size: Int32) -> BEPRequest {
            var r = Self.request(size: size)
            r.id = id
            return r
        }
        var queue = ServingQueue(limit: 20)
        #expect(queue.arrived(request(1, 10)).map(\.id) == [1])
        #expect(queue.arrived(request(2, 10)).map(\.id) == [2])
        #expect(queue.arrived(request(3, 10)).isEmpty, "20 bytes in flight already")
        #expect(queue.arrived(request(4, 5)).isEmpty, "in order: 4 waits behind 3")
        #expect(queue.bytesInFlight == 20)
        #expect(queue.finished(request(1, 10)).map(\.id) == [3])
        #expect(queue.finished(request(2, 10)).map(\.id) == [4])
        #expect(queue.finished(request(3, 10)).isEmpty)
        #expect(queue.finished(request(4, 5)).isEmpty)
        #expect(queue.bytesInFlight == 0)
        // Larger than the limit: answered alone, never stuck.
        #expect(queue.arrived(request(5, 100)).map(\.id) == [5])
        #expect(queue.arrived(request(6, 1)).isEmpty)
        #expect(queue.finished(request(5, 100)).map(\.id) == [6])
    }

    @Test func aRequestForAnEscapingNameClosesTheConnection() throws {
        let h = try Harness()
        var request = Self.request(size: 10)
        request.name = "../etc/passwd"
        try h.receive(.request(request))
        guard case .protocolError(let reason)? = h.closeReason else {
            Issue.record("got \(String(describing: h.closeReason))")
            return
        }
        #expect(reason.contains("../etc/passwd"))
    }

    @Test func anInconsistentIndexEntryClosesTheConnection() throws {
        let h = try Harness()
        h.sendClusterConfig()
        var file = BEPFileInfo()
        file.name = "no-blocks.bin"
        file.size = 10
        var index = BEPIndex()
        index.folder = "f"
        index.files = [file]
        try h.receive(.index(index))
        guard case .protocolError(let reason)? = h.closeReason else {
            Issue.record("got \(String(describing: h.closeReason))")
            return
        }
        #expect(reason.contains("no-blocks.bin"))
        let delivered = h.events.withLockedValue { $0 }.contains { if case .index = $0 { true } else { false } }
        #expect(!delivered)
    }

    /// An index that comes before this side's ClusterConfig is held until it went out (only
    /// then is it known which folders are encrypted), then delivered in order; a peer that
    /// floods batches before it is closed.
    @Test func indexesBeforeOurClusterConfigWaitForIt() throws {
        let h = try Harness()
        var directory = BEPFileInfo()
        directory.type = .directory
        var index = BEPIndex()
        index.folder = "f"
        for name in ["one", "two"] {
            directory.name = name
            index.files = [directory]
            try h.receive(.index(index))
        }
        #expect(h.indexes.isEmpty)
        h.sendClusterConfig()
        #expect(h.indexes.map { $0.map(\.name) } == [["one"], ["two"]])

        let flooded = try Harness()
        for _ in 0...BEPConnectionHandler.maxHeldIndexes { try flooded.receive(.index(index)) }
        guard case .protocolError(let reason)? = flooded.closeReason else {
            Issue.record("got \(String(describing: flooded.closeReason))")
            return
        }
        #expect(reason.contains("before this device's ClusterConfig"))
    }

    /// A folder exchanged encrypted: the index is decrypted before anything sees it, and an
    /// entry that does not decrypt (plain text here) closes the connection, nothing delivered.
    @Test func aSealedFolderIsDeliveredDecryptedOrNotAtAll() throws {
        let key = FolderKey(folderID: "f", raw: Array(repeating: 7, count: 32))
        let sealed = SealedFolders()
        sealed.set(["f": UntrustedExchange(key: key)])
        var plain = BEPFileInfo()
        plain.name = "dir/photo.jpg"
        plain.type = .directory
        plain.sequence = 3
        var index = BEPIndex()
        index.folder = "f"
        index.files = [try EncryptedFileInfo.encrypt(plain, folderKey: key)]

        let h = try Harness(sealed: sealed)
        h.sendClusterConfig()
        try h.receive(.index(index))
        #expect(h.indexes.first?.map(\.name) == ["dir/photo.jpg"])
        #expect(h.closeReason == nil)

        let refused = try Harness(sealed: sealed)
        refused.sendClusterConfig()
        index.files = [plain]
        try refused.receive(.index(index))
        #expect(refused.indexes.isEmpty)
        guard case .protocolError(let reason)? = refused.closeReason else {
            Issue.record("got \(String(describing: refused.closeReason))")
            return
        }
        #expect(reason.contains("index of encrypted folder \"f\""), "\(reason)")
    }

    /// A folder this device holds as the untrusted one: sealed entries are delivered as they
    /// came (nothing is decrypted), and a plain entry (a peer taking this device for a trusted
    /// one) closes the connection, nothing delivered.
    @Test func aFolderHeldAsCiphertextTakesOnlySealedEntries() throws {
        let key = FolderKey(folderID: "f", raw: Array(repeating: 9, count: 32))
        let held = SealedFolders()
        held.setHeld(["f": nil])
        var plain = BEPFileInfo()
        plain.name = "dir"
        plain.type = .directory
        plain.sequence = 4
        let outer = try EncryptedFileInfo.encrypt(plain, folderKey: key)
        var index = BEPIndex()
        index.folder = "f"
        index.files = [outer]

        let h = try Harness(sealed: held)
        h.sendClusterConfig()
        try h.receive(.index(index))
        #expect(h.indexes.first == [outer])
        #expect(h.closeReason == nil)

        let refused = try Harness(sealed: held)
        refused.sendClusterConfig()
        index.files = [plain]
        try refused.receive(.index(index))
        #expect(refused.indexes.isEmpty)
        guard case .protocolError(let reason)? = refused.closeReason else {
            Issue.record("got \(String(describing: refused.closeReason))")
            return
        }
        #expect(reason.contains("plain data where ciphertext belongs") && reason.contains("\"dir\""), "\(reason)")
    }

    @Test func repeatedClusterConfigsAreAllDelivered() throws {
        let h = try Harness()
        try h.receive(.clusterConfig(BEPClusterConfig()))
        try h.receive(.clusterConfig(BEPClusterConfig()))
        let count = h.events.withLockedValue { $0 }.filter { if case .clusterConfig = $0 { true } else { false } }.count
        #expect(count == 2)
    }

    @Test func pendingRequestsFailWhenTheConnectionEnds() throws {
        let h = try Harness()
        let future = h.handler.request(Self.request(size: 5))
        _ = try h.outbound()
        _ = try h.channel.close().wait()
        #expect(throws: PeerError.self) { try future.wait() }
    }
}

/// Peer addresses as people write them in `kaiten status` and the logs (issue 36, item 23:
/// `[IPv4]127.0.0.1/127.0.0.1:42101`).
@Suite(.timeLimit(.minutes(5))) struct ShownAddressTests {
    @Test func addressesAreShownAsPeopleWriteThem() throws {
        #expect(PeerConnection.shown(try SocketAddress(ipAddress: "127.0.0.1", port: 42101)) == "127.0.0.1:42101")
        #expect(PeerConnection.shown(try SocketAddress(ipAddress: "::1", port: 22000)) == "[::1]:22000")
        #expect(PeerConnection.shown(nil) == "?")
    }
}
