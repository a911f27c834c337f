/// A syncthing-style glob (lib/ignore, gobwas/glob with `/` as separator): `*` matches a run
/// without `/`, `**` any run, `?` one character other than `/`, `[abc]`, `[a-z]` and `[!abc]`
/// classes, `{a,b}` alternatives, and `\` escapes the next character.
public struct Glob: Sendable, Equatable, CustomStringConvertible {
    indirect enum Token: Sendable, Equatable {
        case literal(Character)
        case star
        case doubleStar
        case any
        case characterClass(ranges: [ClosedRange<Character>], negated: Bool)
        case alternatives([[Token]])
    }

    public let pattern: String
    let tokens: [Token]

    /// Parses a pattern.
    /// - Throws: ``GlobError`` for an unclosed `[` or `{`, or a trailing `\`.
    public init(_ pattern: String) throws(GlobError) {
        self.pattern = pattern
        var index = pattern.startIndex
        tokens = try Self.parse(pattern, &index, inAlternative: false)
        if index != pattern.endIndex { throw GlobError(pattern: pattern, reason: "unexpected '}'") }
    }

    public var description: String { pattern }

    /// Whether a text contains glob syntax (an unescaped `*`, `?`, `[` or `{`).
    public static func hasMetacharacters(_ text: String) -> Bool {
        var escaped = false
        for ch in text {
            if escaped {
                escaped = false
                continue
            }
            if ch == "\\" { escaped = true } else if "*?[{".contains(ch) { return true }
        }
        return false
    }

    /// Removes the escaping backslashes of a text without glob syntax.
    public static func unescape(_ text: String) -> String {
        var out = ""
        var escaped = false
        for ch in text {
            if !escaped && ch == "\\" {
                escaped = true
                continue
            }
            escaped = false
            out.append(ch)
        }
        return out
    }

    /// Whether the whole of `path` matches.
    public func matches(_ path: String) -> Bool {
        Self.match(tokens[...], Array(path)[...])
    }

    private static func match(_ tokens: ArraySlice<Token>, _ text: ArraySlice<Character>) -> Bool {
        guard let token = tokens.first else { return text.isEmpty }
        let rest = tokens.dropFirst()
        switch token {
        case .literal(let ch):
            return text.first == ch && match(rest, text.dropFirst())
        case .any:
            guard let ch = text.first, ch != "/" else { return false }
            return match(rest, text.dropFirst())
        case .characterClass(let ranges, let negated):
            guard let ch = text.first, ch != "/" else { return false }
            let inClass = ranges.contains { $0.contains(ch) }
            return inClass != negated && match(rest, text.dropFirst())
        case .star, .doubleStar:
            var i = text.startIndex
            while true {
                if match(rest, text[i...]) { return true }
                guard i < text.endIndex, token == .doubleStar || text[i] != "/" else { return false }
                i += 1
            }
        case .alternatives(let options):
            return options.contains { option in match(ArraySlice(option + Array(rest)), text) }
        }
    }

    private static func parse(_ pattern: String, _ index: inout String.Index, inAlternative: Bool) throws(GlobError)
        -> [Token]
    {
        var tokens: [Token] = []
        while index < pattern.endIndex {
            let ch = pattern[index]
            if inAlternative && (ch == "," || ch == "}") { return tokens }
            index = pattern.index(after: index)
            switch ch {
            case "\\":
                guard index < pattern.endIndex else { throw GlobError(pattern: pattern, reason: "ends with a lone '\\'") }
                tokens.append(.literal(pattern[index]))
                index = pattern.index(after: index)
            case "*":
                if index < pattern.endIndex && pattern[index] == "*" {
                    index = pattern.index(after: index)
                    tokens.append(.doubleStar)
                } else {
                    tokens.append(.star)
                }
            case "?":
                tokens.append(.any)
            case "[":
                var negated = false
                if index < pattern.endIndex && pattern[index] == "!" {
                    negated = true
                    index = pattern.index(after: index)
                }
                var ranges: [ClosedRange<Character>] = []
                var closed = false
                while index < pattern.endIndex {
                    var c = pattern[index]
                    index = pattern.index(after: index)
                    if c == "]" && !ranges.isEmpty {
                        closed = true
                        break
                    }
                    if c == "\\" && index < pattern.endIndex {
                        c = pattern[index]
                        index = pattern.index(after: index)
                    }
                    if index < pattern.endIndex && pattern[index] == "-",
                        pattern.index(after: index) < pattern.endIndex, pattern[pattern.index(after: index)] != "]"
                    {
                        let upper = pattern[pattern.index(after: index)]
                        index = pattern.index(index, offsetBy: 2)
                        guard c <= upper else { throw GlobError(pattern: pattern, reason: "bad range \(c)-\(upper)") }
                        ranges.append(c...upper)
                    } else {
                        ranges.append(c...c)
                    }
                }
                guard closed else { throw GlobError(pattern: pattern, reason: "unclosed '['") }
                tokens.append(.characterClass(ranges: ranges, negated: negated))
            case "{":
                var options: [[Token]] = []
                while true {
                    options.append(try parse(pattern, &index, inAlternative: true))
                    guard index < pattern.endIndex else { throw GlobError(pattern: pattern, reason: "unclosed '{'") }
                    let separator = pattern[index]
                    index = pattern.index(after: index)
                    if separator == "}" { break }
                }
                tokens.append(.alternatives(options))
            default:
                tokens.append(.literal(ch))
            }
        }
        return tokens
    }
}

/// Why a glob pattern does not parse.
public struct GlobError: Error, Equatable, Sendable, CustomStringConvertible {
    public let pattern: String
    public let reason: String
    public var description: String { "bad pattern \"\(pattern)\": \(reason)" }
}
