import KaitenIndex
import KaitenProtocol
import Synchronization

/// The folders' logs that the peers' index batches are written into while their connections are
/// open: each opened the first time a batch of its folder comes, held per batch only (the
/// verbs beside a service read the same log between batches), closed with the sessions.
///
/// Which peer is current for what stays with the sessions' registry; this part only knows
/// logs, index IDs and sequences, and is tested with a log and no connection (IntakeLogsTests).
final class IntakeLogs: Sendable {
    private let logs = Mutex<[String: IndexLog]>([:])
    private let open: @Sendable (String) throws -> IndexLog
    private let warn: @Sendable (String) -> Void

    /// - Parameter open: opens a folder's log for writing.
    init(open: @escaping @Sendable (String) throws -> IndexLog, warn: @escaping @Sendable (String) -> Void) {
        self.open = open
        self.warn = warn
    }

    /// The folder's log (opened the first time), held for `body`.
    func with<T: Sendable>(_ folder: String, _ body: (IndexLog) throws -> T) throws -> T {
        try logs.withLock { logs in
            if logs[folder] == nil { logs[folder] = try open(folder) }
            return try body(logs[folder]!)
        }
    }

    /// A peer began to share `folder` under `indexID` on an open connection: the batches it sends
    /// next are stored under that ID, and a new ID (it sends its index from the start then)
    /// replaces what the log held of it. Returns the sequence the log holds of the peer.
    func begin(folder: String, device: DeviceID, indexID: UInt64) throws -> Int64 {
        try with(folder) { log in
            try log.exclusively {
                if log.checkpoints[device]?.indexID != indexID {
                    try log.apply(device: device, indexID: indexID, files: [], isFullIndex: true)
                }
                return log.checkpoints[device]?.maxSequence ?? 0
            }
        }
    }

    /// Stores one batch under the index ID the exchange noted (a peer without one has not been
    /// through an exchange for this folder: refused). Returns the sequence held of it now.
    func store(folder: String, device: DeviceID, files: [BEPFileInfo], isFull: Bool) throws -> Int64 {
        try with(folder) { log in
            try log.exclusively {
                guard let indexID = log.checkpoints[device]?.indexID else {
                    throw IndexLogError(.io, file: log.path, "no index ID of \(device.shortDescription) for this folder")
                }
                try log.apply(device: device, indexID: indexID, files: files, isFullIndex: isFull)
                log.maintain(warn: warn)
                return log.checkpoints[device]?.maxSequence ?? 0
            }
        }
    }

    /// Between a service's rounds: each log whose records since its snapshot are past the
    /// threshold gets a new snapshot now (during a big intake the log waits for the tail to
    /// reach half the snapshot, so up to a third of the view sits in memory), and its view is
    /// then read from it.
    func settle() {
        logs.withLock { logs in
            for log in logs.values { log.maintain(eager: true, warn: warn) }
            for log in logs.values { log.index.releaseSnapshotPages() }
        }
    }

    func closeAll() {
        logs.withLock { logs in
            for log in logs.values { log.close() }
            logs = [:]
        }
    }
}
