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

    func waitFor(_ what: String, within limit: Duration = .seconds(20), _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + limit
        while !condition() {
            guard ContinuousClock.now < deadline else { throw CancellationError() }
            try await Task.sleep(for: .milliseconds(20))
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
        let started = ContinuousClock.now
        let loop = Redialer.start(
            wanted: [Self.nas], target: registry, found: found, upgradeInterval: 3600, tick: .milliseconds(50), warn: said.say)
        defer { loop.cancel() }
        let nas = Self.nas.shortDescription
        try await waitFor("the first dial") { registry.dials.count == 1 }
        // Not before the first delay of the backoff.
        #expect(ContinuousClock.now - started >= .seconds(RedialSchedule.firstDelay))
        try await waitFor("the failure said") { said.all.count == 2 }
        #expect(
            said.all == [
                "\(nas): connection lost: closed by the peer; dialling again in 2 s",
                "\(nas): connection refused; dialling again with backoff (up to 60 s)",
            ])
        // The backoff now says 4 s; heard on the LAN, it is dialled at once.
        let rushed = ContinuousClock.now
        finding.yield(Self.nas)
        try await waitFor("the rushed dial") { registry.dials.count == 2 }
        #expect(ContinuousClock.now - rushed < .seconds(3))
        try await waitFor("the reconnection said") { said.all.count == 3 }
        #expect(said.all.last == "reconnected to \(nas)")
        // Connected: nothing more is dialled.
        try await Task.sleep(for: .milliseconds(500))
        #expect(registry.dials == [nas, nas])
    }

    @Test func aRelayedPeerIsOfferedADirectConnectionAndAConnectedOneIsLeftAlone() async throws {
        let registry = FakeRegistry()
        registry.state.withLock { $0.connected = [Self.nas: true, Self.laptop: false] }
        let said = Said()
        let loop = Redialer.start(
            wanted: [Self.nas, Self.laptop], target: registry, found: nil, upgradeInterval: 1, tick: .milliseconds(50), warn: said.say)
        defer { loop.cancel() }
        try await waitFor("the upgrade") { !registry.dials.isEmpty }
        #expect(registry.dials.allSatisfy { $0 == "direct \(Self.nas.shortDescription)" })
        #expect(said.all.isEmpty)
        // The laptop's connection goes: dialled again after the first delay, said once.
        registry.state.withLock {
            $0.connected[Self.laptop] = nil
            $0.lossReasons[Self.laptop] = "read timeout"
            $0.outcomes[Self.laptop] = [nil]
        }
        registry.changed.yield()
        try await waitFor("the redial") { registry.dials.contains(Self.laptop.shortDescription) }
        try await waitFor("the reconnection said") { said.all.count == 2 }
        #expect(
            said.all == [
                "\(Self.laptop.shortDescription): connection lost: read timeout; dialling again in 2 s",
                "reconnected to \(Self.laptop.shortDescription)",
            ])
    }
}
