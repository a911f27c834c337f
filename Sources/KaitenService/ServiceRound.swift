import Foundation
import KaitenApply
import KaitenConfig
import KaitenReconcile
import KaitenSync
import KaitenTransfer
import Logging

/// A configuration's rounds: each plans what its triggers call for (the paths named when that
/// is enough, else every path), applies what the mode admits through the apply pipeline, says
/// it in the service's log and status, and brings this device's announcements in line. The
/// service wires one per configuration and only schedules it.
struct ServiceRound {
    let home: KaitenHome
    let options: Service.Options
    let folders: [String]
    let sessions: PeerSessions
    /// Each folder's state kept between rounds (the log read once, the last scan); a folder
    /// without one is planned whole every round.
    let live: [String: LiveFolder]
    let status: StatusKeeper
    /// What the last whole plan left pending, which a scoped round's status keeps showing.
    let standing: Standing
    let stop: StopSignal
    /// The last plan said, so that the same plan again is said once.
    let log: RoundLog
    let logger: Logger
    let emit: @Sendable (ServiceEvent) -> Void

    /// The most conflicts a round names one by one; `kaiten conflicts` lists every one.
    static let conflictsNamed = 20

    /// Sorts the paths the watcher reported: the echo of the service's own writes (the disk
    /// is what it last scanned or wrote there) is dropped; a real change makes the round whole
    /// (the scan finds what the watcher may not have named: a new directory's contents, an edit
    /// that is a conflict). Returns whether there is a change on disk worth waiting for quiet
    /// after (a burst of writes is one round).
    func settleDiskPaths(_ woken: inout Triggers.Woken) -> Bool {
        guard !woken.whole else { return woken.disk }
        let news = woken.diskPaths.contains { folder, paths in
            guard let view = live[folder] else { return true }
            return paths.contains { !view.unchanged(at: $0) }
        }
        if !news {
            // Said at debug level: what a test (or a person with --verbose) waits for to know the
            // echo was seen and set aside, before it asserts that no round followed.
            let echoes = woken.diskPaths.flatMap { folder, paths in paths.map { "\(folder)/\($0)" } }.sorted()
            logger.debug("the echo of this service's own writes, not news: \(echoes.prefix(5).joined(separator: ", "))\(echoes.count > 5 ? " and \(echoes.count - 5) more" : "")")
        }
        woken.diskPaths = [:]
        // The round runs for what else woke it, and says so.
        if !news { woken.reason = woken.reasonBesidesPaths }
        if news {
            woken.whole = true
            woken.peerPaths = [:]
        }
        return news
    }

    /// One round: plans what the triggers call for — the paths they named when that is enough
    /// (``scopes(of:)``), else every path of every folder — and applies what the mode
    /// admits; then brings this device's announcements in line with what changed. Returns
    /// whether the next round must look at every path (a scoped one left something failed:
    /// a whole round tries it again, as every round did before rounds were scoped).
    func run(woken: Triggers.Woken, reason: String) async -> Bool {
        let warn: (String) -> Void = { [emit] in emit(ServiceEvent("warning", $0)) }
        status.roundStarted(doing: "planning (after \(reason))")
        defer { status.roundEnded() }
        await waitForApplyInProgress(reason: reason)
        if let scopes = scopes(of: woken) {
            // Only the echo of the service's own writes: nothing to look at.
            if scopes.isEmpty { return false }
            // The plan goes out of scope before the folders' scans are brought up to date: it
            // shares their storage, and a scan held twice is copied whole at the first change.
            func applyScoped() async -> (acted: [String: Set<String>], failed: Int)? {
                guard let prepared = scopedPlan(scopes, warn: warn) else { return nil }
                status.roundDoing("applying the plan of the paths named")
                return await decideAndApply(prepared, standing: standing, reason: reason)
            }
            if let (acted, failed) = await applyScoped() {
                for (folder, paths) in scopes {
                    guard let view = live[folder] else { continue }
                    let touched = paths.union(acted[folder] ?? [])
                    do { try view.rescan(touched, warn: warn) } catch { warn("\(folder): \(error)") }
                    status.roundDoing("announcing this device's index of \(folder) to the peers")
                    await view.announce(touched, sessions: sessions, warn: { [emit] in emit(ServiceEvent("warning", $0)) })
                }
                return failed > 0
            }
        }
        let session = sessions.session(folders: folders)
        let prepared: Applier.Prepared
        do {
            for view in live.values { try view.refresh() }
            prepared = try Applier.prepare(
                on: session, home: home, folders: folders, requirePeers: options.requirePeers, logs: live.mapValues(\.log), warn: warn)
        } catch {
            emit(ServiceEvent("error", "cannot plan: \(error)"))
            status.round(planned: 0, applied: 0, failed: 0, pending: 0, conflicts: 0, error: "\(error)")
            return false
        }
        for skipped in prepared.skipped { emit(ServiceEvent("warning", folder: skipped.folder, "not planned: \(skipped.reason)")) }
        standing.set(prepared.plan, mode: options.mode)
        status.roundDoing("applying the plan of every path")
        let (acted, _) = await decideAndApply(prepared, standing: nil, reason: reason)
        for state in prepared.states {
            guard let view = live[state.input.id] else { continue }
            view.adopt(state)
            do { try view.rescan(acted[state.input.id] ?? [], warn: warn) } catch { warn("\(state.input.id): \(error)") }
        }
        // An apply announces what it did; a round that applied nothing may still have news for
        // the peers (a file they changed that is not selected here is announced at its new
        // version): an unchanged folder costs no walk (the recorded basis).
        if acted.isEmpty {
            status.roundDoing("announcing this device's index to the peers")
            await sessions.announce(folders: folders, warn: { [emit] in emit(ServiceEvent("warning", $0)) })
        }
        return false
    }

    /// An apply holding the home's lock (a client's, through the control socket) is changing
    /// the folders: a plan made now is of a moving target, its apply would be refused at the
    /// lock, and its scan of what the pulls are writing takes the cores from them (5,000 small
    /// files beside `kaiten run`: the round planned and announced in the middle of the pull).
    /// The round plans once that apply is over.
    func waitForApplyInProgress(reason: String) async {
        guard let pid = Applier.runningApply(home.home) else { return }
        status.roundDoing("waiting for the apply in progress (pid \(pid)) to end")
        while Applier.runningApply(home.home) != nil, !stop.isSet { try? await Task.sleep(for: .milliseconds(100)) }
        status.roundDoing("planning (after \(reason))")
    }

    /// The paths a round may limit itself to, per folder, or nil when it must look at every
    /// path (the watcher's paths are settled before: ``settleDiskPaths(_:)``).
    func scopes(of woken: Triggers.Woken) -> [String: Set<String>]? {
        guard !woken.whole else { return nil }
        var scopes: [String: Set<String>] = [:]
        for (folder, paths) in woken.peerPaths where folders.contains(folder) && !paths.isEmpty {
            guard live[folder] != nil else { return nil }
            scopes[folder] = paths
        }
        return scopes
    }

    /// The plan of the named paths only, from the folders' state kept in memory; nil when
    /// that is not enough (a deletion, a conflict, a new `.stignore`: things a whole plan
    /// decides across paths) or it cannot be made.
    func scopedPlan(_ scopes: [String: Set<String>], warn: (String) -> Void) -> Applier.Prepared? {
        // The round announces what it touched itself (the paths named, not the whole index).
        let session = sessions.session(folders: Array(scopes.keys), announcer: { _ in })
        do {
            var states: [Planner.FolderState] = []
            for (folder, paths) in scopes.sorted(by: { $0.key < $1.key }) {
                guard let view = live[folder] else { return nil }
                states.append(try view.scopedState(paths, requirePeers: options.requirePeers, connected: session.refreshed[folder], warn: warn))
            }
            let plan = try Planner.stamp(states, home: home, requirePeers: options.requirePeers)
            guard plan.folders.allSatisfy(\.isPathLocal) else { return nil }
            return Applier.Prepared(plan: plan, states: states, session: session, warnings: [], skipped: [])
        } catch {
            warn("planning only the changed paths failed (\(error)); planning every path")
            return nil
        }
    }

    /// Says the plan, applies what the mode admits (brakes holding deletions back), records
    /// the outcome. Returns the paths acted on, per folder (empty when nothing ran), and how
    /// many actions failed.
    /// - Parameter standing: for a scoped plan, what the last whole plan left pending (its
    ///   conflicts and what the mode did not admit), which the status keeps showing.
    func decideAndApply(_ prepared: Applier.Prepared, standing: Standing?, reason: String) async -> (acted: [String: Set<String>], failed: Int) {
        let paths = prepared.states.allSatisfy { $0.input.scope != nil } ? prepared.states.reduce(0) { $0 + ($1.input.scope?.count ?? 0) } : nil
        let reason = paths.map { "\(reason) (\($0) path\($0 == 1 ? "" : "s") looked at)" } ?? reason
        let plan = prepared.plan
        let planned = plan.folders.reduce(0) { $0 + $1.actions.count }
        let conflicts = plan.folders.reduce(0) { $0 + $1.conflicts.count }
        let (heldPending, heldConflicts) = standing?.get() ?? (0, 0)
        var admitted = options.mode.filter(plan)
        let count = admitted.folders.reduce(0) { $0 + $1.actions.count }
        guard planned > 0 || conflicts > 0 else {
            if standing == nil { _ = log.same("") }
            status.round(planned: 0, applied: 0, failed: 0, pending: heldPending, conflicts: heldConflicts, error: nil, paths: paths)
            return ([:], 0)
        }
        // The same plan again (held by a brake, left for review) is said once, not every round.
        let fingerprint = plan.folders.map { f in f.actions.map { "\($0.action.rawValue) \($0.path) \($0.version)" }.joined(separator: "\n") + "\(f.conflicts.count)" }
            .joined(separator: "\n")
        let repeated = standing == nil && log.same(fingerprint)
        if !repeated {
            emit(ServiceEvent(
                "plan", "after \(reason): \(planned) action\(planned == 1 ? "" : "s") planned, \(count) admitted by --apply \(options.mode.rawValue), \(conflicts) conflict\(conflicts == 1 ? "" : "s") (left for `kaiten apply` / `kaiten conflicts`)"))
            sayConflicts(plan)
        }
        guard count > 0 else {
            status.round(planned: planned, applied: 0, failed: 0, pending: heldPending + planned, conflicts: heldConflicts + conflicts, error: nil, paths: paths)
            return ([:], 0)
        }
        let emit = self.emit
        let pipeline = ApplyPipeline(
            home: home, maxDelete: options.maxDelete, brakes: .holdDeletions, requirePeers: options.requirePeers, sendTimeout: 0)
        let outcome = try? await pipeline.run(lock: .refuse, prepare: { prepared }, choice: .fresh(decide: { _ in admitted }), stop: stop) { event in
            switch event {
            case .done(let folder, let action, let note):
                emit(ServiceEvent("done", folder: folder, path: action.path, action: action.action.rawValue, note ?? action.reason))
            case .failed(let folder, let action, let reason):
                emit(ServiceEvent("failed", folder: folder, path: action.path, action: action.action.rawValue, reason))
            case .kept(let folder, let action, let reason):
                emit(ServiceEvent("kept", folder: folder, path: action.path, action: action.action.rawValue, reason))
            case .conflictCopy(let folder, let path, let copy):
                emit(ServiceEvent("conflict-copy", folder: folder, path: path, "moved aside as \(copy)"))
            case .removedTemporary, .start, .progress, .sendHeld, .sendNotHeld, .awaitingPeers:
                break
            }
        }
        let report: ApplyReport
        switch outcome?.ending {
        case .applied(let applied, let done, let held):
            for brake in held where !repeated { emit(ServiceEvent("kept", folder: brake.folder, brake.heldBack)) }
            admitted = applied
            report = done
        case .refused(let refusal):
            // Another apply (a person's, through the socket or not) holds the lock, or a folder
            // cannot be written: the next round tries again.
            if !repeated { emit(ServiceEvent("plan", "\(refusal); the next round tries again")) }
            status.round(
                planned: planned, applied: 0, failed: 0, pending: heldPending + planned, conflicts: heldConflicts + conflicts,
                error: "\(refusal)", paths: paths)
            return ([:], 1)
        case .nothingToApply, nil:
            return ([:], 0)
        }
        let ran = admitted.folders.reduce(0) { $0 + $1.actions.count }
        if report.done > 0 || report.failed.count > 0 || !repeated { emit(ServiceEvent(
            "applied",
            "\(report.done) done, \(report.failed.count) failed, \(report.keptForSafety.count) kept for safety, \(planned - ran) left for review"
                + (report.notDone > 0 ? ", \(report.notDone) not done (stopping; resumed at the next start)" : "")
        )) }
        status.round(
            // done may count more than the plan's actions (a directory made on the way): never below 0.
            planned: planned, applied: report.done, failed: report.failed.count, pending: heldPending + max(0, planned - report.done),
            conflicts: heldConflicts + conflicts, error: nil, paths: paths)
        var acted: [String: Set<String>] = [:]
        for folder in admitted.folders {
            var paths = Set(folder.actions.map(\.path))
            for copy in report.conflictCopies where copy.folder == folder.id { paths.insert(copy.path) }
            paths.remove(".stignore")
            acted[folder.id] = paths
        }
        return (acted, report.failed.count)
    }
    /// Names each conflict a plan leaves (its path, why, and how to settle it), the first
    /// ``conflictsNamed`` of them.
    func sayConflicts(_ plan: Plan) {
        var named = 0
        var more = 0
        for folder in plan.folders {
            for conflict in folder.conflicts {
                guard named < Self.conflictsNamed else {
                    more += 1
                    continue
                }
                named += 1
                let choices = conflict.choices.isEmpty
                    ? "" : "; settle with: kaiten resolve \(folder.id) \(conflict.path) " + conflict.choices.map { "--\($0)" }.joined(separator: " | ")
                emit(ServiceEvent("conflict", folder: folder.id, path: conflict.path, "\(conflict.kind.rawValue): \(conflict.reason)\(choices)"))
            }
        }
        if more > 0 { emit(ServiceEvent("conflict", "and \(more) more: kaiten conflicts lists them all")) }
    }
}
