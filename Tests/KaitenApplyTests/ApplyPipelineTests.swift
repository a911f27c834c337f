import Foundation
import KaitenApply
import KaitenConfig
import KaitenReconcile
import KaitenSync
import KaitenTestSupport
import KaitenTransfer
import Testing

/// Each refusal of the one apply pipeline, on a home with no peers: nothing is changed, the
/// refusal is typed and carries the exit code every front-end gives it.
@Suite(.timeLimit(.minutes(1)))
struct ApplyPipelineTests {
    /// A home and a folder holding two files, and a plan that deletes both.
    struct World {
        let directory: TemporaryDirectory
        let home: KaitenHome
        let folder: String
        let plan: Plan

        init() throws {
            directory = try TemporaryDirectory()
            _ = try KaitenHome.initialize(Home(path: directory.file("home")), name: "t", listenAddress: "tcp://127.0.0.1:0")
            home = try KaitenHome.open(Home(path: directory.file("home")))
            folder = directory.file("f")
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            for name in ["a.txt", "b.txt"] { try Data("x".utf8).write(to: URL(fileURLWithPath: folder + "/" + name)) }
            let deletions = ["a.txt", "b.txt"].map { Action(action: .delete, path: $0, size: 1, reason: "deselected", cause: .deselected) }
            let folderPlan = FolderPlan(
                id: "f", path: folder, stignore: .init(changed: false, content: "", managed: true), actions: deletions, conflicts: [])
            plan = Plan(
                lineage: "l", planID: "p", createdAt: "now", deviceID: "D", baseline: .init(configSHA256: "", folders: []),
                folders: [folderPlan])
        }

        func prepared(_ plan: Plan? = nil) -> Applier.Prepared {
            Applier.Prepared(
                plan: plan ?? self.plan, states: [], session: PeerSession(connections: [:], refreshed: [:]), warnings: [], skipped: [])
        }

        func pipeline(_ brakes: ApplyPipeline.Brakes, maxDelete: String = "50%") -> ApplyPipeline {
            ApplyPipeline(home: home, maxDelete: DeleteLimit(maxDelete)!, brakes: brakes, requirePeers: 1, sendTimeout: 0)
        }

        var untouched: Bool { ["a.txt", "b.txt"].allSatisfy { FileManager.default.fileExists(atPath: folder + "/" + $0) } }
    }

    @Test func anotherApplyHoldingTheLockRefusesWithoutPlanning() async throws {
        let world = try World()
        defer { world.directory.remove() }
        let held = try Applier.lock(world.home.home)
        defer { withExtendedLifetime(held) {} }
        var planned = false
        let outcome = try await world.pipeline(.refuse).run(
            lock: .refuse, prepare: { planned = true; return world.prepared() }, choice: .fresh(decide: { $0.plan }), events: { _ in })
        guard case .refused(let refusal) = outcome.ending, case .locked = refusal else {
            Issue.record("not refused as locked: \(outcome.ending)")
            return
        }
        #expect(refusal.exitCode == 4)
        #expect(!planned)
        #expect(world.untouched)
    }

    @Test func waitingForTheLockEndsWhenStopped() async throws {
        let world = try World()
        defer { world.directory.remove() }
        let held = try Applier.lock(world.home.home)
        defer { withExtendedLifetime(held) {} }
        let stop = StopSignal()
        let noticed = Counter()
        let outcome = try await world.pipeline(.refuse).run(
            lock: .wait(notice: {
                noticed.add()
                stop.raise(SIGTERM)
            }), prepare: { world.prepared() }, choice: .fresh(decide: { $0.plan }), stop: stop, events: { _ in })
        guard case .refused(.stoppedWaiting) = outcome.ending else {
            Issue.record("not stopped while waiting: \(outcome.ending)")
            return
        }
        #expect(noticed.value == 1)
        #expect(world.untouched)
    }

    @Test func aPlanThatCannotBeMadeIsRefusedWithItsReason() async throws {
        let world = try World()
        defer { world.directory.remove() }
        struct Broken: Error, CustomStringConvertible { var description: String { "selection f.txt:3: a NUL byte" } }
        let outcome = try await world.pipeline(.refuse).run(
            lock: .refuse, prepare: { throw Broken() }, choice: .fresh(decide: { $0.plan }), events: { _ in })
        guard case .refused(let refusal) = outcome.ending, case .cannotPlan(let why) = refusal else {
            Issue.record("not refused as unplannable: \(outcome.ending)")
            return
        }
        #expect(why.contains("f.txt:3"))
        #expect(refusal.exitCode == 1)
        // The lock is free again.
        _ = try Applier.lock(world.home.home)
    }

    @Test func aGivenPlanThatNoLongerMatchesIsStale() async throws {
        let world = try World()
        defer { world.directory.remove() }
        var fresh = world.plan
        fresh.folders[0].actions.removeLast()
        let outcome = try await world.pipeline(.refuse, maxDelete: "100%").run(
            lock: .refuse, prepare: { world.prepared(fresh) }, choice: .given(world.plan, saved: false), events: { _ in })
        guard case .refused(let refusal) = outcome.ending, case .stale(let why) = refusal else {
            Issue.record("not refused as stale: \(outcome.ending)")
            return
        }
        #expect(refusal.exitCode == 3)
        #expect(!why.contains("saved plan"), "a plan confirmed a moment ago is not called saved: \(why)")
        #expect(world.untouched)
    }

    @Test func theBrakeRefusesTheWholeApplyForAPersonAndSaysHowToConfirm() async throws {
        let world = try World()
        defer { world.directory.remove() }
        let outcome = try await world.pipeline(.refuse).run(
            lock: .refuse, prepare: { world.prepared() }, choice: .fresh(decide: { $0.plan }), events: { _ in })
        guard case .refused(let refusal) = outcome.ending, case .brake(let brake) = refusal else {
            Issue.record("not refused by the brake: \(outcome.ending)")
            return
        }
        #expect(refusal.exitCode == 4)
        #expect(brake == DeleteBrake(folder: "f", kind: .local, deletions: 2, files: 0, limit: .percent(50)))
        #expect("\(refusal)".contains("nothing was changed"))
        #expect("\(refusal)".contains("--max-delete 2"))
        #expect(world.untouched)
    }

    @Test func aServiceRoundHoldsTheDeletionsBackAndRunsTheRest() async throws {
        let world = try World()
        defer { world.directory.remove() }
        var actions: [String] = []
        let outcome = try await world.pipeline(.holdDeletions).run(
            lock: .refuse, prepare: { world.prepared() }, choice: .fresh(decide: { $0.plan }),
            events: { event in if case .done(_, let action, _) = event { actions.append(action.path) } })
        guard case .applied(let plan, _, let held) = outcome.ending else {
            Issue.record("not applied: \(outcome.ending)")
            return
        }
        #expect(held.map(\.folder) == ["f"])
        #expect(plan.folders[0].actions.isEmpty)
        #expect(actions.isEmpty)
        // One line, no contradiction: what was held, that the rest ran, and how to confirm.
        #expect(!held[0].heldBack.contains("nothing was changed"))
        #expect(held[0].heldBack.contains("kaiten apply --max-delete 2"))
        #expect(world.untouched)
    }

    @Test func withinTheLimitTheDeletionsRun() async throws {
        let world = try World()
        defer { world.directory.remove() }
        let outcome = try await world.pipeline(.refuse, maxDelete: "2").run(
            lock: .refuse, prepare: { world.prepared() }, choice: .fresh(decide: { $0.plan }), events: { _ in })
        guard case .applied(_, _, let held) = outcome.ending else {
            Issue.record("not applied: \(outcome.ending)")
            return
        }
        #expect(held.isEmpty)
    }

    @Test func nothingChosenIsNothingToApply() async throws {
        let world = try World()
        defer { world.directory.remove() }
        let outcome = try await world.pipeline(.refuse).run(
            lock: .refuse, prepare: { world.prepared() }, choice: .fresh(decide: { _ in nil }), events: { _ in })
        guard case .nothingToApply = outcome.ending else {
            Issue.record("not nothing to apply: \(outcome.ending)")
            return
        }
        #expect(world.untouched)
    }
}

/// Counts calls from a @Sendable closure.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
