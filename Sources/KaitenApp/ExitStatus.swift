import KaitenErrors
import KaitenConfig
import KaitenProtocol
import KaitenService

/// How a verb ended, as the exit code the command line documents (`kaiten --help`). The one
/// place an outcome becomes a number.
public struct ExitStatus: Hashable, Sendable, CustomStringConvertible {
    public let code: Int32

    public init(code: Int32) { self.code = code }

    public static let success = ExitStatus(code: 0)
    /// An error before anything changed.
    public static let failure = ExitStatus(code: 1)
    /// Changes pending (`plan --detailed-exitcode`), or conflicts left open (`--fail-on-conflict`).
    public static let pending = ExitStatus(code: 2)
    /// A saved plan that no longer matches what it was made from.
    public static let stale = ExitStatus(code: 3)
    /// Refused by a safety brake, or something held back for safety.
    public static let brake = ExitStatus(code: 4)
    /// Partly done: some actions failed, or what was sent is not yet held.
    public static let partial = ExitStatus(code: 5)
    /// A malformed argument.
    public static let usage = ExitStatus(code: 64)

    /// Stopped by a signal: 128 + the signal, as a shell reports it.
    public static func interrupted(by signal: Int32) -> ExitStatus { ExitStatus(code: 128 + signal) }

    public var description: String { "exit \(code)" }

    /// The status an error thrown by a verb calls for: its own when it carries one, usage for a
    /// malformed device ID (they reach a verb only as arguments; config.xml is checked as it
    /// loads), else failure.
    public init(for error: any Error) {
        switch error {
        case let ended as VerbEnded: self = ended.status
        // The service ran the verb: its ending is the verb's.
        case let failure as ControlFailure: self = ExitStatus(code: failure.code)
        case is DeviceIDError, is ArgumentError: self = .usage
        default: self = .failure
        }
    }
}

/// A verb that ends with a status other than success, having said why already (or with a
/// message for the front-end to say).
public struct VerbEnded: Error, Sendable, CustomStringConvertible {
    public let status: ExitStatus
    /// Said by the front-end; nil when the verb has said it.
    public let message: String?

    public init(_ status: ExitStatus, _ message: String? = nil) {
        self.status = status
        self.message = message
    }

    public var description: String { message ?? "\(status)" }
}

/// A malformed argument found while a verb runs: one line naming it, exit 64.
public struct ArgumentError: KaitenError {
    public let message: String
    public var location: String? { nil }
    public init(_ message: String) { self.message = message }
}
