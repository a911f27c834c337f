import KaitenConfig
import KaitenIndex
import KaitenService
import KaitenSync

/// What one peer sent for one folder in an index sync (`index sync --json` prints these).
public typealias IndexReport = IndexSync.Report

/// How `index sync` ended.
public enum IndexSyncOutcome: Sendable {
    /// A service holds the peers' connections and takes every update in as it comes: nothing
    /// to fetch. `service` names it ("kaiten run (pid 12)"), `lastUpdate` when it says.
    case keptCurrent(service: String, lastUpdate: String?)
    case synced([IndexReport])
}

extension App {
    /// Brings the folders' index logs up to date from every peer sharing them.
    public func syncIndex(folders: [String], timeout: Double) async throws -> IndexSyncOutcome {
        let opened = try open()
        _ = try Self.folders(folders, in: opened)
        if let service = ServiceRecord.running(opened.home) {
            return .keptCurrent(service: "kaiten run (pid \(service.pid))", lastUpdate: service.lastIndexUpdate ?? "none yet")
        }
        // So does `kaiten serve`, whose sessions take the updates in as well.
        if case .service(let server) = try route("index sync", .readsFromService, in: opened) {
            return .keptCurrent(service: "kaiten \(server.role) (pid \(server.pid))", lastUpdate: nil)
        }
        return .synced(try await IndexSync.run(home: opened, folders: folders, timeout: timeout, logger: logger, warn: diagnostics.error))
    }

    /// Rewrites the folders' logs with only their live records: (folder, bytes before, after).
    public func compactIndex(folders: [String]) throws -> [(folder: String, before: Int64, after: Int64)] {
        let opened = try open()
        let ids = try Self.folders(folders, in: opened)
        let logs = try IndexSync.openLogs(home: opened, folders: ids, warn: diagnostics.error)
        var results: [(folder: String, before: Int64, after: Int64)] = []
        for id in ids {
            guard let log = logs[id] else { continue }
            let before = log.fileSize
            try log.compact(warn: diagnostics.error)
            results.append((id, before, log.fileSize))
        }
        return results
    }

    /// Drops a folder's index log (and this device's own index of it, when that is damaged
    /// too) and fetches full indexes from its peers again. Both are checked before anything is
    /// removed; no file in the folder is touched.
    public func rebuildIndex(_ folder: String, timeout: Double) async throws -> [IndexReport] {
        let opened = try open()
        _ = try Self.folders([folder], in: opened)
        let path = opened.home.indexLogPath(folderID: folder)
        let localPath = opened.home.localIndexPath(folderID: folder)
        // Known before anything is removed: a local index that cannot be read for another
        // reason (permissions, a newer format) stops the rebuild untouched.
        let localDamage = try Self.damage(of: localPath, folder: folder)
        IndexLog.remove(path: path)
        if let localDamage {
            Membership.forgetLocalIndex(folder, home: opened)
            diagnostics.warning(
                "\(localDamage.description); removed: this device's index of \(folder) starts again under a new index ID, which peers take in full"
            )
        }
        return try await IndexSync.run(home: opened, folders: [folder], timeout: timeout, logger: logger, warn: diagnostics.error)
    }

    /// The damage in a log (a bad checksum, a foreign or broken header), or nil when it reads.
    static func damage(of path: String, folder: String) throws -> IndexLogError? {
        let log: IndexLog
        do {
            log = try IndexLog.open(path: path, folderID: folder, readOnly: true)
        } catch {
            switch error.code {
            case .corruptRecord, .notAnIndexLog, .wrongFolder: return error
            default: throw error
            }
        }
        log.close()
        return nil
    }
}
