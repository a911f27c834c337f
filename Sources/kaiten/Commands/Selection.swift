import ArgumentParser
import Foundation
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Select: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add paths to a folder's selection file.",
            discussion: """
                Edits <home>/selections/FOLDER.txt, keeping its comments and order. A directory \
                selects everything in it, now and in future. Nothing is fetched: run `kaiten plan` \
                to see what would change.

                A path absent from the global index is refused (it is most likely a typo) unless \
                --force, except, in a folder that sends, a file on disk: selecting it is how a new \
                file is shared (the plan then sends it). A path already covered by a selected \
                parent is reported and not added. \
                An argument with glob characters (`*`, `?`, `[...]`, `**`) that names no file \
                literally becomes a pattern line, expanded at every plan (against the files on \
                disk too, in a folder that sends); one that matches nothing is refused unless --force. `deselect` removes a pattern written the same way.

                Examples:
                  kaiten select photos 2025/summer
                  kaiten select docs 'reports/[draft] q3.pdf'
                  kaiten select photos 'photos/2024/*/IMG_000?.jpg'
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "Folder-relative paths (a leading / is optional).")
        var paths: [String]

        @Flag(help: "Add paths even when the global index does not have them.")
        var force = false

        func run() async throws {
            try await reportingErrors {
                for result in try global.app.select(folder, paths, force: force) { print(SelectionView.line(result)) }
            }
        }
    }

    struct Deselect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove paths from a folder's selection file.",
            discussion: """
                Removes the path's own line from <home>/selections/FOLDER.txt. Nothing is deleted \
                now: `kaiten plan` shows which local copies would be freed (only those at least \
                --require-peers peers hold in full).

                Example:
                  kaiten deselect photos 2019
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "Folder-relative paths, as they were selected.")
        var paths: [String]

        func run() async throws {
            try await reportingErrors { try Self.deselect(global.app, folder, paths) }
        }

        /// Deselects and says so, a line each; a path that could not be taken out ends with exit 1
        /// (`unpin` says the same).
        static func deselect(_ app: App, _ folder: String, _ paths: [String]) throws {
            let results = try app.deselect(folder, paths)
            for result in results {
                let (line, refused) = SelectionView.line(result)
                if refused { Terminal.error(line) } else { print(line) }
            }
            if results.contains(where: \.refused) { throw VerbEnded(.failure) }
        }
    }

    struct Adopt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Import a folder's existing .stignore into its selection file.",
            discussion: """
                For a folder whose .stignore was written by Sushitrain or by hand in the \
                selective grammar ((?d) lines, !/path lines, a final *), its lines become the \
                selection file, so Kaiten manages the folder from now on. A .stignore with lines \
                Kaiten cannot represent is refused, and those lines are quoted. The .stignore \
                itself is not changed.

                Example:
                  kaiten adopt photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        func run() async throws {
            try await reportingErrors {
                let adopted = try global.app.adopt(folder)
                print(
                    "adopted \(adopted.stignore): \(adopted.selected) selected path(s), \(adopted.ignores) (?d) line(s); \(adopted.added) added to \(adopted.selectionFile)"
                )
            }
        }
    }
}
