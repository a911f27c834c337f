import ArgumentParser
import KaitenApp
import Foundation
import Logging

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

/// `kaiten apply` as the command line runs it: the request, the plan shown and the question
/// asked, the events rendered, the outcome's exit code. `import`, `offload` and `view sync` end
/// with one and call it as it is, not through argv.
struct ApplyVerb {
    var request: ApplyRequest
    var yes = false
    var json = false
    var failOnConflict = false
    var app: App

    func run() async throws {
        let output = ApplyOutput(json: json)
        let stop = StopSignal()
        let outcome = try await app.apply(
            request,
            ApplyFrontEnd(
                confirm: { try confirmed($0, output: output) },
                events: { event in
                    // From the first change on, SIGINT and SIGTERM stop the apply between
                    // blocks; until then they end the process at once.
                    if case .start = event { stop.install() }
                    output.handle(event)
                },
                stop: stop))
        if let report = outcome.report { output.summary(report, plan: outcome.plan) }
        let status = outcome.status(failOnConflict: failOnConflict)
        if status != .success { throw VerbEnded(status) }
    }

    /// Shows a fresh plan and asks for confirmation (on a terminal, unless --yes). False
    /// when there is nothing to apply (the summary is said).
    func confirmed(_ plan: Plan, output: ApplyOutput) throws -> Bool {
        // Under a timer (no terminal) the output is one line per action and a summary.
        if !json && (isatty(1) == 1 || !yes) { PlanRenderer.print(plan) }
        guard plan.summary.hasChanges else {
            output.summary(ApplyReport(conflicts: plan.summary.conflicts), plan: plan)
            return false
        }
        if !yes {
            guard isatty(0) == 1 else {
                throw VerbEnded(.failure, "not a terminal: pass --yes to apply without confirmation (a timer must say so)")
            }
            print("\nApply this plan? Only 'yes' is accepted: ", terminator: "")
            fflush(nil)
            guard readLine()?.trimmingCharacters(in: .whitespaces) == "yes" else {
                print("Apply cancelled; nothing was changed.")
                throw VerbEnded(.failure)
            }
        }
        return true
    }
}

/// How apply reports: a progress line on a terminal, one line per action otherwise, or JSON
/// events (`ApplyEventJSON`, the schema every front-end streams).
final class ApplyOutput: @unchecked Sendable {
    let json: Bool
    let progressOnTerminal: Bool
    let started = Date()
    /// When the transfers began (after the peers were dialled and the plan made): rate and
    /// ETA count from here, not from the index sync before.
    var transfersStarted: Date?
    var lastProgress = Date.distantPast
    private let lines = ApplyEventJSON.Lines()

    init(json: Bool) {
        self.json = json
        progressOnTerminal = !json && isatty(2) == 1
    }

    func emit(_ fields: [String: Any]) {
        FileHandle.standardOutput.write(Data(lines.line(fields).utf8))
    }

    func handle(_ event: ApplyEvent) {
        if case .start = event { transfersStarted = Date() }
        if json {
            // At most a few progress events a second; the last one always.
            if case .progress(let done, let total, _, _, _) = event {
                guard Date().timeIntervalSince(lastProgress) > 0.25 || done == total else { return }
                lastProgress = Date()
            }
            emit(ApplyEventJSON.fields(event))
            return
        }
        switch event {
        case .start, .removedTemporary:
            break
        case .progress(let done, let total, let bytesDone, let bytesTotal, let current):
            guard progressOnTerminal, Date().timeIntervalSince(lastProgress) > 0.2 || done == total else { return }
            lastProgress = Date()
            let elapsed = max(0.001, Date().timeIntervalSince(transfersStarted ?? started))
            let rate = Double(bytesDone) / elapsed
            // Under a second of data says little about the rate: no ETA until then.
            let eta = rate > 0 && elapsed >= 1 ? "ETA \(Int((Double(bytesTotal - bytesDone) / rate).rounded(.up)))s" : "ETA –"
            let percent = bytesTotal > 0 ? Int(Double(bytesDone) * 100 / Double(bytesTotal)) : 100
            let line = "\(done)/\(total) files, \(human(bytesDone)) of \(human(bytesTotal)) (\(percent) %), \(human(Int64(rate)))/s, \(eta)  \(current)"
            FileHandle.standardError.write(Data(("\r\u{1B}[K" + String(line.prefix(120))).utf8))
            if done == total { FileHandle.standardError.write(Data("\n".utf8)) }
        case .done(let folder, let action, let note):
            guard !progressOnTerminal || action.action != .pull || note != nil else { return }
            let verb: String
            switch action.action {
            case .writeStIgnore: verb = "wrote"
            case .pull: verb = "pulled"
            case .delete: verb = "deleted"
            case .mkdir: verb = "created"
            case .rmdir: verb = "removed"
            case .chmod: verb = "set permissions of"
            case .send: verb = "sent"
            case .sendDelete: verb = "sent the deletion of"
            }
            let sized = action.action == .pull || action.action == .delete || (action.action == .send && action.type == .file)
            clearProgress()
            print("\(folder): \(verb) \(action.path)\(sized ? " (\(human(action.size)))" : "")\(note.map { " — \($0)" } ?? "")")
        case .failed(let folder, let action, let reason):
            clearProgress()
            Terminal.error("\(folder): \(action.action.rawValue) \(action.path) FAILED: \(reason)")
        case .kept(let folder, let action, let reason):
            clearProgress()
            Terminal.error("\(folder): \(action.action.rawValue) \(action.path) NOT DONE: \(reason)")
        case .conflictCopy(let folder, let path, let copy):
            clearProgress()
            print("\(folder): \(path) changed here and on the peers; theirs is newer: the local copy is now \(copy)")
        case .sendHeld(let folder, let path, let peers):
            clearProgress()
            print("\(folder): \(path) is held by \(peers.map { String($0.prefix(7)) }.joined(separator: ", "))")
        case .sendNotHeld(let folder, let path, let reason):
            clearProgress()
            Terminal.error("\(folder): \(path) NOT YET HELD: \(reason)")
        case .awaitingPeers(let held, let total):
            if progressOnTerminal && held < total {
                FileHandle.standardError.write(Data("\r\u{1B}[Kwaiting for the peers to take what was sent: \(held)/\(total)".utf8))
            }
        }
    }

    private func human(_ bytes: Int64) -> String { TextFacts.human(bytes) }

    func clearProgress() {
        if progressOnTerminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }

    func summary(_ report: ApplyReport, plan: Plan) {
        if json {
            emit(ApplyEventJSON.summary(report, plan: plan, seconds: Date().timeIntervalSince(started)))
            return
        }
        if let signal = report.interruptedBy {
            print(
                "Interrupted by \(signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "signal \(signal)"): "
                    + "\(report.done) action\(report.done == 1 ? "" : "s") done, \(report.notDone) not done. Files cut short keep the "
                    + "blocks already fetched in their temp files; the next apply resumes them.")
        }
        var line = "Applied: \(report.done) action\(report.done == 1 ? "" : "s") (\(Kaiten.Ls.human(report.pulledBytes)) pulled, \(Kaiten.Ls.human(report.freedBytes)) freed)"
        if !report.sent.isEmpty {
            line += ", \(report.sent.count) change\(report.sent.count == 1 ? "" : "s") sent"
            if !report.notHeld.isEmpty { line += " (\(report.notHeld.count) not yet held by the peers)" }
        }
        if !report.failed.isEmpty { line += ", \(report.failed.count) failed" }
        if !report.keptForSafety.isEmpty { line += ", \(report.keptForSafety.count) deletion\(report.keptForSafety.count == 1 ? "" : "s") held back (too few connected peers hold the file)" }
        line += ", \(report.conflicts) conflict\(report.conflicts == 1 ? "" : "s") open."
        print(line)
        for failure in report.failed { print("  failed: \(failure.folder): \(failure.path): \(failure.reason)") }
        // Deletions held back for safety, and folders left alone, are said every time, on every
        // output: a timer's log must show why a folder does not match its selection.
        for folder in plan.folders {
            if let reason = folder.notApplied { print("  not applied: \(folder.id): \(reason)") }
            for conflict in folder.conflicts where conflict.kind == .holdersOffline {
                print("  kept: \(folder.id): \(conflict.path): \(conflict.reason)")
            }
        }
        if report.conflicts > 0 { print("  See them with: kaiten conflicts") }
    }
}
