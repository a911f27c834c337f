import Foundation
import KaitenApply
import KaitenConfig
import KaitenProtocol
import KaitenReconcile

#if canImport(Glibc)
import Glibc
#endif

/// The control socket of a running `kaiten run` (or `kaiten serve`): `state/run.sock`, mode
/// 0600 in the home, so that the verbs that need the peers (`plan`, `apply`, `cat`, `get`) work
/// beside the service that holds the peers' connections — syncthing keeps one connection per
/// device, so a second process dialling would take the service's away.
///
/// One request per connection. Every message is a frame: a 4-byte big-endian payload length,
/// one byte of kind (`J` JSON, `D` data), the payload. The client sends one JSON request, then,
/// for an apply, may send `stop` (Ctrl-C) or close its side; the service answers with JSON
/// frames (and a data frame for a block) and closes.
public enum ControlSocket {
    public static func path(_ home: Home) -> String { (home.stateDirectory as NSString).appendingPathComponent("run.sock") }

    static let maximumPayload = 32 << 20

    enum Kind: UInt8 {
        case json = 0x4A
        case data = 0x44
    }

    /// `sockaddr_un` holds 107 bytes of path: a longer one is reached through its directory
    /// opened as `/proc/self/fd/N`, which the kernel resolves like the path itself.
    static func withShortPath<T>(_ path: String, _ body: (String) async throws -> T) async throws -> T {
        guard path.utf8.count > 100 else { return try await body(path) }
        let directory = try openDirectory(path)
        defer { close(directory) }
        return try await body("/proc/self/fd/\(directory)/\((path as NSString).lastPathComponent)")
    }

    static func withShortPath<T>(_ path: String, _ body: (String) throws -> T) throws -> T {
        guard path.utf8.count > 100 else { return try body(path) }
        let directory = try openDirectory(path)
        defer { close(directory) }
        return try body("/proc/self/fd/\(directory)/\((path as NSString).lastPathComponent)")
    }

    private static func openDirectory(_ path: String) throws -> Int32 {
        let oPath: Int32 = 0o10000000  // O_PATH, which Glibc's Swift overlay does not export
        let directory = open((path as NSString).deletingLastPathComponent, oPath | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { throw ServiceError("\(path): cannot open its directory: \(String(cString: strerror(errno)))") }
        return directory
    }

    static func frame(_ kind: Kind, _ payload: Data) -> Data {
        var out = Data(capacity: 5 + payload.count)
        let length = UInt32(payload.count).bigEndian
        withUnsafeBytes(of: length) { out.append(contentsOf: $0) }
        out.append(kind.rawValue)
        out.append(payload)
        return out
    }

    static func encode<T: Encodable>(_ value: T) -> Data {
        // Every type sent is plain data; an encoding failure would be a programming error.
        (try? JSONEncoder().encode(value)) ?? Data("{}".utf8)
    }

    /// A reply's JSON; a batch of events is written directly (``ControlEventJSON``).
    static func encode(_ reply: ControlReply) -> Data {
        if reply.type == .event, reply.event == nil, let events = reply.events { return ControlEventJSON.reply(events) }
        return (try? JSONEncoder().encode(reply)) ?? Data("{}".utf8)
    }
}

/// What a client asks of the service.
public struct ControlRequest: Codable, Sendable {
    public enum Verb: String, Codable, Sendable {
        /// Who answers (pid, run or serve).
        case hello
        /// The plan the service would apply now, on its live connections.
        case plan
        /// Apply this plan (from `plan`, or a saved one), re-checked like a saved plan; or, with
        /// `fresh`, plan here and apply that plan at once.
        case apply
        /// One verified block of the current global version of a file.
        case block
        /// Sent during an apply: stop between blocks (Ctrl-C on the client).
        case stop
        /// A one-time login token for the web page (`kaiten ui`), answered in `message`.
        case uiLogin
    }

    public var verb: Verb
    public var folders: [String]?
    public var requirePeers: Int?
    public var plan: Plan?
    public var saved: Bool?
    public var maxDelete: String?
    public var sendTimeout: Double?
    public var folder: String?
    public var path: String?
    public var offset: Int64?
    public var size: Int32?
    public var hash: String?
    public var signal: Int32?
    /// An apply with no plan: the service plans (`folders`, `requirePeers`), answers the plan
    /// first, and applies it without waiting for a word, for a front-end that asks no question
    /// (`--yes`): one plan, where plan-then-apply makes two.
    public var fresh: Bool?
    /// The client takes an apply's events several to a frame (`ControlReply.events`).
    public var batches: Bool?

    public init(verb: Verb) { self.verb = verb }
}

/// What a service's control socket takes beyond the first version of the protocol, said in its
/// hello (`ControlReply.accepts`): a newer client asks a service started from an older
/// executable only what that one understands.
public enum ControlFeature: String, CaseIterable, Sendable {
    /// ``ControlRequest/fresh``.
    case freshApply = "fresh-apply"
    /// ``ControlRequest/batches``.
    case eventBatches = "event-batches"
}

/// What the service answers: one or more of these, in order.
public struct ControlReply: Codable, Sendable {
    public enum Kind: String, Codable, Sendable {
        case hello, plan, note, event, report, failure
    }

    public struct Skipped: Codable, Sendable {
        public var folder: String
        public var reason: String
    }

    public var type: Kind
    public var pid: Int32?
    public var role: String?
    public var plan: Plan?
    public var warnings: [String]?
    public var skipped: [Skipped]?
    public var event: ApplyEvent?
    /// An apply's events in order, for a client that asked for ``ControlRequest/batches``.
    public var events: [ApplyEvent]?
    /// In a hello: the ``ControlFeature``s this service takes.
    public var accepts: [String]?
    /// An apply's last reply; absent from a fresh apply's when its plan had nothing to apply.
    public var report: ApplyReport?
    /// For a failure: the exit code the verb exits with (1 error, 3 stale plan, 4 a brake).
    public var code: Int32?
    public var message: String?

    init(_ type: Kind) { self.type = type }

    static func failure(_ code: Int32, _ message: String) -> ControlReply {
        var reply = ControlReply(.failure)
        reply.code = code
        reply.message = message
        return reply
    }
}
