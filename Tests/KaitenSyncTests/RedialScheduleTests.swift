import KaitenProtocol
import KaitenSync
import Testing

/// The sessions' redial backoff, without a socket: a lost peer is dialled after 2 s, then after
/// twice as long at each failure up to 60 s; a peer heard on the LAN at once; each kind of
/// failure said once.
@Suite struct RedialScheduleTests {
    let peer = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")
    let start = ContinuousClock.now

    func seconds(_ s: Int) -> ContinuousClock.Instant { start + .seconds(s) }

    @Test func aLostPeerWaitsTwoSecondsThenTwiceAsLongAfterEachFailureUpToAMinute() {
        var schedule = RedialSchedule()
        let first = schedule.lost(peer, now: start)
        let again = schedule.lost(peer, now: start)
        #expect(first)
        #expect(!again, "a peer already waiting is not scheduled again")
        #expect(schedule.due(among: [peer], now: seconds(1)).isEmpty)
        #expect(schedule.due(among: [peer], now: seconds(2)) == [peer])
        var now = seconds(2)
        var waits: [Int] = []
        for _ in 0..<8 {
            _ = schedule.dialled(peer, reached: false, problem: "connection refused", now: now)
            let next = schedule.dueTime(of: peer)!
            waits.append(Int((next - now).components.seconds))
            now = next
        }
        #expect(waits == [4, 8, 16, 32, 60, 60, 60, 60])
    }

    @Test func aPeerHeardOnTheLANIsDialledAtOnceWhateverTheBackoff() {
        var schedule = RedialSchedule()
        schedule.lost(peer, now: start)
        _ = schedule.dialled(peer, reached: false, problem: "timeout", now: seconds(2))
        #expect(schedule.due(among: [peer], now: seconds(3)).isEmpty)
        schedule.rush(peer, now: seconds(3))
        #expect(schedule.due(among: [peer], now: seconds(3)) == [peer])
    }

    @Test func aReconnectedPeerStartsAfreshAndIsSaid() {
        var schedule = RedialSchedule()
        schedule.lost(peer, now: start)
        _ = schedule.dialled(peer, reached: false, problem: "timeout", now: seconds(2))
        _ = schedule.dialled(peer, reached: false, problem: "timeout", now: seconds(6))
        let remark = schedule.dialled(peer, reached: true, problem: nil, now: seconds(14))
        #expect(remark == .reconnected(peer))
        #expect(!schedule.isScheduled(peer))
        let lostAgain = schedule.lost(peer, now: seconds(20))
        #expect(lostAgain)
        #expect(schedule.dueTime(of: peer) == seconds(22), "the backoff begins again at 2 s")
    }

    @Test func eachKindOfFailureIsSaidOnceNotAtEveryAttempt() {
        var schedule = RedialSchedule()
        schedule.lost(peer, now: start)
        var remarks: [RedialSchedule.Remark?] = []
        for (problem, at) in [("connection refused", 2), ("connection refused", 6), (nil, 14), ("connection refused", 30)] as [(String?, Int)] {
            remarks.append(schedule.dialled(peer, reached: false, problem: problem, now: seconds(at)))
        }
        #expect(remarks == [.failing(peer, why: "connection refused"), nil, .failing(peer, why: "unreachable"), .failing(peer, why: "connection refused")])
    }

    @Test func aPeerConnectedMeanwhileForgetsItsBackoff() {
        var schedule = RedialSchedule()
        schedule.lost(peer, now: start)
        _ = schedule.dialled(peer, reached: false, problem: "timeout", now: seconds(2))
        schedule.connected(peer)
        #expect(!schedule.isScheduled(peer))
        #expect(schedule.due(among: [peer], now: seconds(100)).isEmpty)
    }
}
