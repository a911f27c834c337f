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
}

/// What a client asks of the service.
public struct ControlRequest: Codable, Sendable {
    public enum Verb: String, Codable, Sendable {
        /// Who answers (pid, run or serve).
        case hello
        /// The plan the service would apply now, on its live connections.
        case plan
        /// Apply this plan (from `plan`, or a saved one), re-checked like a saved plan.
        case apply
        /// One verified block of the current global version of a file.
        case block
        /// Sent during an apply: stop between blocks (Ctrl-C on the client).
        case stop
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

    public init(verb: Verb) { self.verb = verb }
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
    public var report: ControlReport?
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

/// An ``ApplyReport`` on the wire.
public struct ControlReport: Codable, Sendable {
    public struct Item: Codable, Sendable {
        var folder: String
        var path: String
        var reason: String?
        var deleted: Bool?
    }

    var done: Int
    var failed: [Item]
    var pulledBytes: Int64
    var freedBytes: Int64
    var conflicts: Int
    var blocksCopiedLocally: Int
    var blocksFetched: Int
    var blocksRejected: Int
    var blocksRefused: Int
    var blocksLost: Int
    var interruptedBy: Int32?
    var notDone: Int
    var keptForSafety: [Item]
    var sent: [Item]
    var notHeld: [Item]
    var conflictCopies: [Item]

    init(_ r: ApplyReport) {
        done = r.done
        failed = r.failed.map { Item(folder: $0.folder, path: $0.path, reason: $0.reason) }
        pulledBytes = r.pulledBytes
        freedBytes = r.freedBytes
        conflicts = r.conflicts
        blocksCopiedLocally = r.blocksCopiedLocally
        blocksFetched = r.blocksFetched
        blocksRejected = r.blocksRejected
        blocksRefused = r.blocksRefused
        blocksLost = r.blocksLost
        interruptedBy = r.interruptedBy
        notDone = r.notDone
        keptForSafety = r.keptForSafety.map { Item(folder: $0.folder, path: $0.path) }
        sent = r.sent.map { Item(folder: $0.folder, path: $0.path, deleted: $0.deleted) }
        notHeld = r.notHeld.map { Item(folder: $0.folder, path: $0.path) }
        conflictCopies = r.conflictCopies.map { Item(folder: $0.folder, path: $0.path) }
    }

    /// The report as the apply that ran it made it (the versions sent are not carried: the
    /// client reports them by path).
    public var applyReport: ApplyReport {
        var r = ApplyReport(conflicts: conflicts)
        r.done = done
        r.failed = failed.map { ($0.folder, $0.path, $0.reason ?? "") }
        r.pulledBytes = pulledBytes
        r.freedBytes = freedBytes
        r.blocksCopiedLocally = blocksCopiedLocally
        r.blocksFetched = blocksFetched
        r.blocksRejected = blocksRejected
        r.blocksRefused = blocksRefused
        r.blocksLost = blocksLost
        r.interruptedBy = interruptedBy
        r.notDone = notDone
        r.keptForSafety = keptForSafety.map { ($0.folder, $0.path) }
        r.sent = sent.map { SentChange(folder: $0.folder, path: $0.path, version: BEPVector(), deleted: $0.deleted ?? false) }
        r.notHeld = notHeld.map { ($0.folder, $0.path) }
        r.conflictCopies = conflictCopies.map { ($0.folder, $0.path) }
        return r
    }
}
