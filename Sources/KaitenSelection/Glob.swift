import KaitenErrors

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
        program = Program(tokens)
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
    ///
    /// Peers choose the names and users the patterns, so the match runs as an automaton over
    /// the sets of pattern positions reachable after each character (as gobwas/glob compiles
    /// syncthing's patterns): time linear in name x pattern, whatever the stars and names.
    /// Backtracking was exponential in the number of stars (one 224-character name against
    /// eight stars took over a minute).
    public func matches(_ path: String) -> Bool {
        run(path).matched
    }

    /// The match and the states it visited (tests bound the latter by name x pattern).
    func run(_ path: String) -> (matched: Bool, visits: Int) {
        var matcher = Matcher(program)
        for ch in path {
            if !matcher.step(ch) { return (false, matcher.visits) }
        }
        return (matcher.accepts, matcher.visits)
    }

    /// The pattern as states of a nondeterministic automaton, built once per pattern.
    let program: Program

    struct Program: Sendable, Equatable {
        enum Node: Sendable, Equatable {
            /// Consumes one character equal to this one.
            case literal(Character, next: Int)
            /// Consumes one character other than `/`.
            case any(next: Int)
            case characterClass(ranges: [ClosedRange<Character>], negated: Bool, next: Int)
            /// Consumes any run (without `/` unless `crossesSlash`): stays, or moves on unconsumed.
            case star(crossesSlash: Bool, next: Int)
            /// Moves on to any of these, unconsumed (`{a,b}`).
            case split([Int])
            case accept
        }

        var nodes: [Node] = [.accept]
        var start = 0

        init(_ tokens: [Token]) {
            start = emit(tokens[...], next: 0)
        }

        /// Emits `tokens` followed by the state `next`; returns the first state.
        private mutating func emit(_ tokens: ArraySlice<Token>, next: Int) -> Int {
            var entry = next
            for token in tokens.reversed() {
                switch token {
                case .literal(let ch): nodes.append(.literal(ch, next: entry))
                case .any: nodes.append(.any(next: entry))
                case .characterClass(let ranges, let negated):
                    nodes.append(.characterClass(ranges: ranges, negated: negated, next: entry))
                case .star: nodes.append(.star(crossesSlash: false, next: entry))
                case .doubleStar: nodes.append(.star(crossesSlash: true, next: entry))
                case .alternatives(let options):
                    let after = entry
                    let entries = options.map { emit($0[...], next: after) }
                    nodes.append(.split(entries))
                }
                entry = nodes.count - 1
            }
            return entry
        }
    }

    /// One run of the automaton: the set of states reached so far, each at most once.
    struct Matcher {
        let program: Program
        private var current: [Int] = []
        private var following: [Int] = []
        /// The step at which each state was last added (dedups a set without clearing it).
        private var addedAt: [Int]
        private var stepNumber = 0
        private(set) var visits = 0

        init(_ program: Program) {
            self.program = program
            addedAt = Array(repeating: -1, count: program.nodes.count)
            var start: [Int] = []
            add(program.start, to: &start)
            current = start
        }

        var accepts: Bool { current.contains(0) }

        /// Consumes one character; false when no state survives it.
        mutating func step(_ ch: Character) -> Bool {
            stepNumber += 1
            var next: [Int] = []
            swap(&next, &following)
            next.removeAll(keepingCapacity: true)
            for state in current {
                switch program.nodes[state] {
                case .literal(let expected, let target):
                    if ch == expected { add(target, to: &next) }
                case .any(let target):
                    if ch != "/" { add(target, to: &next) }
                case .characterClass(let ranges, let negated, let target):
                    if ch != "/" && ranges.contains(where: { $0.contains(ch) }) != negated { add(target, to: &next) }
                case .star(let crossesSlash, _):
                    if crossesSlash || ch != "/" { add(state, to: &next) }
                case .split, .accept:
                    break
                }
            }
            following = current
            current = next
            return !current.isEmpty
        }

        /// Adds a state and every state it moves on to without consuming.
        private mutating func add(_ state: Int, to set: inout [Int]) {
            visits += 1
            guard addedAt[state] != stepNumber else { return }
            addedAt[state] = stepNumber
            set.append(state)
            switch program.nodes[state] {
            case .star(_, let next): add(next, to: &set)
            case .split(let targets): for target in targets { add(target, to: &set) }
            default: break
            }
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
public struct GlobError: KaitenError, Equatable {
    public let pattern: String
    public let reason: String
    public var location: String? { "bad pattern \"\(pattern)\"" }
    public var message: String { reason }
}
