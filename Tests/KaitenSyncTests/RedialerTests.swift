import Foundation
import KaitenProtocol
import Synchronization
import Testing

@testable import KaitenSync

/// The redial loop on a fake registry: who is dialled when, and what is said, without a socket.
@Suite(.timeLimit(.minutes(5)))
struct RedialerTests {
    static let nas = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")
    static let laptop = try! DeviceID("MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD")

    final class FakeRegistry: RedialTarget {
        struct State {
            /// Connected peers, and whether through a relay.
            var connected: [DeviceID: Bool] = [:]
            var lossReasons: [DeviceID: String] = [:]
            /// What the next dials of a peer meet, in order (nil: reached); past the list: refused.
            var outcomes: [DeviceID: [String?]] = [:]
            var dials: [String] = []
        }
        let state = Mutex(State())
        let (changes, changed) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))

        func connectedPeers() -> [DeviceID: Bool] { state.withLock { $0.connected } }
        func takeLossReason(_ device: DeviceID) -> String? { state.withLock { $0.lossReasons.removeValue(forKey: device) } }
        func connectionChanges() -> AsyncStream<Void> { changes }

        func dialReportingProblems(_ devices: Set<DeviceID>, directOnly: Bool) async -> [DeviceID: String] {
            state.withLock { state in
                var problems: [DeviceID: String] = [:]
                for device in devices.sorted(by: { $0.description < $1.description }) {
                    state.dials.append((directOnly ? "direct " : "") + device.shortDescription)
                    guard !directOnly else { continue }
                    let next = state.outcomes[device]?.isEmpty == false ? state.outcomes[device]!.removeFirst() : "connection refused"
                    if let problem = next { problems[device] = problem } else { state.connected[device] = false }
                }
                return problems
            }
        }

        var dials: [String] { state.withLock { $0.dials } }
    }

    final class Said: Sendable {
        let lines = Mutex<[String]>([])
        func say(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    static let tick = Duration.milliseconds(50)

    /// Waits, in real time, until `condition` holds. The limit only catches a loop that hangs:
    /// nothing here waits for the clock to pass, so the limit is far beyond any load.
    func settle(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("the redial loop never reached: \(what)")
                throw CancellationError()
            }
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// Moves `clock` on one tick at a time, each time the loop is asleep in its tick (so it saw
    /// every instant), until `condition` holds.
    func run(_ clock: ManualClock, until what: String, _ condition: () -> Bool) async throws {
        while true {
            try await settle(what) { condition() || clock.hasSleeper(lasting: Self.tick) }
            if condition() { return }
            clock.advance(by: Self.tick)
        }
    }

    @Test func aLostPeerIsSaidOnceDialledAfterTheFirstDelayAndAtOnceWhenFoundOnTheLAN() async throws {
        let registry = FakeRegistry()
        registry.state.withLock {
            $0.lossReasons[Self.nas] = "closed by the peer"
            $0.outcomes[Self.nas] = ["connection refused", nil]
        }
        let said = Said()
        let (found, finding) = AsyncStream<DeviceID>.makeStream()
        let clock = ManualClock()
        let loop = Redialer.start(
            wanted: [Self.nas], target: registry, found: found, upgradeInterval: 3600, tick: Self.tick, clock: clock, warn: said.say)
        defer { loop.cancel() }
        let nas = Self.nas.shortDescription
        try await run(clock, until: "the first dial") { registry.dials.count == 1 }
        // The loss is seen at the first tick; the dial comes the first delay after it, not before.
        #expect(clock.elapsed == .seconds(RedialSchedule.firstDelay) + Self.tick)
        try await run(clock, until: "the failure said") { said.all.count == 2 }
        #expect(
            said.all == [
                "\(nas): connection lost: closed by the peer; dialling again in 2 s",
                "\(nas): connection refused; dialling again with backoff (up to 60 s)",
            ])
        // The backoff now says 4 s; heard on the LAN, it is dialled at once.
        let rushed = clock.elapsed
        finding.yield(Self.nas)
        try await run(clock, until: "the rushed dial") { registry.dials.count == 2 }
        #expect(clock.elapsed - rushed < .seconds(1))
        try await settle("the reconnection said") { said.all.count == 3 }
        #expect(said.all.last == "reconnected to \(nas)")
        // Connected: nothing more is dialled, however long it stays connected.
        clock.advance(by: .seconds(600))
        try await Task.sleep(for: .milliseconds(200))
        #expect(registry.dials == [nas, nas])
    }

    @Test func aRelayedPeerIsOfferedADirectConnectionAndAConnectedOneIsLeftAlone() async throws {
        let registry = FakeRegistry()
        registry.state.withLock { $0.connected = [Self.nas: true, Self.laptop: false] }
        let said = Said()
        let clock = ManualClock()
        let loop = Redialer.start(
            wanted: [Self.nas, Self.laptop], target: registry, found: nil, upgradeInterval: 1, tick: Self.tick, clock: clock,
            warn: said.say)
        defer { loop.cancel() }
        // Every peer connected: the loop waits for a change, only the upgrade's timer runs.
        try await settle("the upgrade's timer") { clock.hasSleeper(lasting: .seconds(1)) }
        #expect(!clock.hasSleeper(lasting: Self.tick))
        clock.advance(by: .seconds(1))
        try await settle("the upgrade") { !registry.dials.isEmpty }
        #expect(registry.dials == ["direct \(Self.nas.shortDescription)"])
        #expect(said.all.isEmpty)
        // The laptop's connection goes: dialled again after the first delay, said once.
        registry.state.withLock {
            $0.connected[Self.laptop] = nil
            $0.lossReasons[Self.laptop] = "read timeout"
            $0.outcomes[Self.laptop] = [nil]
        }
        let lost = clock.elapsed
        registry.changed.yield()
        try await run(clock, until: "the redial") { registry.dials.contains(Self.laptop.shortDescription) }
        #expect(clock.elapsed - lost == .seconds(RedialSchedule.firstDelay) + Self.tick)
        try await settle("the reconnection said") { said.all.count == 2 }
        #expect(
            said.all == [
                "\(Self.laptop.shortDescription): connection lost: read timeout; dialling again in 2 s",
                "reconnected to \(Self.laptop.shortDescription)",
            ])
        #expect(registry.dials.allSatisfy { $0 == "direct \(Self.nas.shortDescription)" || $0 == Self.laptop.shortDescription })
    }
}
