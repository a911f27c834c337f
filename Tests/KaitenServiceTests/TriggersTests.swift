import KaitenProtocol
import Testing

@testable import KaitenService

/// What wakes `kaiten run` and what a round is asked to look at: many triggers, one round.
@Suite(.timeLimit(.minutes(5)))
struct TriggersTests {
    static let peer = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")

    @Test func aBurstIsOneWakeWithEveryPathNamed() async {
        let triggers = Triggers()
        triggers.yield(.peers(Self.peer, folder: "f", names: ["a", "b"], full: false))
        triggers.yield(.folder("f", path: "c"))
        triggers.yield(.peers(Self.peer, folder: "g", names: ["d"], full: false))
        let woken = await triggers.wait()
        #expect(!woken.whole)
        #expect(woken.peerPaths == ["f": ["a", "b"], "g": ["d"]])
        #expect(woken.diskPaths == ["f": ["c"]])
        #expect(woken.reason == "an index update from \(Self.peer.shortDescription) for f")
        // Taken: nothing is left for the next look.
        let next = triggers.take()
        #expect(next.reason == nil && next.peerPaths.isEmpty && next.diskPaths.isEmpty)
    }

    @Test func whatOnlyAWholeRoundAnswersDropsThePaths() async {
        for trigger: Service.Trigger in [
            .peers(Self.peer, folder: "f", names: ["x"], full: true), .timer, .disk("a selection file"), .eventsLost(folder: "f"),
        ] {
            let triggers = Triggers()
            triggers.yield(.peers(Self.peer, folder: "f", names: ["a"], full: false))
            triggers.yield(trigger)
            triggers.yield(.folder("f", path: "b"))
            let woken = await triggers.wait()
            #expect(woken.whole, "\(trigger)")
            #expect(woken.peerPaths.isEmpty && woken.diskPaths.isEmpty, "\(trigger)")
        }
    }

    @Test func pastTheScopeLimitTheRoundIsWhole() async {
        let triggers = Triggers()
        triggers.yield(.peers(Self.peer, folder: "f", names: (0...Service.scopeLimit).map { "p\($0)" }, full: false))
        let woken = await triggers.wait()
        #expect(woken.whole && woken.peerPaths.isEmpty)
    }

    @Test func aWatchedPathIsNotTheReasonWhenSomethingElseWokeTheLoopToo() async {
        let triggers = Triggers()
        triggers.yield(.folder("f", path: "docs/new"))
        triggers.yield(.peers(Self.peer, folder: "f", names: ["docs/b.txt"], full: false))
        let woken = await triggers.wait()
        // The path may be the echo of the service's own write: the round can say what else.
        #expect(woken.reason == "a change in f/docs/new")
        #expect(woken.reasonBesidesPaths == "an index update from \(Self.peer.shortDescription) for f")
    }

    @Test func configAndStopWakeWithoutAReason() async {
        let triggers = Triggers()
        triggers.yield(.config)
        let config = await triggers.wait()
        #expect(config.config && config.reason == nil)
        triggers.yield(.stop)
        let stop = await triggers.wait()
        #expect(stop.stop)
    }
}
