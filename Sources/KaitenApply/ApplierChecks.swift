import Foundation
import KaitenTransfer
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSync
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What is checked before a plan runs: where a saved plan comes from, whether it is stale,
/// whether the folders can be written, and the --max-delete brake.
extension Applier {
    /// The plan IDs already applied in this home.
    static func appliedPath(_ home: Home) -> String { (home.stateDirectory as NSString).appendingPathComponent("applied-plans") }

    public static func markApplied(_ plan: Plan, home: Home) {
        let line = "\(plan.planID) \(ISO8601DateFormatter().string(from: Date()))\n"
        if let handle = FileHandle(forWritingAtPath: appliedPath(home)) {
            handle.seekToEndOfFile()
            handle.write(Data(line.utf8))
            try? handle.synchronize()
            try? handle.close()
        } else {
            _ = FileManager.default.createFile(atPath: appliedPath(home), contents: Data(line.utf8), attributes: [.posixPermissions: 0o600])
        }
    }

    /// Refuses at once a saved plan that this home did not make or has already applied: no
    /// peer is dialled and no folder looked at for it (the folders it names may not even exist here).
    public static func checkOrigin(_ saved: Plan, home: Home) throws(ApplyError) {
        let problems = originProblems(saved, home: home)
        guard problems.isEmpty else {
            throw ApplyError(.stale, path: "", "the saved plan is stale: " + problems.joined(separator: "; ") + ". Make a new plan.")
        }
    }

    private static func originProblems(_ saved: Plan, home: Home) -> [String] {
        var problems: [String] = []
        // A name no plan of Kaiten's holds (`../..`, absolute, reserved): the file was edited.
        for folder in saved.folders {
            for action in folder.actions where action.action != .writeStIgnore {
                do {
                    try SafePath.validate(action.path)
                } catch {
                    problems.append("\(folder.id): \(action.action.rawValue) \"\(action.path)\" is not a path inside the folder (\(error.hint)); the plan file was edited")
                }
            }
        }
        if let lineage = try? Planner.lineage(home), lineage != saved.lineage {
            problems.append("the plan was made by another Kaiten home (lineage \(saved.lineage), this home is \(lineage))")
        }
        if let applied = try? String(contentsOfFile: appliedPath(home), encoding: .utf8),
            let line = TextLines.nonEmpty(applied).first(where: { $0.hasPrefix(saved.planID + " ") })
        {
            problems.append("the plan was already applied (\(line.split(separator: " ").last ?? ""))")
        }
        return problems
    }

    /// Refuses a saved plan whose baseline moved: what it says is no longer what applying it would do.
    public static func checkStale(_ saved: Plan, against fresh: Prepared, home: Home) throws(ApplyError) {
        var moved = originProblems(saved, home: home)
        if saved.deviceID != fresh.plan.deviceID { moved.append("the plan was made for device \(saved.deviceID.prefix(7))") }
        if saved.baseline.configSHA256 != fresh.plan.baseline.configSHA256 { moved.append("config.xml changed") }
        for old in saved.baseline.folders {
            guard let new = fresh.plan.baseline.folders.first(where: { $0.id == old.id }),
                let state = fresh.states.first(where: { $0.input.id == old.id }),
                let folderPlan = saved.folders.first(where: { $0.id == old.id })
            else {
                moved.append("folder \(old.id) is no longer planned")
                continue
            }
            let newPeers = Dictionary(new.peers.map { ($0.device, $0) }, uniquingKeysWith: { a, _ in a })
            for peer in old.peers {
                guard let now = newPeers[peer.device] else {
                    moved.append("\(old.id): the index of peer \(peer.device.prefix(7)) is gone")
                    continue
                }
                if now.indexID != peer.indexID {
                    moved.append("\(old.id): peer \(peer.device.prefix(7)) reset its index")
                } else if now.sequence != peer.sequence {
                    moved.append("\(old.id): peer \(peer.device.prefix(7))'s index moved (sequence \(peer.sequence) → \(now.sequence))")
                }
            }
            for peer in new.peers where !old.peers.contains(where: { $0.device == peer.device }) {
                moved.append("\(old.id): peer \(peer.device.prefix(7))'s index is new")
            }
            if old.selectionSHA256 != new.selectionSHA256 { moved.append("\(old.id): the selection file changed") }
            if old.stignoreSHA256 != new.stignoreSHA256 { moved.append("\(old.id): .stignore changed") }
            if Reconciler.localDigest(folderPlan, state.input.local) != old.localDigest {
                moved.append("\(old.id): local files the plan touches changed")
            }
        }
        guard moved.isEmpty else {
            throw ApplyError(.stale, path: "", "the saved plan is stale: " + moved.joined(separator: "; ") + ". Make a new plan.")
        }
        if let difference = firstDifference(saved, from: fresh.plan) {
            throw ApplyError(
                .stale, path: "",
                "the saved plan is not what a fresh plan from its baseline says (\(difference)); it was edited or made by "
                    + "another version of Kaiten. Make a new plan.")
        }
    }

    /// Where a saved plan would do something a fresh plan from the same baseline would not: a
    /// plan file is a proposal to check, never an instruction to trust. Every saved action must
    /// be in the fresh plan as it is (path, kind, size, type, version, cause), and the `.stignore`
    /// it writes must be the fresh rendering of the selection. The one accepted difference: a
    /// deselect-deletion that the fresh plan holds back because its holders are offline (apply
    /// re-checks it live and keeps the file).
    static func firstDifference(_ saved: Plan, from fresh: Plan) -> String? {
        struct Key: Hashable {
            let action: Action.Kind, path: String, size: Int64, type: Action.EntryType, version: [String], cause: Action.Cause?, mode: UInt32?
            init(_ a: Action) {
                (action, path, size, type, version, cause, mode) = (a.action, a.path, a.size, a.type, a.version, a.cause, a.mode)
            }
        }
        for folder in saved.folders {
            guard let now = fresh.folders.first(where: { $0.id == folder.id }) else { return "folder \(folder.id) is not planned now" }
            if folder.path != now.path { return "\(folder.id): the folder path differs" }
            if folder.stignore.changed && (!now.stignore.managed || folder.stignore.content != now.stignore.content) {
                return "\(folder.id): the .stignore it writes differs from the rendering of the selection"
            }
            let allowed = Set(now.actions.map(Key.init))
            let heldBack = Set(now.conflicts.filter { $0.kind == .holdersOffline }.map(\.path))
            for action in folder.actions where !allowed.contains(Key(action)) {
                if action.action == .delete && action.cause == .deselected && heldBack.contains(action.path) { continue }
                return "\(folder.id): \(action.action.rawValue) \(action.path) is not in a fresh plan as it is in the file"
            }
        }
        return nil
    }

    /// A folder whose plan changes something must be writable by this user (a read-only mount,
    /// a directory owned by someone else): refused before anything changes, naming it.
    public static func checkWritable(_ plan: Plan) throws(ApplyError) {
        for folder in plan.folders where folder.stignore.changed || !folder.actions.isEmpty {
            if access(folder.path, W_OK) != 0 {
                let why = errno == EROFS ? "it is on a read-only file system" : String(cString: strerror(errno))
                throw ApplyError(
                    .io, path: "",
                    "\(folder.id): the folder \(folder.path) is not writable (\(why)); nothing was changed. "
                        + "Make it writable for this user, or run kaiten as its owner.")
            }
        }
    }

    /// `--max-delete`: the folders whose deletions (made here, or sent to the peers) go beyond
    /// the limit, in plan order; empty when the plan is within it.
    public static func brakes(_ plan: Plan, states: [Planner.FolderState], maxDelete: DeleteLimit) -> [DeleteBrake] {
        var brakes: [DeleteBrake] = []
        for folder in plan.folders {
            // A file moved on the peers is pulled under its new name in the same apply: its
            // content stays here, so it does not count as a deletion.
            let deletions = folder.actions.filter { $0.action == .delete && $0.cause != .movedOnPeers }.count
            // Deletions made here and sent delete the files on every peer: the same brake (a
            // folder emptied by accident, an unmounted disk, must not empty the cluster).
            let sentDeletions = folder.actions.filter { $0.action == .sendDelete && $0.type != .directory }.count
            // Nothing to weigh without deletions (the local files are not counted then: a
            // big folder's count is a walk).
            guard deletions > 0 || sentDeletions > 0 else { continue }
            let localFiles = states.first { $0.input.id == folder.id }?.input.local.files.count { $0.kind != .directory } ?? 0
            if sentDeletions > 0 && !maxDelete.allows(sentDeletions, of: localFiles + sentDeletions) {
                brakes.append(DeleteBrake(folder: folder.id, kind: .sent, deletions: sentDeletions, files: localFiles + sentDeletions, limit: maxDelete))
            } else if !maxDelete.allows(deletions, of: localFiles) {
                brakes.append(DeleteBrake(folder: folder.id, kind: .local, deletions: deletions, files: localFiles, limit: maxDelete))
            }
        }
        return brakes
    }
}
