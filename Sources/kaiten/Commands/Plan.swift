import ArgumentParser
import KaitenApp
import KaitenTerminal
import Foundation

extension Kaiten {
    struct PlanCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "plan",
            abstract: "Show what it takes to make folders match their selections. Changes nothing.",
            discussion: """
                Refreshes the index from peers (unless --offline), scans each folder (only new or \
                changed files are read), and compares selection x global index x local disk. \
                One line per path, then a summary:

                  + mkdir       2025/summer/
                  + pull        2025/summer/a.jpg (3.1 MiB)
                  - delete      2019/b.mkv (1.2 GiB): deleted on peers
                  ! extraneous  notes.txt: a local file not in the global index

                Nothing is ever deleted that fewer than --require-peers connected peers hold in full \
                (with --offline every peer's last known index counts; apply re-checks live), nor a \
                file edited locally since Kaiten synced it: those are conflicts, listed with the \
                choices that settle them. A folder without its .stfolder marker is refused.

                Exit codes: 0 success (with --detailed-exitcode: in sync, no conflicts), 1 error, \
                2 changes or conflicts pending, or a folder whose .stignore Kaiten cannot manage \
                (--detailed-exitcode only).

                Examples:
                  kaiten plan
                  kaiten plan photos --out photos.plan && kaiten show photos.plan
                  kaiten plan --offline --json | jq '.folders[].actions[] | select(.action == "delete")'
                  kaiten plan --detailed-exitcode; [ $? -eq 2 ] && echo pending
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Folder IDs. When omitted: every configured folder.")
        var folders: [String] = []

        @Flag(help: "Use the index log as it is; do not contact peers.")
        var offline = false

        @Flag(help: "Print the plan as JSON (the same document --out saves).")
        var json = false

        @Option(help: ArgumentHelp("Save the plan to this file, for `kaiten show` and `kaiten apply`.", valueName: "file"))
        var out: String?

        @Flag(help: "Exit 2 when changes or conflicts are pending, 0 when in sync.")
        var detailedExitcode = false

        @Option(help: "Delete a deselected file only when at least this many peers hold it in full.")
        var requirePeers: Int = 1

        @Option(help: "Seconds to wait for each peer's index when refreshing.")
        var timeout: Double = 120

        @Option(help: "The limit apply and run weigh deletions against (a count, or a share of a folder's local files): the plan says which folders go beyond it.")
        var maxDelete: String = "50%"

        @Flag(help: "When a selected file was renamed on the peers (same content, new unselected name), select the new name in the selection file and plan with it.")
        var followRenames = false

        func validate() throws {
            guard requirePeers >= 1 else { throw ValidationError("--require-peers must be at least 1") }
            guard DeleteLimit(maxDelete) != nil else { throw ValidationError("--max-delete takes a count (10) or a share (25%)") }
        }

        func run() async throws {
            try await reportingErrors {
                var request = PlanRequest()
                request.folders = folders
                request.offline = offline
                request.requirePeers = requirePeers
                request.timeout = timeout
                request.maxDelete = DeleteLimit(maxDelete)!
                request.followRenames = followRenames
                request.saveTo = out
                let plan = try await global.app.plan(request)
                if json {
                    try Terminal.json(plan)
                } else {
                    Terminal.print(PlanView.lines(plan))
                    if let out { print("\nSaved the plan to \(out). Apply exactly this plan with: kaiten apply \(out)") }
                }
                if detailedExitcode && plan.summary.isPending { throw VerbEnded(.pending) }
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a saved plan.",
            discussion: """
                Example:
                  kaiten plan --out tonight.plan && kaiten show tonight.plan
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "A plan file written by `kaiten plan --out`.")
        var file: String

        @Flag(help: "Print it as JSON.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let plan = try global.app.savedPlan(file)
                if json {
                    try Terminal.json(plan)
                } else {
                    print("Plan \(plan.planID), made \(plan.createdAt) by \(plan.deviceID.prefix(7))\n")
                    Terminal.print(PlanView.lines(plan))
                }
            }
        }
    }
}

