import KaitenApply
import KaitenConfig
import KaitenProtocol
import KaitenReconcile
import KaitenSelection
import KaitenService
import KaitenSync
import KaitenTransfer

/// One open conflict, as `conflicts --json` prints it.
public struct ConflictEntry: Encodable, Sendable {
    public let folder: String
    public let kind: String
    public let path: String
    public let reason: String
    public let choices: [Conflict.Choice]
}

/// What settling a conflict did.
public enum Settled: Sendable {
    case selectedAndKept
    case keptAsItIs
    case deletedLocally
    /// The local content now under `copy`; the path selected, for the next apply to fetch.
    case localKeptAs(copy: String)
}

extension App {
    /// The open conflicts of the named folders (all when none): beside a running service, the
    /// ones it sees on its live connections, with its --require-peers.
    public func conflicts(folders: [String], requirePeers: Int?) async throws -> [ConflictEntry] {
        let opened = try openForReading()
        let plan: Plan
        switch try route("conflicts", .readsFromService, in: opened) {
        case .service(let service):
            let record = ServiceRecord.running(opened.home)
            let requirePeers = max(1, requirePeers ?? record?.requirePeers ?? 1)
            plan = try await ControlClient.offThePool { try service.plan(folders: folders, requirePeers: requirePeers).plan }
        case .here:
            (plan, _) = try Planner.plan(home: opened, folders: folders, requirePeers: max(1, requirePeers ?? 1), warn: diagnostics.error)
        }
        return plan.folders.flatMap { folder in
            folder.conflicts.map {
                ConflictEntry(folder: folder.id, kind: $0.kind.rawValue, path: $0.path, reason: $0.reason, choices: $0.choices)
            }
        }
    }

    /// Settles the open conflict at `path` of `folder` with `choice`, which must be one it offers.
    public func resolve(_ folder: String, path: String, choice: Conflict.Choice) throws -> (path: String, settled: Settled) {
        let opened = try openForReading()
        let (plan, states) = try Planner.plan(home: opened, folders: [folder], warn: diagnostics.error)
        let clean = try SelectionFile.normalizeArgument(path)
        guard let conflict = plan.folders.first?.conflicts.first(where: { $0.path == clean }), let state = states.first else {
            throw ApplyError(.changedLocally, path: clean, "no open conflict in \(folder) (see `kaiten conflicts \(folder)`)")
        }
        guard conflict.choices.contains(choice) else {
            throw ApplyError(
                .changedLocally, path: clean,
                "--\(choice) does not apply to a \(conflict.kind.rawValue) conflict; choose one of: "
                    + conflict.choices.map { "--\($0)" }.joined(separator: ", "))
        }
        try SafePath.validate(clean)
        let root = state.input.path
        let local = state.input.local[clean]
        func select() throws {
            let file = opened.home.selectionPath(folderID: folder)
            var (selection, _) = try Planner.readSelection(file)
            if case .added = try selection.select(clean) { try Planner.writeSelection(selection, to: file) }
        }
        switch choice {
        case .select:
            try select()
            if let local, let hash = Reconciler.contentHash(of: local) {
                try KeptFiles.add(opened.home, folderID: folder, path: clean, hash: hash)
            }
            return (clean, .selectedAndKept)
        case .keep:
            guard let local, let hash = Reconciler.contentHash(of: local) else {
                throw ApplyError(.changedLocally, path: clean, "there is no local file to keep")
            }
            try KeptFiles.add(opened.home, folderID: folder, path: clean, hash: hash)
            return (clean, .keptAsItIs)
        case .deleteLocal:
            try LocalFileChoices.delete(clean, under: root)
            return (clean, .deletedLocally)
        case .useGlobal:
            guard let global = state.input.global.global(clean), !global.file.isDeleted else {
                throw ApplyError(.changedGlobally, path: clean, "the global index has no live version to use")
            }
            let copy = try LocalFileChoices.keepAsConflictCopy(
                clean, under: root, shortID: DeviceID.shortIDString(global.file.modifiedBy))
            try select()
            return (clean, .localKeptAs(copy: copy))
        }
    }
}
