import KaitenErrors

/// Why an action (or a whole apply) failed.
public struct ApplyError: KaitenError, Equatable {
    public enum Code: Sendable, Equatable {
        case unsafePath
        case io
        case noPeer
        case peerFailed
        case changedLocally
        case changedGlobally
        case stale
        case brake
        case locked
        /// SIGINT or SIGTERM: stopped between blocks; the temp file stays for the next apply.
        case interrupted
        /// The file would leave less free space than the folder's minDiskFree.
        case noSpace
    }

    public let code: Code
    public let path: String
    public let hint: String

    public init(_ code: Code, path: String, _ hint: String) {
        self.code = code
        self.path = path
        self.hint = hint
    }

    public var location: String? { path.isEmpty ? nil : path }
    public var message: String { hint }
}
