import KaitenErrors

/// A mistake in a selection file, located by file and line.
public struct SelectionError: KaitenError, Equatable {
    public enum Code: Sendable, Equatable {
        case escapesFolder
        case emptyPath
        case badPattern
        case badGlobalIgnore
        /// A name `.stignore` cannot spell exactly (a line break, or whitespace at its end).
        case unrepresentable
    }

    public let code: Code
    public let file: String
    public let line: Int
    public let hint: String

    public init(_ code: Code, file: String, line: Int, _ hint: String) {
        self.code = code
        self.file = file
        self.line = line
        self.hint = hint
    }

    /// `FILE:LINE: why` for a line of a file; for a command-line argument (no line) the
    /// sentence alone, which names the argument itself.
    /// `file:line`; a pattern given as an argument has no place but itself.
    public var location: String? {
        if line > 0 { return "\(file):\(line)" }
        return file == "argument" ? nil : file
    }
    public var message: String { hint }
}
