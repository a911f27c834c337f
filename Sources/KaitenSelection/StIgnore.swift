import KaitenProtocol

/// The `.stignore` Kaiten writes: Sushitrain's selective grammar, so either tool can manage a
/// folder (anchors §1.2).
///
/// ```
/// (?d).DS_Store        global ignores first
/// !/photos/2025        then the selected paths, sorted, '\ ! * ? [ ] { }' escaped,
/// !/docs/\[draft\].txt      and none covered by another selected path
/// *                    finally: ignore everything else
/// ```
public enum StIgnore {
    /// The file for a selection: `(?d)` lines, then sorted `!/` lines, then `*`.
    public static func render(globalIgnores: [String], selected: [String]) -> String {
        var lines = globalIgnores.map { "(?d)" + $0 }
        let unique = Set(selected)
        // Leave out paths a selected ancestor covers: a walk up each path, not a search of all
        // pairs (a glob can expand to hundreds of thousands of paths).
        let kept = unique.filter { path in
            var end = path.utf8.endIndex
            while let slash = path.utf8[..<end].lastIndex(of: UInt8(ascii: "/")) {
                if unique.contains(String(path[..<slash])) { return false }
                end = slash
            }
            return true
        }
        lines += kept.map(line(forSelecting:)).sorted { $0.utf8Precedes($1) }
        lines.append("*")
        return lines.joined(separator: "\n") + "\n"
    }

    /// `!/` followed by the path with `\ ! * ? [ ] { }` escaped (Sushitrain's ignoreLineForSelectingPath).
    public static func line(forSelecting path: String) -> String {
        var out = "!/"
        for ch in path {
            if "\\!*?[]{}".contains(ch) { out.append("\\") }
            out.append(ch)
        }
        return out
    }

    /// What an existing `.stignore` holds.
    public enum Parsed: Sendable, Equatable {
        /// In the selective grammar: its global ignores and selected paths.
        case managed(globalIgnores: [String], selected: [String])
        /// Anything else; `unrepresentable` quotes the lines Kaiten cannot express.
        case unmanaged(unrepresentable: [String])
    }

    /// Reads a `.stignore` the way Sushitrain's `isSelectiveIgnore` does: not empty, last line
    /// exactly `*`; blank lines and `//` comments anywhere but last; `(?d)` lines (no '/', no
    /// '**') before any selection line; selection lines `!/path` with no unescaped glob.
    public static func parse(_ text: String) -> Parsed {
        var rows = TextLines.split(text).map { String($0).trimmingWhitespace() }
        while rows.last == "" { rows.removeLast() }
        // An empty .stignore ignores nothing; it holds no line Kaiten could not write itself.
        if rows.allSatisfy({ $0.isEmpty || $0.hasPrefix("//") }) { return .managed(globalIgnores: [], selected: []) }
        guard rows.last == "*" else {
            return .unmanaged(unrepresentable: ["(no final \"*\" line)"])
        }
        rows.removeLast()
        var ignores: [String] = []
        var selected: [String] = []
        var bad: [String] = []
        for row in rows {
            if row.isEmpty || row.hasPrefix("//") { continue }
            if row.hasPrefix("(?d)") {
                let name = String(row.dropFirst(4))
                if selected.isEmpty && !name.isEmpty && !name.contains("/") && !name.contains("**") {
                    ignores.append(name)
                } else {
                    bad.append(row)
                }
                continue
            }
            if row.hasPrefix("!/"), let path = unescapeSelection(String(row.dropFirst(2))), !path.isEmpty {
                selected.append(path)
                continue
            }
            bad.append(row)
        }
        return bad.isEmpty ? .managed(globalIgnores: ignores, selected: selected) : .unmanaged(unrepresentable: bad)
    }

    /// The path of a `!/` line, or nil if it holds an unescaped glob character.
    static func unescapeSelection(_ text: String) -> String? {
        var out = ""
        var escaped = false
        for ch in text {
            if escaped {
                out.append(ch)
                escaped = false
            } else if ch == "\\" {
                escaped = true
            } else if "*?[]{}".contains(ch) {
                return nil
            } else {
                out.append(ch)
            }
        }
        return escaped ? nil : out
    }
}

extension String {
    func trimmingWhitespace() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" || f == "\r" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" || l == "\r" { s.removeLast() }
        return String(s)
    }
}
