import KaitenApp

/// The human view of a plan: one line per path, then a summary.
public enum PlanView {
    public static func lines(_ plan: Plan) -> [String] {
        var out: [String] = []
        let many = plan.folders.count > 1
        for folder in plan.folders {
            let hasContent = !folder.actions.isEmpty || !folder.conflicts.isEmpty || !folder.warnings.isEmpty || folder.stignore.changed || !folder.junk.isEmpty
            if many || hasContent { out.append("\(folder.id) (\(folder.path)):") }
            for warning in folder.warnings { out.append("  warning: \(warning)") }
            if folder.stignore.changed {
                let count = TextLines.nonEmpty(folder.stignore.content).filter { $0.hasPrefix("!/") }.count
                out.append("  ~ write       .stignore (\(count) selected path\(count == 1 ? "" : "s"))")
            }
            for action in folder.actions {
                switch action.action {
                case .mkdir: out.append("  + mkdir       \(action.path)/")
                case .pull: out.append("  + pull        \(action.path)\(action.type == .symlink ? " (symlink)" : " (\(Terminal.human(action.size)))")")
                case .delete: out.append("  - delete      \(action.path) (\(Terminal.human(action.size))): \(action.reason)")
                case .rmdir: out.append("  - rmdir       \(action.path)/")
                case .chmod:
                    out.append("  ~ chmod       \(action.path)\(action.type == .directory ? "/" : "") (\(action.reason))")
                case .writeStIgnore:
                    // Never in a plan's actions (the plan says it in `stignore`); shown as above.
                    out.append("  ~ write       .stignore")
                case .send:
                    let what = action.type == .directory ? "/" : action.type == .symlink ? " (symlink)" : " (\(Terminal.human(action.size)))"
                    out.append("  + send        \(action.path)\(what)\(action.cause == .conflictWon ? " (wins a conflict: \(action.reason))" : "")")
                case .sendDelete: out.append("  - send-delete \(action.path)\(action.type == .directory ? "/" : "")")
                }
                if action.action == .pull && action.cause == .conflictLost { out.append("                (\(action.reason))") }
            }
            for conflict in folder.conflicts {
                let kind = conflict.kind.rawValue.padding(toLength: max(11, conflict.kind.rawValue.count), withPad: " ", startingAt: 0)
                out.append("  ! \(kind) \(conflict.path): \(conflict.reason) [\(conflict.choices.map(\.rawValue).joined(separator: "|"))]")
            }
            if !folder.junk.isEmpty {
                out.append("  · junk        \(folder.junk.count) file\(folder.junk.count == 1 ? "" : "s") (\(folder.junk.prefix(3).joined(separator: ", "))\(folder.junk.count > 3 ? ", …" : "")), left alone")
            }
            if many || hasContent { out.append("") }
        }
        let s = plan.summary
        let unapplied = plan.folders.filter { $0.notApplied != nil }.map(\.id)
        if !s.hasChanges && s.conflicts == 0 && unapplied.isEmpty {
            out.append("No changes. Every folder matches its selection.")
            return out
        }
        if !unapplied.isEmpty {
            out.append("Not applied: \(unapplied.joined(separator: ", ")) (its .stignore is not Kaiten's to manage; see the warning above).")
            if !s.hasChanges && s.conflicts == 0 { return out }
        }
        var parts = ["\(s.pull) to pull (\(Terminal.human(s.pullBytes)))", "\(s.delete) to delete (\(Terminal.human(s.deleteBytes)) freed)"]
        if s.send + s.sendDelete > 0 {
            parts.append("\(s.send) to send (\(Terminal.human(s.sendBytes))), \(s.sendDelete) deletion\(s.sendDelete == 1 ? "" : "s") to send")
        }
        if s.chmod > 0 { parts.append("\(s.chmod) permission change\(s.chmod == 1 ? "" : "s")") }
        if s.mkdir + s.rmdir > 0 { parts.append("\(s.mkdir) director\(s.mkdir == 1 ? "y" : "ies") to create, \(s.rmdir) to remove") }
        parts.append("\(s.conflicts) conflict\(s.conflicts == 1 ? "" : "s")")
        out.append("Plan: " + parts.joined(separator: ", ") + ".")
        return out
    }
}
