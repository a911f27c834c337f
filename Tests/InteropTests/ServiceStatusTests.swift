import Foundation
import KaitenConfig
import KaitenTestSupport
import Testing

@testable import KaitenService

/// `state/service.json` (what `kaiten status` shows of a running service) says when a round has
/// been running for a while, and what it is doing: a service that seems stuck says where.
struct ServiceStatusTests {
    @Test func aLongRoundIsShownWithWhatItDoesAndGoneWhenItEnds() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-status")
        defer { dir.remove() }
        let world = try ApplyInteropTests.World(dir)
        let home = try KaitenHome.open(Home(path: world.home))
        let status = StatusKeeper(home: home, options: Service.Options(), folders: [], started: "then")
        status.busyAfter = 0.3
        func record() throws -> ServiceRecord {
            try JSONDecoder().decode(ServiceRecord.self, from: Data(contentsOf: URL(fileURLWithPath: ServiceRecord.path(home.home))))
        }

        // A short round: never shown.
        status.roundStarted(doing: "planning (after start)")
        status.roundEnded()
        await status.busyTimerDecided()
        #expect(try record().busy == nil)

        // A long one: shown once it has run for a while, with what it does now; gone at its end.
        status.roundStarted(doing: "planning (after start)")
        status.roundDoing("applying the plan of every path")
        // Written once the round has run busyAfter; a loaded machine may take longer to get
        // there, so the wait is for the record, not for a fixed time.
        let deadline = Date().addingTimeInterval(60)
        while try record().busy == nil && Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        #expect(try record().busy?.doing == "applying the plan of every path")
        status.roundDoing("announcing this device's index to the peers")
        #expect(try record().busy?.doing == "announcing this device's index to the peers")
        status.roundEnded()
        #expect(try record().busy == nil)
    }
}
