/// A mistake in a selection file, located by file and line.
public struct SelectionError: Error, Equatable, Sendable, CustomStringConvertible {
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

    public var description: String { "\(file):\(line): \(hint)" }
}
