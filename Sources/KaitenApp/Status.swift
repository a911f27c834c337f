import Foundation
import KaitenConfig
import KaitenIndex
import KaitenService
import KaitenSync

/// `kaiten status`: each folder's global index, what this device announces, the log's size;
/// and the service serving the home, when one runs. The JSON of `status --json` is this, as it is.
public struct StatusReport: Sendable {
    public let folders: [FolderStatus]
    public let service: ServiceRecord?

    public struct PeerIndex: Encodable, Sendable {
        public let device_id: String
        public let name: String
        public let index_id: String
        public let sequence: Int64
    }

    public struct Announced: Encodable, Sendable {
        public let index_id: String
        public let sequence: Int64
        /// Entries peers may request (files, directories, symlinks held here).
        public let held: Int
        /// Entries announced as not wanted here (invalid) or withdrawn.
        public let not_held: Int
        public let deleted: Int
    }

    public struct FolderStatus: Encodable, Sendable {
        public let id: String
        public let path: String
        public let global_files: Int
        public let global_directories: Int
        public let global_symlinks: Int
        public let global_bytes: Int64
        public let peers: [PeerIndex]
        /// What this device announces for the folder (its local index); nil before the first sync.
        public let announced: Announced?
        public let log_bytes: Int64
        public let log_live_fraction: Double
        /// The `kaiten run` serving this home, when one runs (the same for every folder).
        public let service: ServiceRecord?
        /// The folder's mounts running now (`kaiten mount`, `run --mount`), with their block cache.
        public let mounts: [MountRecord]
    }
}

extension App {
    /// The status of the named folders (all when none is named).
    public func status(folders requested: [String]) throws -> StatusReport {
        let opened = try openForReading()
        let ids = try Self.folders(requested, in: opened)
        let service = ServiceRecord.running(opened.home)
        var rows: [StatusReport.FolderStatus] = []
        for id in ids {
            let log = try openLog(id, in: opened)
            for warning in IndexCompleteness.warnings(opened, folder: id, log: log) { diagnostics.error("warning: \(warning)") }
            let totals = log.index.totals()
            let peers = log.checkpoints.sorted { $0.key < $1.key }.map { device, checkpoint in
                StatusReport.PeerIndex(
                    device_id: device.description, name: opened.config.device(id: device)?.name ?? "",
                    index_id: String(checkpoint.indexID, radix: 16), sequence: checkpoint.maxSequence)
            }
            var announced: StatusReport.Announced?
            let localPath = opened.home.localIndexPath(folderID: id)
            if FileManager.default.fileExists(atPath: localPath),
                let local = try? IndexLog.open(path: localPath, folderID: id, readOnly: true),
                let checkpoint = local.checkpoints[opened.identity.deviceID]
            {
                let mine = local.index.tally().figures(of: opened.identity.deviceID)
                let (held, notHeld, deleted) = (mine.live, mine.notHeld, mine.deleted)
                announced = StatusReport.Announced(
                    index_id: String(checkpoint.indexID, radix: 16), sequence: checkpoint.maxSequence,
                    held: held, not_held: notHeld, deleted: deleted)
                local.close()
            }
            rows.append(
                StatusReport.FolderStatus(
                    id: id, path: opened.config.folder(id: id)?.path ?? "", global_files: totals.files,
                    global_directories: totals.directories, global_symlinks: totals.symlinks,
                    global_bytes: totals.bytes, peers: peers, announced: announced, log_bytes: log.fileSize,
                    log_live_fraction: (log.liveFraction * 1000).rounded() / 1000, service: service,
                    mounts: MountRecord.running(opened.home, folder: id)))
        }
        return StatusReport(folders: rows, service: service)
    }
}
