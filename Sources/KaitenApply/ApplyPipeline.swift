import Foundation
import KaitenConfig
import KaitenReconcile
import KaitenSync
import KaitenTransfer

/// `--max-delete` stopping a folder's deletions: what it counted, said in the words of whoever
/// meets it (a refused apply, or a service round that holds the deletions back).
public struct DeleteBrake: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// Files deleted here (deselected, or deleted on the peers).
        case local
        /// Deletions made here, to be sent to the peers.
        case sent
    }
    public let folder: String
    public let kind: Kind
    public let deletions: Int
    /// The files the share is taken of.
    public let files: Int
    public let limit: DeleteLimit

    public init(folder: String, kind: Kind, deletions: Int, files: Int, limit: DeleteLimit) {
        self.folder = folder
        self.kind = kind
        self.deletions = deletions
        self.files = files
        self.limit = limit
    }

    private var what: String {
        switch kind {
        case .local: "delete \(deletions) of \(files) local files"
        case .sent: "send the deletion of \(deletions) of \(files) files to the peers"
        }
    }

    /// The whole apply refused before anything changed.
    public var refusal: String {
        let intent = kind == .sent ? "If they were deleted here on purpose" : "If that is intended"
        return "\(folder): refusing to \(what) (--max-delete \(limit)); nothing was changed. "
            + "\(intent), pass --max-delete \(deletions) or a higher share."
    }

    /// A plan shown before any apply: what apply and `kaiten run` will do with these deletions.
    public var foreseen: String {
        "\(deletions) deletion\(deletions == 1 ? "" : "s") of \(files) go beyond --max-delete \(limit): `kaiten apply` refuses the plan "
            + "and `kaiten run` holds them back, applying the rest; confirm them with `kaiten apply --max-delete \(deletions)`"
    }

    /// A service round that applied everything else.
    public var heldBack: String {
        "\(folder): deletions held back: the plan would \(what) (--max-delete \(limit)); every other action is applied. "
            + "To confirm them: kaiten apply --max-delete \(deletions)"
    }
}

extension Applier {
    /// Adds to each folder of `plan` that `--max-delete` would stop a warning saying so, for
    /// `kaiten plan` to show before anything runs.
    public static func noteBrakes(_ plan: inout Plan, states: [Planner.FolderState], maxDelete: DeleteLimit) {
        for brake in brakes(plan, states: states, maxDelete: maxDelete) {
            guard let i = plan.folders.firstIndex(where: { $0.id == brake.folder }) else { continue }
            plan.folders[i].warnings.append(brake.foreseen)
        }
    }
}

/// Why an apply did not run; nothing was changed. ``exitCode`` is what the CLI exits with and
/// the control socket answers, the same either way.
public enum ApplyRefusal: Error, Sendable, CustomStringConvertible {
    /// Another apply holds the home's lock.
    case locked(String)
    /// SIGINT or SIGTERM came while waiting for another apply to finish.
    case stoppedWaiting
    /// Planning failed (the index, a selection file, the scan).
    case cannotPlan(String)
    /// A confirmed or saved plan no longer says what a fresh plan would.
    case stale(String)
    /// `--max-delete`, with the apply refused as a whole.
    case brake(DeleteBrake)
    /// A folder the plan changes is not writable by this user.
    case notWritable(String)

    public var exitCode: Int32 {
        switch self {
        case .stale: 3
        case .brake, .locked: 4
        case .stoppedWaiting, .cannotPlan, .notWritable: 1
        }
    }

    public var description: String {
        switch self {
        case .locked(let why), .cannotPlan(let why), .stale(let why), .notWritable(let why): why
        case .stoppedWaiting: "stopped while waiting for another apply to finish; nothing was changed"
        case .brake(let brake): brake.refusal
        }
    }
}

/// The one way a plan is applied, whoever asks (the CLI, the control socket, the service's
/// rounds): the lock, planning, the choice of plan, the stale check, the brakes, the writable
/// check, the actions, the record of the plan applied, and the end of the session.
public struct ApplyPipeline {
    /// What `--max-delete` does when a folder goes beyond it.
    public enum Brakes: Sendable {
        /// Refuse the whole apply (a person or a timer asked for this plan).
        case refuse
        /// Apply the rest; the deletions of the folders beyond it wait for a confirmation.
        case holdDeletions
    }

    /// What to do when another apply holds the lock.
    public enum LockWait: Sendable {
        /// Refuse at once.
        case refuse
        /// Wait for it (until the stop signal), after saying so once.
        case wait(notice: @Sendable () async -> Void)
    }

    /// Which plan runs.
    public enum Choice {
        /// A plan made before (saved, or shown and confirmed elsewhere): applied only while a
        /// fresh plan still says the same.
        case given(Plan, saved: Bool)
        /// The fresh plan, as `decide` leaves it (shown and confirmed, filtered by a mode);
        /// nil: nothing to apply.
        case fresh(decide: (Applier.Prepared) async throws -> Plan?)
    }

    public enum Ending {
        case refused(ApplyRefusal)
        /// `decide` chose nothing.
        case nothingToApply
        /// The plan ran (`report` says how it went); `held` are the folders whose deletions
        /// were held back (``Brakes/holdDeletions``).
        case applied(Plan, ApplyReport, held: [DeleteBrake])
    }

    public struct Outcome {
        /// The plan made fresh on the way (nil when refused before planning).
        public var prepared: Applier.Prepared?
        public var ending: Ending
    }

    public var home: KaitenHome
    public var maxDelete: DeleteLimit
    public var brakes: Brakes
    /// Peers that must hold a file before its deletion, and hold what is sent.
    public var requirePeers: Int
    /// Seconds to wait for the peers to hold what is sent (0: do not wait).
    public var sendTimeout: Double

    public init(home: KaitenHome, maxDelete: DeleteLimit, brakes: Brakes, requirePeers: Int, sendTimeout: Double) {
        self.home = home
        self.maxDelete = maxDelete
        self.brakes = brakes
        self.requirePeers = requirePeers
        self.sendTimeout = sendTimeout
    }

    /// Applies a plan. Errors thrown are those of `decide` (the session is ended first);
    /// everything else is in the outcome.
    /// - Parameter prepare: plans afresh, on a session of its own or one lent by a service.
    public func run(
        lock lockWait: LockWait, prepare: () async throws -> Applier.Prepared, choice: Choice, stop: StopSignal? = nil,
        events: @escaping (ApplyEvent) -> Void
    ) async throws -> Outcome {
        let lock: Applier.Lock
        switch await acquireLock(lockWait, stop: stop) {
        case .success(let held): lock = held
        case .failure(let refusal): return Outcome(prepared: nil, ending: .refused(refusal))
        }
        defer { withExtendedLifetime(lock) {} }
        let prepared: Applier.Prepared
        do {
            prepared = try await prepare()
        } catch {
            return Outcome(prepared: nil, ending: .refused(.cannotPlan("\(error)")))
        }
        let ending: Ending
        do {
            ending = try await apply(prepared, choice: choice, stop: stop, events: events)
        } catch {
            await endWithoutApplying(prepared, reason: "apply stopped")
            throw error
        }
        switch ending {
        case .applied(_, let report, _): await prepared.session.end(reason: report.interruptedBy == nil ? "apply done" : "interrupted")
        case .nothingToApply: await endWithoutApplying(prepared, reason: "nothing to apply")
        case .refused: await endWithoutApplying(prepared, reason: "apply refused")
        }
        return Outcome(prepared: prepared, ending: ending)
    }

    /// Ends the session of an apply whose plan did not run. A session of its own put off
    /// announcing what this device needs until the pulls (``Announcement/DeferredNeeds``): the
    /// peers hear it now. A service's session announces in its rounds.
    private func endWithoutApplying(_ prepared: Applier.Prepared, reason: String) async {
        if !prepared.session.isLent { await prepared.session.announceChanges(home: home, folders: prepared.folders) }
        await prepared.session.end(reason: reason)
    }

    private func apply(_ prepared: Applier.Prepared, choice: Choice, stop: StopSignal?, events: @escaping (ApplyEvent) -> Void) async throws -> Ending {
        var plan: Plan
        var given = false
        switch choice {
        case .given(let chosen, let saved):
            do {
                try Applier.checkStale(chosen, against: prepared, home: home.home)
            } catch {
                // A plan confirmed a moment ago elsewhere is not "saved": say it as it is.
                return .refused(.stale(saved ? error.hint : error.hint.replacingOccurrences(of: "the saved plan", with: "the plan")))
            }
            plan = chosen
            given = true
        case .fresh(let decide):
            guard let chosen = try await decide(prepared) else { return .nothingToApply }
            plan = chosen
        }
        let held = Applier.brakes(plan, states: prepared.states, maxDelete: maxDelete)
        if let first = held.first {
            switch brakes {
            case .refuse:
                return .refused(.brake(first))
            case .holdDeletions:
                // The deletions wait, and the directories they would empty with them.
                let braked = Set(held.map(\.folder))
                for i in plan.folders.indices where braked.contains(plan.folders[i].id) {
                    plan.folders[i].actions.removeAll { $0.action == .delete || $0.action == .sendDelete || $0.action == .rmdir }
                }
            }
        }
        do {
            try Applier.checkWritable(plan)
        } catch {
            return .refused(.notWritable(error.hint))
        }
        let report = await Applier.execute(
            plan, prepared: prepared, home: home, requirePeers: max(requirePeers, plan.requirePeers ?? 1), sendTimeout: sendTimeout,
            stop: stop, events: events)
        // A given plan is applied once; a later apply of the same file is stale.
        if given && report.interruptedBy == nil { Applier.markApplied(plan, home: home.home) }
        return .applied(plan, report, held: held)
    }

    private func acquireLock(_ wait: LockWait, stop: StopSignal?) async -> Result<Applier.Lock, ApplyRefusal> {
        var said = false
        while true {
            do {
                return .success(try Applier.lock(home.home))
            } catch {
                guard case .wait(let notice) = wait else { return .failure(.locked(error.hint)) }
                if stop?.isSet == true { return .failure(.stoppedWaiting) }
                if !said {
                    await notice()
                    said = true
                }
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
    }
}
