import ArgumentParser
import KaitenApp
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
                    PlanRenderer.print(plan)
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
                    PlanRenderer.print(plan)
                }
            }
        }
    }
}


/// The human view of a plan: one line per path, then a summary.
enum PlanRenderer {
    static func print(_ plan: Plan) {
        let many = plan.folders.count > 1
        for folder in plan.folders {
            let hasContent = !folder.actions.isEmpty || !folder.conflicts.isEmpty || !folder.warnings.isEmpty || folder.stignore.changed || !folder.junk.isEmpty
            if many || hasContent { Swift.print("\(folder.id) (\(folder.path)):") }
            for warning in folder.warnings { Swift.print("  warning: \(warning)") }
            if folder.stignore.changed {
                let count = TextLines.nonEmpty(folder.stignore.content).filter { $0.hasPrefix("!/") }.count
                Swift.print("  ~ write       .stignore (\(count) selected path\(count == 1 ? "" : "s"))")
            }
            for action in folder.actions {
                switch action.action {
                case .mkdir: Swift.print("  + mkdir       \(action.path)/")
                case .pull: Swift.print("  + pull        \(action.path)\(action.type == .symlink ? " (symlink)" : " (\(Kaiten.Ls.human(action.size)))")")
                case .delete: Swift.print("  - delete      \(action.path) (\(Kaiten.Ls.human(action.size))): \(action.reason)")
                case .rmdir: Swift.print("  - rmdir       \(action.path)/")
                case .chmod:
                    Swift.print("  ~ chmod       \(action.path)\(action.type == .directory ? "/" : "") (\(action.reason))")
                case .writeStIgnore:
                    // Never in a plan's actions (the plan says it in `stignore`); shown as above.
                    Swift.print("  ~ write       .stignore")
                case .send:
                    let what = action.type == .directory ? "/" : action.type == .symlink ? " (symlink)" : " (\(Kaiten.Ls.human(action.size)))"
                    Swift.print("  + send        \(action.path)\(what)\(action.cause == .conflictWon ? " (wins a conflict: \(action.reason))" : "")")
                case .sendDelete: Swift.print("  - send-delete \(action.path)\(action.type == .directory ? "/" : "")")
                }
                if action.action == .pull && action.cause == .conflictLost { Swift.print("                (\(action.reason))") }
            }
            for conflict in folder.conflicts {
                let kind = conflict.kind.rawValue.padding(toLength: max(11, conflict.kind.rawValue.count), withPad: " ", startingAt: 0)
                Swift.print("  ! \(kind) \(conflict.path): \(conflict.reason) [\(conflict.choices.map(\.rawValue).joined(separator: "|"))]")
            }
            if !folder.junk.isEmpty {
                Swift.print("  · junk        \(folder.junk.count) file\(folder.junk.count == 1 ? "" : "s") (\(folder.junk.prefix(3).joined(separator: ", "))\(folder.junk.count > 3 ? ", …" : "")), left alone")
            }
            if many || hasContent { Swift.print("") }
        }
        let s = plan.summary
        let unapplied = plan.folders.filter { $0.notApplied != nil }.map(\.id)
        if !s.hasChanges && s.conflicts == 0 && unapplied.isEmpty {
            Swift.print("No changes. Every folder matches its selection.")
            return
        }
        if !unapplied.isEmpty {
            Swift.print("Not applied: \(unapplied.joined(separator: ", ")) (its .stignore is not Kaiten's to manage; see the warning above).")
            if !s.hasChanges && s.conflicts == 0 { return }
        }
        var parts = ["\(s.pull) to pull (\(Kaiten.Ls.human(s.pullBytes)))", "\(s.delete) to delete (\(Kaiten.Ls.human(s.deleteBytes)) freed)"]
        if s.send + s.sendDelete > 0 {
            parts.append("\(s.send) to send (\(Kaiten.Ls.human(s.sendBytes))), \(s.sendDelete) deletion\(s.sendDelete == 1 ? "" : "s") to send")
        }
        if s.chmod > 0 { parts.append("\(s.chmod) permission change\(s.chmod == 1 ? "" : "s")") }
        if s.mkdir + s.rmdir > 0 { parts.append("\(s.mkdir) director\(s.mkdir == 1 ? "y" : "ies") to create, \(s.rmdir) to remove") }
        parts.append("\(s.conflicts) conflict\(s.conflicts == 1 ? "" : "s")")
        Swift.print("Plan: " + parts.joined(separator: ", ") + ".")
    }
}
