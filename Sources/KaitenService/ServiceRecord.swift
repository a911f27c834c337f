import KaitenErrors
import Foundation
import KaitenFiles
import KaitenConfig

#if canImport(Glibc)
import Glibc
#endif

/// What a running `kaiten run` says about itself, for `kaiten status` and the other verbs
/// (`state/service.json`, replaced atomically). Whether it still runs is the lock
/// `state/service.lock`, which the kernel lets go when the process dies, kill -9 included.
public struct ServiceRecord: Codable, Sendable {
    public struct Peer: Codable, Sendable {
        public var id: String
        public var name: String
        public var connected: Bool
        /// Where it is connected (the peer's address) and how it was reached (`static`,
        /// `lan`, `global`, `relay`, `incoming`), while connected.
        public var address: String?
        public var via: String?
    }

    public struct Round: Codable, Sendable {
        public var at: String
        /// Actions the plan had, and of those: applied, failed, left for review (not admitted
        /// by the apply mode, or held by a brake).
        public var planned: Int
        public var applied: Int
        public var failed: Int
        public var pending: Int
        public var conflicts: Int
        public var error: String?
        /// Rounds run since the service started, this one included.
        public var number: Int?
        /// How many paths the round looked at when a peer's update named them (it planned
        /// only those); nil when it planned every path.
        public var paths: Int?
    }

    public var pid: Int32
    public var startedAt: String
    public var applyMode: String
    /// `--require-peers`: the holders a deletion needs, as the rounds count conflicts with it.
    public var requirePeers: Int?
    public var folders: [String]
    public var peers: [Peer]
    public var lastIndexUpdate: String?
    public var lastRound: Round?
    public var serveURL: String?
    /// Where syncthing's REST API answers (config.xml's `<gui>`), when it does.
    public var restURL: String?
    /// The web page's own listener (`--ui`), when there is one.
    public var pageURL: String?
    /// A round that has run for a while (``Busy/after`` seconds): since when and what it is
    /// doing now. nil between rounds and in a round's first seconds.
    public var busy: Busy?

    public struct Busy: Codable, Sendable {
        /// Rounds shorter than this are not shown (the file is not rewritten for them).
        public static let after: Double = 5
        public var since: String
        public var doing: String
    }

    enum CodingKeys: String, CodingKey {
        case pid, startedAt = "started_at", applyMode = "apply_mode", requirePeers = "require_peers", folders, peers
        case lastIndexUpdate = "last_index_update", lastRound = "last_round", serveURL = "serve_url", restURL = "rest_url", pageURL = "page_url", busy
    }

    static func path(_ home: Home) -> String { (home.stateDirectory as NSString).appendingPathComponent("service.json") }
    static func lockPath(_ home: Home) -> String { (home.stateDirectory as NSString).appendingPathComponent("service.lock") }

    /// The record of the service running on this home, or nil when none runs.
    public static func running(_ home: Home) -> ServiceRecord? {
        let fd = open(lockPath(home), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return nil
        }
        guard let data = FileManager.default.contents(atPath: path(home)) else { return nil }
        return try? JSONDecoder().decode(ServiceRecord.self, from: data)
    }

    func save(_ home: Home) {
        guard let data = try? JSONEncoder().encode(self) else { return }
        try? AtomicFile.write([UInt8](data), to: Self.path(home))
    }

    /// Holds `state/service.lock` for the life of the value: one long-running Kaiten (`run` or
    /// `serve`) per home, since both hold the peer port, the control socket and the records
    /// other verbs find them by.
    public final class Lock {
        let fd: Int32
        init(fd: Int32) { self.fd = fd }
        deinit { close(fd) }
    }

    /// Takes the home's lock for `role` (`run`, `serve`), or says which process holds it.
    public static func lock(_ home: Home, role: String) throws -> Lock {
        try FileManager.default.createDirectory(atPath: home.stateDirectory, withIntermediateDirectories: true)
        let fd = open(lockPath(home), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ServiceError("cannot create \(lockPath(home)): \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let holder = String(decoding: FileManager.default.contents(atPath: lockPath(home)) ?? Data(), as: UTF8.self)
            close(fd)
            let parts = holder.split(separator: " ")
            let who = parts.count == 2 ? "kaiten \(parts[1].trimmingCharacters(in: .newlines)) (pid \(parts[0]))" : "another kaiten run or serve"
            throw ServiceError(
                "\(who) already runs on this home (\(home.path)); one per home: stop it first, or use the verbs beside it (they go through it)")
        }
        // Who holds it, for the next one's message (the lock itself is the flock).
        let text = Array("\(getpid()) \(role)\n".utf8)
        if ftruncate(fd, 0) == 0 { _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } }
        return Lock(fd: fd)
    }
}

public struct ServiceError: KaitenError {
    public let message: String
    public var location: String? { nil }
    public init(_ message: String) { self.message = message }
}
