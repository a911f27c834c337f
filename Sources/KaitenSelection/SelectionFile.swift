import Foundation
import KaitenProtocol

/// A selection file, `selections/<folder>.txt`: what the user wants of a folder on this machine.
///
/// ```
/// # Comments start with '#'; blank lines are ignored.
/// photos/2025            a path (leading '/' optional); a directory selects all below it
/// docs/*.pdf             a glob, expanded against the global index when planning
/// notes/\[draft\].txt    '\' makes a glob character literal (also '\#' for a leading '#')
/// (?d).DS_Store          a global-ignore line, passed to .stignore as is (no '/', no '**')
/// ```
///
/// The file keeps every line as written, so `kaiten select` and `deselect` can edit it while
/// preserving comments and order.
public struct SelectionFile: Sendable, Equatable {
    /// One line, as parsed.
    public enum Line: Sendable, Equatable {
        /// A literal path, normalized (NFC, no leading or trailing '/').
        case path(String, text: String)
        /// A glob, matched against folder-relative paths.
        case pattern(Glob, text: String)
        /// `(?d)NAME`, kept verbatim.
        case globalIgnore(String)
        /// A comment or blank line, kept verbatim.
        case other(String)

        var text: String {
            switch self {
            case .path(_, let text), .pattern(_, let text): return text
            case .globalIgnore(let name): return "(?d)" + name
            case .other(let text): return text
            }
        }
    }

    public private(set) var lines: [Line]

    public init(lines: [Line] = []) {
        self.lines = lines
    }

    /// Parses a selection file's text; `file` is used in errors.
    public static func parse(_ text: String, file: String) throws(SelectionError) -> SelectionFile {
        var lines: [Line] = []
        for (index, line) in TextLines.split(text).enumerated() {
            let number = index + 1
            var row = String(line)
            // A line saved as CR CR LF: the split took one CR as half of its line end, and a CR
            // left at the end would be written back as CR LF and read as an empty line. No name
            // is taken to end with a CR (its directory can be selected).
            while row.last == "\r" { row.removeLast() }
            if row.unicodeScalars.contains("\0") {
                throw SelectionError(.badPattern, file: file, line: number, "the line holds a NUL byte, which no file name can contain")
            }
            let trimmed = row.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") {
                lines.append(.other(row))
                continue
            }
            if let first = row.unicodeScalars.first, first == " " || first == "\t" {
                // Syncthing names may begin with a space: indentation would silently select
                // another name, so it is refused, not trimmed.
                throw SelectionError(
                    .badPattern, file: file, line: number,
                    "the line begins with whitespace; remove it (a name that really begins with a space cannot be selected by name: select its directory)")
            }
            if trimmed.hasPrefix("(?d)") {
                let name = String(trimmed.dropFirst(4))
                guard !name.isEmpty, !name.contains("/"), !name.contains("**") else {
                    throw SelectionError(
                        .badGlobalIgnore, file: file, line: number,
                        "a (?d) line names a file anywhere in the folder: no '/' and no '**' (got \"\(trimmed)\")")
                }
                lines.append(.globalIgnore(name))
                continue
            }
            if Glob.hasMetacharacters(trimmed) {
                let body = try normalize(trimmed, file: file, line: number, keepEscapes: true)
                do {
                    lines.append(.pattern(try Glob(body), text: row))
                } catch {
                    throw SelectionError(.badPattern, file: file, line: number, "\(error)")
                }
                continue
            }
            let path = try normalize(Glob.unescape(trimmed), file: file, line: number, keepEscapes: false)
            lines.append(.path(path, text: row))
        }
        return SelectionFile(lines: lines)
    }

    /// The file's text.
    public func render() -> String {
        lines.map(\.text).joined(separator: "\n") + (lines.isEmpty ? "" : "\n")
    }

    /// The literal paths selected, in file order.
    public var paths: [String] {
        lines.compactMap { if case .path(let p, _) = $0 { p } else { nil } }
    }

    /// The glob lines, in file order.
    public var patterns: [Glob] {
        lines.compactMap { if case .pattern(let g, _) = $0 { g } else { nil } }
    }

    /// The `(?d)` names, in file order.
    public var globalIgnores: [String] {
        lines.compactMap { if case .globalIgnore(let n) = $0 { n } else { nil } }
    }

    /// What selecting a path did.
    public enum SelectOutcome: Sendable, Equatable {
        case added
        case alreadySelected
        /// A selected parent directory already covers it; nothing added.
        case coveredBy(String)
    }

    /// Adds a literal path (at the end), unless it is already selected or covered by a parent.
    public mutating func select(_ path: String) throws(SelectionError) -> SelectOutcome {
        let normalized = try Self.normalize(path, file: "argument", line: 0, keepEscapes: false)
        try Self.checkRepresentable(normalized, file: "argument", line: 0)
        if paths.contains(normalized) { return .alreadySelected }
        if let parent = paths.first(where: { PathRules.isAncestor($0, of: normalized) }) { return .coveredBy(parent) }
        let escaped = PathRules.escapeGlobCharacters(normalized)
        lines.append(.path(normalized, text: escaped.hasPrefix("#") ? "\\" + escaped : escaped))
        return .added
    }

    /// Adds a glob line (as `select` does for an argument with glob characters that names no
    /// file literally). Returns false when the same pattern is already there.
    public mutating func addPattern(_ text: String) throws(SelectionError) -> Bool {
        let body = try Self.normalize(text, file: "argument", line: 0, keepEscapes: true)
        if patterns.contains(where: { $0.pattern == body }) { return false }
        do {
            lines.append(.pattern(try Glob(body), text: body))
        } catch {
            throw SelectionError(.badPattern, file: "argument", line: 0, "\(error)")
        }
        return true
    }

    /// Removes a glob line written exactly so. Returns false when there is none.
    public mutating func removePattern(_ text: String) -> Bool {
        guard let body = try? Self.normalize(text, file: "argument", line: 0, keepEscapes: true) else { return false }
        let before = lines.count
        lines.removeAll { if case .pattern(let glob, _) = $0 { glob.pattern == body } else { false } }
        return lines.count != before
    }

    /// Removes a literal path's lines. Returns false when it was not selected explicitly.
    public mutating func deselect(_ path: String) throws(SelectionError) -> Bool {
        let normalized = try Self.normalize(path, file: "argument", line: 0, keepEscapes: false)
        let before = lines.count
        lines.removeAll { if case .path(let p, _) = $0 { p == normalized } else { false } }
        return lines.count != before
    }

    /// A glob given on the command line, cleaned as a pattern line would be.
    public static func normalizePattern(_ text: String) throws(SelectionError) -> String {
        try normalize(text, file: "argument", line: 0, keepEscapes: true)
    }

    /// A path given on the command line, cleaned as a selection line would be.
    public static func normalizeArgument(_ path: String) throws(SelectionError) -> String {
        try normalize(path, file: "argument", line: 0, keepEscapes: false)
    }

    /// Adds a `(?d)` line before the first path line.
    public mutating func addGlobalIgnore(_ name: String) {
        let at = lines.firstIndex { if case .path = $0 { true } else if case .pattern = $0 { true } else { false } } ?? lines.count
        lines.insert(.globalIgnore(name), at: at)
    }

    /// Refuses a name no `.stignore` line can select exactly (never select another file).
    static func checkRepresentable(_ path: String, file: String, line: Int) throws(SelectionError) {
        if let problem = PathRules.unrepresentableReason(path) {
            let parent = WireName.components(path).dropLast().joined(separator: "/")
            let instead = parent.isEmpty ? "rename it on a peer" : "select its directory (\"\(PathRules.quoted(parent))\") instead"
            throw SelectionError(
                .unrepresentable, file: file, line: line,
                "\(PathRules.quoted(path)) cannot be selected by name: \(problem), so no .stignore line can name exactly "
                    + "this file and no other; \(instead)")
        }
    }

    static func normalize(_ text: String, file: String, line: Int, keepEscapes: Bool) throws(SelectionError) -> String {
        var path = text.precomposedStringWithCanonicalMapping
        while path.hasPrefix("/") { path.removeFirst() }
        while path.hasSuffix("/") && !path.hasSuffix("\\/") { path.removeLast() }
        guard !path.isEmpty else {
            throw SelectionError(.emptyPath, file: file, line: line, "empty path (to select everything, don't use Kaiten's selection)")
        }
        for component in WireName.components(path, omittingEmpty: false) {
            if component == ".." || component == "." || component.isEmpty {
                throw SelectionError(
                    .escapesFolder, file: file, line: line,
                    "\"\(text)\" is not a clean folder-relative path (no '.', '..' or '//')")
            }
        }
        return path
    }
}

/// Path relations shared by selections and `.stignore`.
public enum PathRules {
    /// `a/b` is an ancestor of `a/b/c`, but not of `a/bc`.
    public static func isAncestor(_ ancestor: String, of path: String) -> Bool {
        path.count > ancestor.count && path.hasPrefix(ancestor) && path[path.index(path.startIndex, offsetBy: ancestor.count)] == "/"
    }

    /// Whether `path` is `selected` itself or inside it.
    public static func isCovered(_ path: String, by selected: String) -> Bool {
        path == selected || isAncestor(selected, of: path)
    }

    /// Why `.stignore` (and a selection file) cannot name `path` exactly, or nil when it can.
    /// Syncthing reads `.stignore` line by line and trims whitespace at both ends of each line
    /// (lib/ignore/ignore.go, parseIgnoreFile): a line break in a name splits it in two, and a
    /// name ending in whitespace would select the name without it.
    public static func unrepresentableReason(_ path: String) -> String? {
        if path.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            return "it contains a line break or another control character, which splits a .stignore line"
        }
        if let last = path.unicodeScalars.last, last.properties.isWhitespace {
            return "it ends in whitespace, which syncthing trims from every .stignore line"
        }
        if let first = path.unicodeScalars.first, first.properties.isWhitespace {
            return "it begins with whitespace, which is trimmed from every selection line"
        }
        return nil
    }

    /// A path as a shell would need it typed: as is when plain, else in single quotes, with
    /// control characters spelled `$'\n'` as GNU ls and bash do.
    public static func quoted(_ path: String) -> String {
        let plain = path.unicodeScalars.allSatisfy { scalar in
            scalar.value > 0x20 && scalar.value != 0x7F && !"'\"\\$`!*?[]{}()<>|&;#~ ".unicodeScalars.contains(scalar)
        }
        if plain && !path.isEmpty { return path }
        var out = ""
        var inQuote = false
        for scalar in path.unicodeScalars {
            if scalar.value < 0x20 || scalar.value == 0x7F {
                if inQuote { out += "'"; inQuote = false }
                switch scalar {
                case "\n": out += "$'\\n'"
                case "\t": out += "$'\\t'"
                case "\r": out += "$'\\r'"
                default: out += String(format: "$'\\%03o'", scalar.value)
                }
            } else if scalar == "'" {
                if inQuote { out += "'"; inQuote = false }
                out += "\\'"
            } else {
                if !inQuote { out += "'"; inQuote = true }
                out.unicodeScalars.append(scalar)
            }
        }
        if inQuote { out += "'" }
        return out
    }

    /// Backslash before each glob character of a literal path (selection-file spelling).
    public static func escapeGlobCharacters(_ path: String) -> String {
        var out = ""
        for ch in path {
            if "\\*?[]{}".contains(ch) { out.append("\\") }
            out.append(ch)
        }
        return out
    }
}
