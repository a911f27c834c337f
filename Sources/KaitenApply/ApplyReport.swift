import Foundation
import KaitenProtocol
import KaitenReconcile

/// What happens while a plan is applied, for the terminal, the log or `--json`.
public enum ApplyEvent: Sendable, Codable {
    case start(actions: Int, pullBytes: Int64)
    case progress(filesDone: Int, filesTotal: Int, bytesDone: Int64, bytesTotal: Int64, current: String)
    case done(folder: String, action: Action, note: String?)
    case failed(folder: String, action: Action, reason: String)
    case removedTemporary(folder: String, path: String)
    /// A deletion not done because too few connected peers hold the file: a safety brake.
    case kept(folder: String, action: Action, reason: String)
    /// A local copy that lost a conflict, moved aside before the winner was pulled.
    case conflictCopy(folder: String, path: String, copy: String)
    /// A sent change now held by enough peers (`peers`), or, when the wait ended without
    /// them (`--send-timeout`), by too few.
    case sendHeld(folder: String, path: String, peers: [String])
    case sendNotHeld(folder: String, path: String, reason: String)
    /// Waiting for the peers to take what was sent.
    case awaitingPeers(held: Int, total: Int)
}

/// A change apply announced to the peers: the version they must come to hold.
public struct SentChange: Sendable, Codable {
    public var folder: String
    public var path: String
    public var version: BEPVector
    public var deleted: Bool

    public init(folder: String, path: String, version: BEPVector, deleted: Bool) {
        (self.folder, self.path, self.version, self.deleted) = (folder, path, version, deleted)
    }

    private enum CodingKeys: String, CodingKey { case folder, path, version, deleted }

    /// A version counter on the wire: the device's short ID and its value.
    private struct Counter: Codable {
        var id: UInt64
        var value: UInt64
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        folder = try c.decode(String.self, forKey: .folder)
        path = try c.decode(String.self, forKey: .path)
        deleted = try c.decodeIfPresent(Bool.self, forKey: .deleted) ?? false
        version = BEPVector()
        version.counters = try (c.decodeIfPresent([Counter].self, forKey: .version) ?? []).map { counter in
            var made = BEPCounter()
            made.id = counter.id
            made.value = counter.value
            return made
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(folder, forKey: .folder)
        try c.encode(path, forKey: .path)
        try c.encode(deleted, forKey: .deleted)
        try c.encode(version.counters.map { Counter(id: $0.id, value: $0.value) }, forKey: .version)
    }
}

/// The outcome of an apply.
///
/// Codable: a service's control socket sends it whole to the client that asked for the apply.
public struct ApplyReport: Sendable, Codable {
    /// A path of a folder the report names.
    public struct Item: Sendable, Codable, Equatable {
        public var folder: String
        public var path: String

        public init(_ folder: String, _ path: String) { (self.folder, self.path) = (folder, path) }
    }

    /// An action that failed, and why.
    public struct Failure: Sendable, Codable, Equatable {
        public var folder: String
        public var path: String
        public var reason: String

        public init(_ folder: String, _ path: String, _ reason: String) { (self.folder, self.path, self.reason) = (folder, path, reason) }
    }

    public init(conflicts: Int = 0) { self.conflicts = conflicts }
    public var done = 0
    public var failed: [Failure] = []
    public var pulledBytes: Int64 = 0
    public var freedBytes: Int64 = 0
    public var conflicts = 0
    public var blocksCopiedLocally = 0
    public var blocksFetched = 0
    /// Blocks whose data failed the SHA-256 check.
    public var blocksRejected = 0
    /// Blocks a peer answered with an error code.
    public var blocksRefused = 0
    /// Requests lost to a connection that went away.
    public var blocksLost = 0
    /// The signal that interrupted the apply (SIGINT, SIGTERM), if one did.
    public var interruptedBy: Int32?
    /// Actions not done because of the interruption.
    public var notDone = 0
    /// Deselected files kept because too few connected peers hold them (apply exits 4).
    public var keptForSafety: [Item] = []
    /// Changes announced to the peers.
    public var sent: [SentChange] = []
    /// Sent changes fewer than `--require-peers` peers held when the wait ended (apply exits 5).
    public var notHeld: [Item] = []
    /// Local copies that lost a conflict, moved aside (`NAME.sync-conflict-…`).
    public var conflictCopies: [Item] = []
}

/// `--max-delete`: a count, or a share of a folder's local files.
public enum DeleteLimit: Sendable, Equatable, CustomStringConvertible {
    case count(Int)
    case percent(Double)

    public init?(_ text: String) {
        if text.hasSuffix("%"), let value = Double(text.dropLast()), value >= 0 {
            self = .percent(value)
        } else if let value = Int(text), value >= 0 {
            self = .count(value)
        } else {
            return nil
        }
    }

    public var description: String {
        switch self {
        case .count(let n): return "\(n)"
        case .percent(let p): return "\(p == p.rounded() ? String(Int(p)) : String(p))%"
        }
    }

    func allows(_ deletions: Int, of localFiles: Int) -> Bool {
        switch self {
        case .count(let n): return deletions <= n
        case .percent(let p): return Double(deletions) <= Double(localFiles) * p / 100
        }
    }
}
