import KaitenErrors

/// A problem with an index log. `description` names the file, the byte offset and the remedy.
public struct IndexLogError: KaitenError {
    public enum Code: Sendable, Equatable {
        case notAnIndexLog
        case unsupportedVersion
        case wrongFolder
        case corruptRecord
        case io
    }

    public let code: Code
    public let file: String
    public let offset: Int64?
    public let message: String

    public init(_ code: Code, file: String, offset: Int64? = nil, _ message: String) {
        self.code = code
        self.file = file
        self.offset = offset
        self.message = message
    }

    public var location: String? { file + (offset.map { " at byte \($0)" } ?? "") }
}
