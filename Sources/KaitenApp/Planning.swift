import KaitenApply
import KaitenConfig
import KaitenProtocol
import KaitenReconcile
import KaitenService
import KaitenSync

/// What `kaiten plan` asks for.
public struct PlanRequest: Sendable {
    public var folders: [String] = []
    /// Plan from the index logs as they are: no peer is asked.
    public var offline = false
    public var requirePeers = 1
    /// Seconds to wait for each peer's index when refreshing.
    public var timeout: Double = 120
    /// The limit apply and run weigh deletions against: the plan says which folders go beyond it.
    public var maxDelete = DeleteLimit.percent(50)
    /// Select renamed files' new names in the selection files first, then plan with them.
    public var followRenames = false
    /// Where to save the plan for `kaiten apply PLANFILE`, if anywhere.
    public var saveTo: String?

    public init() {}
}

extension App {
    /// A plan of the requested folders: beside a running service, the service's (on its live
    /// connections and current index); else made here, after refreshing the peers' indexes
    /// unless offline (or an apply or a service without a control socket holds them).
    public func plan(_ request: PlanRequest) async throws -> Plan {
        let opened = try open()
        let plan = try await makePlan(request, opened)
        if let path = request.saveTo { try PlanFile.write(plan, to: path) }
        return plan
    }

    private func makePlan(_ request: PlanRequest, _ opened: KaitenHome) async throws -> Plan {
        if !request.offline, case .service(let service) = try route("plan", .readsFromService, in: opened) {
            diagnostics.error(
                "note: kaiten \(service.role) (pid \(service.pid)) keeps the index current; this is its plan, on its live connections")
            let maxDelete = request.maxDelete.description
            var answer = try await ControlClient.offThePool { try service.plan(folders: request.folders, requirePeers: request.requirePeers, maxDelete: maxDelete) }
            if request.followRenames, try followRenames(answer.plan, opened) {
                answer = try await ControlClient.offThePool { try service.plan(folders: request.folders, requirePeers: request.requirePeers, maxDelete: maxDelete) }
            }
            for warning in answer.warnings { diagnostics.error(warning) }
            for (folder, reason) in answer.skipped { diagnostics.error("\(folder): skipped: \(reason)") }
            return answer.plan
        }
        // While an apply runs it holds the index: plan from the last complete index rather than
        // fail, and say so (deletions are re-checked live by apply anyway).
        let applying = request.offline ? nil : Applier.runningApply(opened.home)
        if let pid = applying {
            diagnostics.error(
                "note: an apply is running on this home (pid \(pid)); this plan uses the last complete index, as `plan --offline` would")
        }
        // A service without a control socket: its logs are the fresh index.
        let service = request.offline || applying != nil ? nil : ServiceRecord.running(opened.home)
        if let service {
            diagnostics.error(
                "note: kaiten run (pid \(service.pid)) keeps the index current; this plan reads it, as `plan --offline` would")
        }
        var refreshProblems: [String: [String]] = [:]
        var connected: [String: Set<DeviceID>]?
        if !request.offline && applying == nil && service == nil {
            let reports = try await IndexSync.run(
                home: opened, folders: request.folders, timeout: request.timeout, logger: logger, warn: diagnostics.error)
            for report in reports where !report.ok {
                refreshProblems[report.folder, default: []].append(
                    "could not refresh the index from \(report.peerLabel): \(report.problem ?? "unknown error"); its last known index is used, "
                        + "and it counts as no holder of a file to delete")
            }
            connected = IndexSync.refreshedPeers(reports)
        }
        func planHere(warn: (String) -> Void) throws -> (Plan, [Planner.FolderState]) {
            try Planner.plan(
                home: opened, folders: request.folders, requirePeers: request.requirePeers, connected: connected,
                pendingSends: connected != nil, refreshFailed: Set(refreshProblems.keys), warn: warn)
        }
        var (plan, states) = try planHere(warn: diagnostics.error)
        if request.followRenames, try followRenames(plan, opened) {
            (plan, states) = try planHere(warn: { _ in })
        }
        Applier.noteBrakes(&plan, states: states, maxDelete: request.maxDelete)
        for i in plan.folders.indices {
            plan.folders[i].warnings = (refreshProblems[plan.folders[i].id] ?? []) + plan.folders[i].warnings
        }
        return plan
    }

    /// `--follow-renames`: selects the new names in the selection files; true when any was.
    func followRenames(_ plan: Plan, _ opened: KaitenHome) throws -> Bool {
        let followed = try Planner.followRenames(plan, home: opened)
        for (folder, rename) in followed {
            diagnostics.note("\(folder): following \(rename.from) → \(rename.to) (selection file updated)")
        }
        return !followed.isEmpty
    }

    /// A plan saved by `kaiten plan --out`.
    public func savedPlan(_ path: String) throws -> Plan { try PlanFile.read(path) }
}
