import KaitenProtocol
import NIOCore
import Testing

@testable import KaitenPeer

/// The BEP session's transitions, without a channel: each input and the action it returns.
@Suite struct BEPSessionStateTests {
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    func settings(readTimeout: Double = 300, batches: Int = 8) -> PeerSettings {
        var settings = PeerSettings()
        settings.readTimeout = readTimeout
        settings.pingAfterWriteSilence = 60
        settings.closeGrace = 1
        settings.maxUndeliveredIndexBatches = batches
        return settings
    }

    func after(_ seconds: Int64) -> NIODeadline { start + .seconds(seconds) }

    @Test func theHelloIsTakenOnceAndItsDeadlineDropsOnlyASilentPeer() {
        var state = BEPSessionState(settings: settings(), now: start)
        #expect(state.helloDeadlinePassed(peer: "ABCDEFG", seconds: 30) == .protocolError("no Hello from ABCDEFG within 30 s"))
        let first = state.helloArrived()
        let second = state.helloArrived()
        #expect(first && !second)
        #expect(state.helloDeadlinePassed(peer: "ABCDEFG", seconds: 30) == nil)
    }

    @Test func silenceOnOurSidePingsOnlyOnceOurClusterConfigIsOut() {
        var state = BEPSessionState(settings: settings(), now: start)
        state.read(at: after(61))
        #expect(state.keepalive(at: after(61), readTimeoutSeconds: 300) == .none, "no ping before our ClusterConfig (2.x refuses it)")
        state.sentClusterConfig(at: after(10))
        #expect(state.keepalive(at: after(69), readTimeoutSeconds: 300) == .none)
        #expect(state.keepalive(at: after(70), readTimeoutSeconds: 300) == .ping)
        state.wrote(at: after(70))
        #expect(state.keepalive(at: after(71), readTimeoutSeconds: 300) == .none)
    }

    @Test func nothingReadForTheReadTimeoutClosesWithAReason() {
        var state = BEPSessionState(settings: settings(readTimeout: 5), now: start)
        state.read(at: after(3))
        #expect(state.keepalive(at: after(7), readTimeoutSeconds: 5) == .none)
        #expect(state.keepalive(at: after(8), readTimeoutSeconds: 5) == .close(.byUs("read timeout: nothing received for 5 s")))
    }

    @Test func weCloseOnceTellingThePeerWhyAndWaitingForItsCloseOnlyWhenWeDecided() {
        var state = BEPSessionState(settings: settings(), now: start)
        let r1 = state.close(.byUs("shutting down"), sendClose: true)
        #expect(r1 == .sendClose(reason: "shutting down", thenHangUpAfter: .seconds(1)))
        #expect(!state.isOpen)
        let r2 = state.close(.byUs("again"), sendClose: true)
        #expect(r2 == nil, "a second close does nothing")
        let r3 = state.peerSentClose("closed by remote: shutting down")
        #expect(r3 == .hangUp, "the peer's answer to our Close hangs up")

        var broken = BEPSessionState(settings: settings(), now: start)
        let r4 = broken.close(.protocolError("bad frame"), sendClose: true)
        #expect(r4 == .sendClose(reason: "bad frame", thenHangUpAfter: .zero))
    }

    @Test func aPeersCloseEndsTheSessionWithItsReason() {
        var state = BEPSessionState(settings: settings(), now: start)
        let r5 = state.peerSentClose("restarting")
        #expect(r5 == .hangUp)
        #expect(state.closeReason == .byPeer("restarting"))
        let r6 = state.drop(.disconnected("reset"))
        #expect(!r6, "a drop after a close keeps the first reason")
        let end = state.channelClosed(.disconnected(""))
        #expect(end == .init(reason: .byPeer("restarting"), failHello: true))
        let r7 = state.channelClosed(.disconnected(""))
        #expect(r7 == nil, "the end is said once")
    }

    @Test func aTransportFailureIsTheReasonWhenNothingElseWas() {
        var state = BEPSessionState(settings: settings(), now: start)
        _ = state.helloArrived()
        let r8 = state.drop(.disconnected("the peer reset the connection"))
        #expect(r8)
        let r9 = state.channelClosed(.disconnected(""))
        #expect(r9 == .init(reason: .disconnected("the peer reset the connection"), failHello: false))

        var quiet = BEPSessionState(settings: settings(), now: start)
        let r10 = quiet.channelClosed(.disconnected(""))
        #expect(r10 == .init(reason: .disconnected(""), failHello: true))
    }

    @Test func readsPauseWhileTheConsumerIsBehindAndResumeAtAQuarter() {
        var state = BEPSessionState(settings: settings(batches: 8), now: start)
        var actions: [BEPSessionState.ReadsAction?] = []
        for _ in 0..<8 { actions.append(state.indexBatchDelivered()) }
        #expect(actions.allSatisfy { $0 == nil }, "without a consumer asking for it, no backpressure")
        let r11 = state.setIndexBackpressure(true)
        #expect(r11 == nil)
        let r12 = state.indexBatchDelivered()
        #expect(r12 == .pause)
        let r13 = state.indexBatchDelivered()
        #expect(r13 == nil, "paused once")
        var resumed: [BEPSessionState.ReadsAction?] = []
        for _ in 0..<8 { resumed.append(state.indexBatchConsumed()) }
        #expect(resumed == [nil, nil, nil, nil, nil, nil, nil, .resume], "10 undelivered: resumes when 2 are left (8 / 4)")
        _ = state.indexBatchDelivered()
        for _ in 0..<6 { _ = state.indexBatchDelivered() }
        #expect(state.readsPaused)
        let r14 = state.setIndexBackpressure(false)
        #expect(r14 == .resume, "a consumer that stops never leaves reads paused")
    }

    @Test func requestsGoOutWithinTheByteBudgetAndTheRestWaitInOrder() {
        var window = RequestWindow<String>(limit: 100)
        func request(_ size: Int32) -> BEPRequest {
            var r = BEPRequest()
            r.size = size
            return r
        }
        let r15 = window.enqueue(request(60), "a")
        #expect(r15.map(\.size) == [60])
        let r16 = window.enqueue(request(60), "b")
        #expect(r16.isEmpty, "over the budget: waits")
        let r17 = window.enqueue(request(10), "c")
        #expect(r17.isEmpty, "behind b, in order")
        #expect(window.outstandingBytes == 60 && window.queuedCount == 2)
        let done = window.complete(1)
        #expect(done?.token == "a")
        #expect(done?.send.map(\.size) == [60, 10])
        let r18 = window.complete(1)
        #expect(r18 == nil, "a response to a request not out is ignored")
        let drained = window.drain()
        #expect(Set(drained) == ["b", "c"])
        #expect(window.pendingCount == 0 && window.outstandingBytes == 0)

        var alone = RequestWindow<String>(limit: 100)
        let r19 = alone.enqueue(request(500), "big")
        #expect(r19.map(\.size) == [500], "a request larger than the budget goes alone")
    }
}
