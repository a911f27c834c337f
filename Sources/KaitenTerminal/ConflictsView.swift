import KaitenApp

/// `kaiten conflicts` and `kaiten resolve` as text: each conflict with the command that settles it.
public enum ConflictsView {
    public static func lines(_ rows: [ConflictEntry]) -> [String] {
        if rows.isEmpty { return ["No conflicts."] }
        return rows.flatMap { row in
            [
                "\(row.folder)  \(row.kind.padded(10))  \(row.path)",
                "    \(row.reason)",
                "    kaiten resolve \(row.folder) \(Terminal.shellQuoted(row.path)) " + row.choices.map { "--\($0)" }.joined(separator: " | "),
            ]
        }
    }

    public static func line(_ path: String, settled: Settled) -> String {
        switch settled {
        case .selectedAndKept: return "\(path): selected and kept"
        case .keptAsItIs: return "\(path): kept as it is (reported again if it changes)"
        case .deletedLocally: return "\(path): deleted locally"
        case .localKeptAs(let copy): return "\(path): local content kept as \(copy); selected — `kaiten apply` fetches the global version"
        }
    }
}
