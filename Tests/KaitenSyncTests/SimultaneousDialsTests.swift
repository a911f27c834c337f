import Foundation
import KaitenConfig
import KaitenPeer
import KaitenProtocol
import KaitenTestSupport
import Logging
import Synchronization
import Testing

@testable import KaitenSync

/// Two long-running Kaitens that dial each other while one of them is still busy with an
/// earlier exchange (its start, under load): each one's dial waits for an answer the other
/// gives only after its own turn. Exactly one connection must come of it, at once, whichever
/// of the two is the busy one (seen hanging until the exchange timeout when the busy one had
/// the lower device ID and had not begun to dial).
@Suite(.timeLimit(.minutes(3)))
struct SimultaneousDialsTests {
    struct Side {
        let id: DeviceID
        let port: Int
        let sessions: PeerSessions
        let listeners: [PeerEntrance]
    }

    static func pair(in directory: TemporaryDirectory) async throws -> (Side, Side) {
        let ports = (try FreePort.next(), try FreePort.next())
        let homes = [Home(path: directory.file("a")), Home(path: directory.file("b"))]
        let created = [
            try KaitenHome.initialize(homes[0], name: "a", listenAddress: "tcp://127.0.0.1:\(ports.0)"),
            try KaitenHome.initialize(homes[1], name: "b", listenAddress: "tcp://127.0.0.1:\(ports.1)"),
        ]
        var sides: [Side] = []
        for (index, home) in homes.enumerated() {
            let me = created[index].deviceID
            let other = created[1 - index].deviceID
            let port = index == 0 ? ports.1 : ports.0
            let data = directory.file("data-\(index)")
            try FileManager.default.createDirectory(atPath: data + "/.stfolder", withIntermediateDirectories: true)
            let config = try ConfigFile.load(path: home.configPath)
            try config.addDevice(DeviceConfiguration(id: other, name: index == 0 ? "b" : "a", addresses: ["tcp://127.0.0.1:\(port)"]))
            try config.addFolder(FolderConfiguration(id: "f", path: data, devices: [me, other]))
            try config.write()
            let sessions = PeerSessions(home: try KaitenHome.open(home), timeout: 30, logger: Logger(label: "test"), serve: nil)
            let (listeners, _) = await sessions.listen(warn: { _ in })
            sides.append(Side(id: me, port: index == 0 ? ports.0 : ports.1, sessions: sessions, listeners: listeners))
        }
        return (sides[0], sides[1])
    }

    @Test(arguments: [true, false])
    func twoDevicesDiallingEachOtherKeepOneConnectionWhicheverIsBusy(busyIsLower: Bool) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (a, b) = try await Self.pair(in: directory)
        let aIsLower = a.id.bytes.lexicographicallyPrecedes(b.id.bytes)
        let (busy, other) = aIsLower == busyIsLower ? (a, b) : (b, a)

        // The busy one holds its exchange queue; its connect plans the dial and waits its turn.
        let (gate, release) = AsyncStream<Void>.makeStream()
        let (entered, enteredContinuation) = AsyncStream<Void>.makeStream()
        let holding = Task {
            await busy.sessions.exchanges.run {
                enteredContinuation.yield()
                for await _ in gate { break }
            }
        }
        for await _ in entered { break }
        let busyConnect = Task { try await busy.sessions.connect(warn: { _ in }) }
        while busy.sessions.dialing.state(other.id) == nil { try await Task.sleep(for: .milliseconds(10)) }
        // The other one dials now, and its dial reaches the busy one while it waits.
        let otherConnect = Task { try await other.sessions.connect(warn: { _ in }) }
        try await Task.sleep(for: .milliseconds(700))
        release.yield()
        await holding.value

        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline,
            busy.sessions.connections()[other.id]?.isOpen != true || other.sessions.connections()[busy.id]?.isOpen != true
        {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(busy.sessions.connections()[other.id]?.isOpen == true, "the busy one holds no connection to the other")
        #expect(other.sessions.connections()[busy.id]?.isOpen == true, "the other holds no connection to the busy one")
        // Both connects are over (neither waits for an exchange the other never answers), and
        // the one connection stays: neither side closed the one the other kept.
        _ = try await busyConnect.value
        _ = try await otherConnect.value
        try await Task.sleep(for: .milliseconds(500))
        let kept = (busy.sessions.connections()[other.id], other.sessions.connections()[busy.id])
        #expect(kept.0?.isOpen == true && kept.1?.isOpen == true)
        // The one kept is the lower device's dial: from there, the higher one's listening port.
        let (lower, higher) = aIsLower ? (a, b) : (b, a)
        let dialled = lower.sessions.connections()[higher.id]?.remoteAddress
        #expect(dialled?.hasSuffix(":\(higher.port)") == true, "\(dialled ?? "none")")

        for side in [a, b] {
            await side.sessions.close(reason: "test done")
            for listener in side.listeners { await listener.close() }
        }
    }
}
