import ArgumentParser
import Foundation
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show each folder's global index: totals, what Kaiten holds from each peer, log size.",
            discussion: """
                Reads the index logs as they are; `kaiten index sync` refreshes them. An index an \
                interrupted sync left partial is said so.

                Examples:
                  kaiten status
                  kaiten status photos --json | jq '.[0].peers'
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "A folder ID. When omitted: every configured folder.")
        var folder: String?

        @Flag(help: "Print JSON.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let report = try global.app.status(folders: folder.map { [$0] } ?? [])
                if json {
                    try Terminal.json(report.folders)
                } else {
                    Terminal.print(StatusView.lines(report))
                }
            }
        }
    }
}
