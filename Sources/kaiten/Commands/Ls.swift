import ArgumentParser
import Foundation
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Ls: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the global tree of a folder, as peers announced it.",
            discussion: """
                Reads the index log as it is (run `kaiten index sync` first to refresh it). For \
                each entry: name, type, size, modification time, and the peers that hold the \
                global version. Deleted entries are left out unless --deleted.

                Examples:
                  kaiten ls photos
                  kaiten ls photos 2025/summer -l
                  kaiten ls photos -R --json | jq '.[] | select(.size > 1e9) | .path'
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "A directory inside the folder (its entries are listed) or a file (its own entry). When omitted: the folder root.")
        var path: String = ""

        @Flag(name: .short, help: "Long format: type, size, modification time and peers.")
        var long = false

        @Flag(name: .customShort("R"), help: "Everything below PATH, not just its direct entries.")
        var recursive = false

        @Flag(help: "Include deleted entries.")
        var deleted = false

        @Flag(help: "Print a JSON array of entries.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let listing = try global.app.list(folder, under: path, recursive: recursive, deleted: deleted)
                if json {
                    try Terminal.json(listing.entries)
                } else {
                    Terminal.print(ListingView.lines(listing, long: long, recursive: recursive))
                }
            }
        }

    }
}
