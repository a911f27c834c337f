import Foundation
import KaitenProtocol

/// What the REST API reads of the device serving it; the service gives it its live state.
public protocol APIState: Sendable {
    var myID: DeviceID { get }
    var startTime: Date { get }
    /// The GUI address the listener is bound to, as `host:port`.
    var guiAddressUsed: String { get }
    /// The configuration in syncthing's JSON form (``KaitenConfig/ConfigFile/syncthingJSON()``).
    func configJSON() -> [String: Any]
    /// Where this device listens for peers, and any listener's problem.
    func listeners() -> [APIListener]
    /// Every configured peer, connected or not.
    func connections() -> [APIConnection]
    /// Warnings and errors said since the start, oldest first (at most a bounded number).
    func messages() -> [APIMessage]
    /// Where this device keeps what syncthing's `/rest/system/paths` names, by syncthing's keys.
    func paths() -> [String: String]
    /// The event stream of `/rest/events`.
    var events: EventLog { get }
    /// What `/metrics` shows now.
    func metrics() -> [MetricFamily]
    /// A folder's summary for this device (`device` nil) or a peer; nil: no such folder.
    func folderSummary(_ folder: String, device: DeviceID?) throws -> APIFolderSummary?
    /// The use cases that read the index and change the configuration and selection; nil
    /// where no use-case layer is given (a test of the routing alone).
    var useCases: (any APIUseCases)? { get }
    /// When each configured peer was last connected, and for how long.
    func deviceStats() -> [DeviceID: APIDeviceStats]
    /// Each folder's last scan and the last file a round changed in it.
    func folderStats() -> [String: APIFolderStats]
    /// What the last rounds could not do in a folder.
    func folderErrors(_ folder: String) -> [(path: String, error: String)]
    /// Asks for a round of `folder` (every folder: nil) now; false: no such folder.
    func scan(folder: String?, subdirectories: [String]) -> Bool
    /// Reads config.xml again, as a restart would (the process stays).
    func restart()
    /// Stops the service, as SIGTERM does.
    func shutdown()
    /// The on-demand block cache.
    func onDemandCache() -> (bytes: Int, limit: Int, blocks: Int, fetched: Int)
    /// The service's last rounds, the newest first.
    func recentRounds() -> [APIRound]
    /// The loopback port of the service's on-demand server, whose signed links the page
    /// reaches through `/ondemand/` when it is not itself on loopback; nil: none.
    var onDemandPort: Int? { get }
}

/// One round of the service: what its plan had and what became of it.
public struct APIRound: Sendable {
    public var number: Int
    /// ISO 8601.
    public var at: String
    public var planned: Int
    public var applied: Int
    public var failed: Int
    /// Left for review: not admitted by the apply mode, or held by a brake.
    public var pending: Int
    public var conflicts: Int
    public var error: String?

    public init(number: Int, at: String, planned: Int, applied: Int, failed: Int, pending: Int, conflicts: Int, error: String?) {
        self.number = number
        self.at = at
        self.planned = planned
        self.applied = applied
        self.failed = failed
        self.pending = pending
        self.conflicts = conflicts
        self.error = error
    }
}

public struct APIDeviceStats: Sendable {
    public var lastSeen: Date?
    public var lastConnectionDuration: Double

    public init(lastSeen: Date?, lastConnectionDuration: Double) {
        self.lastSeen = lastSeen
        self.lastConnectionDuration = lastConnectionDuration
    }
}

public struct APIFolderStats: Sendable {
    public var lastScan: Date?
    public var lastFile: (path: String, at: Date, deleted: Bool)?

    public init(lastScan: Date?, lastFile: (path: String, at: Date, deleted: Bool)?) {
        self.lastScan = lastScan
        self.lastFile = lastFile
    }
}

/// A folder's counts as `/rest/db/status` and `/rest/db/completion` say them.
public struct APIFolderSummary: Sendable {
    public struct Counts: Sendable {
        public var files = 0, directories = 0, symlinks = 0, deleted = 0
        public var bytes: Int64 = 0
        public var items: Int { files + directories + symlinks + deleted }

        public init(files: Int = 0, directories: Int = 0, symlinks: Int = 0, deleted: Int = 0, bytes: Int64 = 0) {
            self.files = files
            self.directories = directories
            self.symlinks = symlinks
            self.deleted = deleted
            self.bytes = bytes
        }
    }

    public var global = Counts()
    public var local = Counts()
    public var need = Counts()
    /// 0…100: how much of what is wanted is had.
    public var completion: Double = 100
    /// `idle`, `scanning`…, and since when.
    public var state = "idle"
    public var stateChanged: Date?
    /// The highest sequence of each device's index of the folder.
    public var sequences: [DeviceID: Int64] = [:]
    /// For a peer: `valid` when its index is known, else `unknown`.
    public var remoteState = "unknown"
    /// This device: the bytes of the live files its selection asks for.
    public var selectedBytes: Int64 = 0

    public init() {}
}

public struct APIListener: Sendable {
    public var address: String
    public var error: String?

    public init(address: String, error: String? = nil) {
        self.address = address
        self.error = error
    }
}

/// One peer's connection, as `/rest/system/connections` shows it.
public struct APIConnection: Sendable {
    public var deviceID: DeviceID
    public var connected: Bool
    public var paused: Bool
    public var address: String
    public var clientVersion: String
    /// `tcp-client`, `tcp-server`, `relay-client`, `relay-server`.
    public var type: String
    public var crypto: String
    public var startedAt: Date?
    public var inBytesTotal: Int64
    public var outBytesTotal: Int64

    public init(
        deviceID: DeviceID, connected: Bool, paused: Bool = false, address: String = "", clientVersion: String = "", type: String = "",
        crypto: String = "", startedAt: Date? = nil, inBytesTotal: Int64 = 0, outBytesTotal: Int64 = 0
    ) {
        self.deviceID = deviceID
        self.connected = connected
        self.paused = paused
        self.address = address
        self.clientVersion = clientVersion
        self.type = type
        self.crypto = crypto
        self.startedAt = startedAt
        self.inBytesTotal = inBytesTotal
        self.outBytesTotal = outBytesTotal
    }
}

/// A line the service said, for `/rest/system/error` (warnings and errors) and `/rest/system/log`.
public struct APIMessage: Sendable {
    public enum Level: Int, Sendable {
        // syncthing's levels: debug 0, verbose 1, info 2, warning 3, error 4.
        case info = 2, warning = 3, error = 4
    }

    public var when: Date
    public var level: Level
    public var message: String

    public init(when: Date, level: Level, message: String) {
        self.when = when
        self.level = level
        self.message = message
    }
}

/// Kaiten's version as `/rest/system/version` says it.
public struct APIVersion: Sendable {
    public var version: String

    public init(version: String) { self.version = version }
}
