/// The one shape of Kaiten's errors: where the problem is, and what is wrong.
///
/// Each error type keeps what locates it (a file and its line, a file and a byte offset, a
/// path in a folder, a peer) and its own codes for programs; all of them say it the same way:
/// `location: message`, or the message alone when it names what it is about. A front-end that
/// shows errors as data (a JSON body, a log field) takes the two parts instead of parsing the line.
public protocol KaitenError: Error, Sendable, CustomStringConvertible {
    /// Where: `file:line`, `file at byte N`, a path, `peer ABCDEFG`; nil when the message says.
    var location: String? { get }
    /// What is wrong and, where it helps, what to do about it.
    var message: String { get }
}

extension KaitenError {
    public var description: String { location.map { "\($0): \(message)" } ?? message }
}
