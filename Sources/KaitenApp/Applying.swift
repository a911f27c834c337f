import KaitenApply
import KaitenConfig
import KaitenReconcile
import KaitenService
import KaitenSync
import KaitenTransfer

/// What `kaiten apply` asks for (and `import`, `offload` and `view sync`, which end with one).
public struct ApplyRequest: Sendable {
    /// A plan saved by `kaiten plan --out`; nil: plan afresh.
    public var planFile: String?
    /// A plan given as a value (the REST API's), applied as a saved one is.
    public var plan: Plan?
    public var folders: [String] = []
    public var maxDelete = DeleteLimit.percent(50)
    public var requirePeers = 1
    public var sendTimeout: Double = 300
    public var followRenames = false
    /// Seconds to wait for each peer's index.
    public var timeout: Double = 120

    public init() {}
}

/// What the front-end does while an apply runs: show a fresh plan and say whether to apply it,
/// and hear the events. The stop signal is raised (Ctrl-C) to stop between blocks.
public struct ApplyFrontEnd {
    /// Shows a fresh plan; true to apply it, false when there is nothing to apply. Throws to
    /// refuse it (the user said no).
    public var confirm: (Plan) throws -> Bool
    public var events: @Sendable (ApplyEvent) -> Void
    /// Raised from the first change on; installed by the front-end (signals) when it starts.
    public var stop: StopSignal
    /// Whether SIGINT and SIGTERM raise `stop` (a command line's apply; not one asked through
    /// the REST API inside the service, whose signals are its own).
    public var installsSignals: Bool
    /// Whether `confirm` may ask the user; when it does not (`--yes`), it only shows the plan
    /// and takes it when it has changes, and the plan may be applied as soon as it is made.
    public var asks: Bool

    public init(
        confirm: @escaping (Plan) throws -> Bool, events: @escaping @Sendable (ApplyEvent) -> Void, stop: StopSignal, installsSignals: Bool = true,
        asks: Bool = true
    ) {
        self.confirm = confirm
        self.events = events
        self.stop = stop
        self.installsSignals = installsSignals
        self.asks = asks
    }
}

/// How an apply that was not refused ended. Refusals (stale, brake, locked, not writable, a plan
/// that cannot be made) are thrown as `VerbEnded`, with their status and reason.
public struct ApplyOutcome: Sendable {
    public let plan: Plan
    /// nil: there was nothing to apply.
    public let report: ApplyReport?
    /// A folder was left out (it could not be scanned).
    public let skipped: Bool

    /// Deselected files the plan keeps because too few of the peers holding them are connected.
    public var keptForOfflineHolders: Int {
        plan.folders.reduce(0) { $0 + $1.conflicts.filter { $0.kind == .holdersOffline }.count }
    }

    /// The status this ending calls for.
    public func status(failOnConflict: Bool) -> ExitStatus {
        guard let report else {
            if skipped || keptForOfflineHolders > 0 || plan.summary.notApplied > 0 { return .brake }
            return failOnConflict && plan.summary.conflicts > 0 ? .pending : .success
        }
        if let signal = report.interruptedBy { return .interrupted(by: signal) }
        if !report.failed.isEmpty || !report.notHeld.isEmpty { return .partial }
        // A folder left alone for safety (no marker), or a deselected file kept because its
        // holders are offline, is a brake, even if everything else went through.
        if skipped || !report.keptForSafety.isEmpty || keptForOfflineHolders > 0 || plan.summary.notApplied > 0 { return .brake }
        return failOnConflict && report.conflicts > 0 ? .pending : .success
    }
}

extension App {
    /// Makes the folders match their selections: through the running service when one holds
    /// the peers' connections, else here, through the one apply pipeline.
    public func apply(_ request: ApplyRequest, _ frontEnd: ApplyFrontEnd) async throws -> ApplyOutcome {
        let opened = try open()
        let saved = try request.plan ?? request.planFile.map { try PlanFile.read($0) }
        if case .service(let service) = try route("apply", .dialsThroughService, in: opened) {
            return try await applyThroughService(service, request, saved: saved, opened: opened, frontEnd)
        }
        if let saved { try checkOrigin(saved, opened) }
        let folders = saved.map { $0.folders.map(\.id) } ?? request.folders
        let requirePeers = max(request.requirePeers, saved?.requirePeers ?? 1)
        let pipeline = ApplyPipeline(
            home: opened, maxDelete: request.maxDelete, brakes: .refuse, requirePeers: requirePeers, sendTimeout: request.sendTimeout)
        let outcome = try await pipeline.run(
            lock: .refuse,
            prepare: {
                var prepared = try await Applier.prepare(
                    home: opened, folders: folders, requirePeers: requirePeers, timeout: request.timeout, logger: logger,
                    warn: diagnostics.error)
                if request.followRenames && saved == nil, try followRenames(prepared.plan, opened) {
                    prepared = try Applier.replan(prepared, home: opened, folders: folders, requirePeers: requirePeers)
                }
                for warning in prepared.warnings { diagnostics.error(warning) }
                for (folder, reason) in prepared.skipped { diagnostics.error("\(folder): skipped: \(reason)") }
                return prepared
            },
            choice: saved.map { .given($0, saved: true) } ?? .fresh(decide: { prepared in
                try frontEnd.confirm(prepared.plan) ? prepared.plan : nil
            }),
            stop: frontEnd.stop,
            events: frontEnd.events)
        let skipped = !(outcome.prepared?.skipped.isEmpty ?? true)
        switch outcome.ending {
        case .refused(.cannotPlan(let why)):
            throw VerbEnded(.failure, why)
        case .refused(let refusal):
            throw VerbEnded(ExitStatus(code: refusal.exitCode), "\(refusal)")
        case .nothingToApply:
            return ApplyOutcome(plan: outcome.prepared!.plan, report: nil, skipped: skipped)
        case .applied(let plan, let report, _):
            return ApplyOutcome(plan: plan, report: report, skipped: skipped)
        }
    }

    /// Beside `kaiten run` (or `serve`): the service plans on its live connections, the front-end
    /// shows the plan and asks, and the service applies it after checking it again like a saved
    /// plan (stale if its own round or a peer moved things meanwhile).
    private func applyThroughService(
        _ service: ControlClient, _ request: ApplyRequest, saved: Plan?, opened: KaitenHome, _ frontEnd: ApplyFrontEnd
    ) async throws -> ApplyOutcome {
        diagnostics.note("kaiten \(service.role) (pid \(service.pid)) holds the peers' connections: it applies, this shows")
        if saved == nil, !frontEnd.asks, !request.followRenames, service.appliesFresh {
            return try await applyFreshThroughService(service, request, frontEnd)
        }
        var skipped = false
        let plan: Plan
        if let saved {
            try checkOrigin(saved, opened)
            plan = saved
        } else {
            var answer = try await ControlClient.offThePool { try service.plan(folders: request.folders, requirePeers: request.requirePeers) }
            if request.followRenames, try followRenames(answer.plan, opened) {
                answer = try await ControlClient.offThePool { try service.plan(folders: request.folders, requirePeers: request.requirePeers) }
            }
            for warning in answer.warnings { diagnostics.error(warning) }
            for (folder, reason) in answer.skipped { diagnostics.error("\(folder): skipped: \(reason)") }
            skipped = !answer.skipped.isEmpty
            guard try frontEnd.confirm(answer.plan) else { return ApplyOutcome(plan: answer.plan, report: nil, skipped: skipped) }
            plan = answer.plan
        }
        if frontEnd.installsSignals { frontEnd.stop.install() }
        let (stop, note, events, isSaved) = (frontEnd.stop, diagnostics.note, frontEnd.events, saved != nil)
        let report = try await ControlClient.offThePool {
            try service.apply(
                plan, saved: isSaved, maxDelete: request.maxDelete.description, requirePeers: request.requirePeers,
                sendTimeout: request.sendTimeout, stop: stop, note: note, events: events)
        }
        return ApplyOutcome(plan: plan, report: report, skipped: skipped)
    }

    /// With no question to ask, the service plans and applies at once: the plan is made once,
    /// not once to show and again to check, and the pulls start without a round trip.
    private func applyFreshThroughService(_ service: ControlClient, _ request: ApplyRequest, _ frontEnd: ApplyFrontEnd) async throws -> ApplyOutcome {
        if frontEnd.installsSignals { frontEnd.stop.install() }
        let (stop, note, events, diagnostics) = (frontEnd.stop, diagnostics.note, frontEnd.events, diagnostics)
        // Called on the exchange's one thread while this task waits for it.
        nonisolated(unsafe) let confirm = frontEnd.confirm
        let (answer, report) = try await ControlClient.offThePool {
            try service.applyFresh(
                folders: request.folders, maxDelete: request.maxDelete.description, requirePeers: request.requirePeers,
                sendTimeout: request.sendTimeout, stop: stop, note: note,
                planned: { answer in
                    for warning in answer.warnings { diagnostics.error(warning) }
                    for (folder, reason) in answer.skipped { diagnostics.error("\(folder): skipped: \(reason)") }
                    _ = try confirm(answer.plan)
                }, events: events)
        }
        return ApplyOutcome(plan: answer.plan, report: report, skipped: !answer.skipped.isEmpty)
    }

    /// A saved plan another home made, or one already applied: stale, before anything else.
    private func checkOrigin(_ saved: Plan, _ opened: KaitenHome) throws {
        do {
            try Applier.checkOrigin(saved, home: opened.home)
        } catch {
            throw VerbEnded(.stale, "\(error)")
        }
    }
}
