import ArgumentParser
import Foundation
import KaitenApply
import KaitenTransfer
import KaitenConfig
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSelection
import KaitenService
import KaitenSync

#if canImport(Glibc)
import Glibc
#endif

extension Kaiten {
    struct Conflicts: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List what only you can decide, with the choices that settle each.",
            discussion: """
                Uses the index log as it is (no peers are contacted) and scans the folders.

                  extraneous   a local file the global index does not have
                  shadowed     a local file Kaiten never synced, different from the global one
                  local-edit   a file Kaiten synced, edited here, while it changed or went away elsewhere
                  last-copy    deselected, but too few peers hold it to delete it safely

                Examples:
                  kaiten conflicts
                  kaiten conflicts photos --json | jq -r '.[].path'
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Folder IDs. When omitted: every configured folder.")
        var folders: [String] = []

        @Flag(help: "Print a JSON array of {folder, kind, path, reason, choices}.")
        var json = false

        @Option(help: "As for plan and apply: how many peers must hold a deselected file before it may go (default: the running service's, else 1).")
        var requirePeers: Int?

        struct Row: Encodable {
            let folder: String
            let kind: String
            let path: String
            let reason: String
            let choices: [Conflict.Choice]
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHomeForReading()
                let plan: Plan
                // Beside a running service, the conflicts it sees: on its live connections, with
                // its --require-peers (what `kaiten status` counts).
                if let service = ControlClient.running(opened.home) {
                    let record = ServiceRecord.running(opened.home)
                    do {
                        plan = try service.plan(folders: folders, requirePeers: max(1, requirePeers ?? record?.requirePeers ?? 1)).plan
                    } catch let failure as ControlFailure {
                        Terminal.error(failure.message)
                        throw ExitCode(failure.code)
                    }
                } else {
                    (plan, _) = try Planner.plan(home: opened, folders: folders, requirePeers: max(1, requirePeers ?? 1), warn: { Terminal.error($0) })
                }
                let rows = plan.folders.flatMap { folder in
                    folder.conflicts.map { Row(folder: folder.id, kind: $0.kind.rawValue, path: $0.path, reason: $0.reason, choices: $0.choices) }
                }
                if json {
                    try Terminal.json(rows)
                    return
                }
                if rows.isEmpty { print("No conflicts.") }
                for row in rows {
                    print("\(row.folder)  \(row.kind.padding(toLength: max(10, row.kind.count), withPad: " ", startingAt: 0))  \(row.path)")
                    print("    \(row.reason)")
                    print("    kaiten resolve \(row.folder) \(Self.quoted(row.path)) " + row.choices.map { "--\($0)" }.joined(separator: " | "))
                }
            }
        }

        static func quoted(_ path: String) -> String {
            path.allSatisfy { $0.isLetter || $0.isNumber || "/._-".contains($0) } ? path : "'" + path.replacingOccurrences(of: "'", with: "'\\''") + "'"
        }
    }

    struct Resolve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Settle one conflict.",
            discussion: """
                  --select        add the path to the selection file and keep the local file
                  --delete-local  delete the local file (it exists nowhere else in this form)
                  --use-global    keep the local content as NAME.sync-conflict-DATE-TIME-ID.EXT and
                                  select the path, so the next apply fetches the global version
                  --keep          leave the local file as it is and stop reporting it while it stays
                                  unchanged

                Example:
                  kaiten resolve photos notes.txt --keep
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "The conflicting path, as `kaiten conflicts` lists it.")
        var path: String

        @Flag(exclusivity: .exclusive, help: "How to settle it.")
        var choice: Choice

        enum Choice: String, EnumerableFlag {
            case select, deleteLocal, useGlobal, keep

            var settles: Conflict.Choice {
                switch self {
                case .select: return .select
                case .deleteLocal: return .deleteLocal
                case .useGlobal: return .useGlobal
                case .keep: return .keep
                }
            }
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHomeForReading()
                let (plan, states) = try Planner.plan(home: opened, folders: [folder], warn: { Terminal.error($0) })
                let clean = try SelectionFile.normalizeArgument(path)
                guard let conflict = plan.folders.first?.conflicts.first(where: { $0.path == clean }), let state = states.first else {
                    throw ApplyError(.changedLocally, path: clean, "no open conflict in \(folder) (see `kaiten conflicts \(folder)`)")
                }
                guard conflict.choices.contains(choice.settles) else {
                    throw ApplyError(.changedLocally, path: clean, "--\(choice.settles) does not apply to a \(conflict.kind.rawValue) conflict; choose one of: " + conflict.choices.map { "--\($0)" }.joined(separator: ", "))
                }
                let root = state.input.path
                let local = state.input.local[clean]
                try SafePath.validate(clean)
                switch choice {
                case .select:
                    try select(clean, opened)
                    if let local, let hash = Reconciler.contentHash(of: local) { try KeptFiles.add(opened.home, folderID: folder, path: clean, hash: hash) }
                    print("\(clean): selected and kept")
                case .keep:
                    guard let local, let hash = Reconciler.contentHash(of: local) else {
                        throw ApplyError(.changedLocally, path: clean, "there is no local file to keep")
                    }
                    try KeptFiles.add(opened.home, folderID: folder, path: clean, hash: hash)
                    print("\(clean): kept as it is (reported again if it changes)")
                case .deleteLocal:
                    var info = stat()
                    guard lstat(root + "/" + clean, &info) == 0, info.st_mode & S_IFMT != S_IFDIR else {
                        throw ApplyError(.changedLocally, path: clean, "not a local file")
                    }
                    guard unlink(root + "/" + clean) == 0 else {
                        throw ApplyError(.io, path: clean, "cannot delete: \(String(cString: strerror(errno)))")
                    }
                    print("\(clean): deleted locally")
                case .useGlobal:
                    guard let g = state.input.global.global(clean), !g.file.isDeleted else {
                        throw ApplyError(.changedGlobally, path: clean, "the global index has no live version to use")
                    }
                    let copy = SafePath.conflictName(for: clean, shortID: DeviceID.shortIDString(g.file.modifiedBy))
                    guard rename(root + "/" + clean, root + "/" + copy) == 0 else {
                        throw ApplyError(.io, path: clean, "cannot keep the local copy: \(String(cString: strerror(errno)))")
                    }
                    try select(clean, opened)
                    print("\(clean): local content kept as \(copy); selected — `kaiten apply` fetches the global version")
                }
            }
        }

        func select(_ clean: String, _ opened: KaitenHome) throws {
            let file = opened.home.selectionPath(folderID: folder)
            var (selection, _) = try Planner.readSelection(file)
            if case .added = try selection.select(clean) { try Planner.writeSelection(selection, to: file) }
        }
    }
}
