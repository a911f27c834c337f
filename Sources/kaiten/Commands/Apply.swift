import ArgumentParser
import KaitenApp
import KaitenTerminal
import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension Kaiten {
    struct ApplyCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "apply",
            abstract: "Make folders match their selections: pull, delete safely, report conflicts.",
            discussion: """
                Without PLANFILE: refreshes the index, plans, prints the plan and asks for \
                confirmation on a terminal (--yes skips the question; without a terminal --yes is \
                required). With PLANFILE (from `kaiten plan --out`): applies exactly that plan, \
                and refuses it with exit code 3 if anything it was based on moved — a peer's \
                index, the selection file, .stignore, or a local file it touches. A plan applied \
                once is stale afterwards.

                Order: .stignore first (atomically), then directories, then pulls (every block \
                SHA-256-verified, written to .syncthing.NAME.tmp, flushed to disk, renamed into place), \
                then deletions (each re-checked as it runs: still the content the plan saw, still \
                held by --require-peers peers connected right now: a peer that is offline holds nothing \
                as far as a deletion is concerned), then empty directories, then what changed here \
                (sendreceive and sendonly folders, inside selected paths): announced as new versions \
                by this device, and apply stays connected — serving the blocks — until \
                --require-peers peers hold each of them or --send-timeout passes. Conflicts are \
                reported, never resolved, except a change made here and on the peers at once: \
                syncthing's rule (the newer modification wins) decides, and the losing copy is kept \
                as NAME.sync-conflict-DATE-TIME-ID.EXT on the device that held it. See `kaiten \
                conflicts` and `kaiten resolve`.

                Beside `kaiten run` or `kaiten serve` (which hold the peers' connections), the \
                service plans and applies through its control socket; this shows the plan, asks, \
                and reports as usual.

                Exit codes: 0 everything applied; 1 error before anything changed; 2 conflicts \
                left open (with --fail-on-conflict); 3 stale plan; 4 refused by a safety brake \
                (--max-delete, another apply running, a deselected file kept because fewer than \
                --require-peers connected peers hold it, a folder whose .stignore Kaiten cannot \
                manage); 5 partial: some actions failed, the rest \
                are done, or something sent is not yet held by --require-peers peers.

                Examples:
                  kaiten apply
                  kaiten plan --out tonight.plan && kaiten apply tonight.plan
                  kaiten apply --yes --json | jq -c 'select(.type == "action_failed")'
                  kaiten apply --yes --max-delete 100%     # a deliberate mass deselection

                Ctrl-C (SIGINT) or SIGTERM stops it between blocks: what is done stays done, files \
                cut short keep their verified blocks in their temp files for the next apply, and \
                it exits 130 or 143.
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "A plan saved by `kaiten plan --out`. When omitted: plan afresh.")
        var planFile: String?

        @Option(name: .customLong("folder"), help: "Only these folders (repeatable; fresh plans only).")
        var folders: [String] = []

        @Flag(help: "Do not ask for confirmation (required without a terminal).")
        var yes = false

        @Flag(help: "One JSON event per line: apply_start, progress, action_done, action_failed, summary.")
        var json = false

        @Option(help: "Refuse the whole apply if a folder would lose more local files than N, or N% of them.")
        var maxDelete: String = "50%"

        @Option(help: "Delete a deselected file only while at least this many connected peers hold it in full; wait for this many peers to hold what is sent.")
        var requirePeers: Int = 1

        @Option(help: "Seconds to stay connected, after sending local changes, until --require-peers peers hold each of them (exit 5 if they do not).")
        var sendTimeout: Double = 300

        @Flag(help: "When a selected file was renamed on the peers (same content, new unselected name), select the new name in the selection file first. Not with a saved plan.")
        var followRenames = false

        @Flag(help: "Exit 2 when conflicts are left open.")
        var failOnConflict = false

        @Option(help: "Seconds to wait for each peer's index.")
        var timeout: Double = 120

        func validate() throws {
            guard DeleteLimit(maxDelete) != nil else { throw ValidationError("--max-delete takes a count (10) or a share (25%)") }
            guard requirePeers >= 1 else { throw ValidationError("--require-peers must be at least 1") }
            guard sendTimeout >= 0 else { throw ValidationError("--send-timeout takes seconds, 0 or more") }
        }

        func run() async throws {
            try await reportingErrors {
                var request = ApplyRequest()
                request.planFile = planFile
                request.folders = folders
                request.maxDelete = DeleteLimit(maxDelete)!
                request.requirePeers = requirePeers
                request.sendTimeout = sendTimeout
                request.followRenames = followRenames
                request.timeout = timeout
                try await ApplyVerb(request: request, yes: yes, json: json, failOnConflict: failOnConflict, app: global.app).run()
            }
        }
    }
}
