import ArgumentParser
import Foundation
import KaitenApp
import KaitenTerminal

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

        func run() async throws {
            try await reportingErrors {
                let rows = try await global.app.conflicts(folders: folders, requirePeers: requirePeers)
                if json {
                    try Terminal.json(rows)
                } else {
                    Terminal.print(ConflictsView.lines(rows))
                }
            }
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
                let (path, settled) = try global.app.resolve(folder, path: path, choice: choice.settles)
                print(ConflictsView.line(path, settled: settled))
            }
        }
    }
}
