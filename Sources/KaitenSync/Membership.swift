import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenScan

/// What changes in a home's own records when a peer stops sharing a folder or a folder goes:
/// config.xml says who shares what, and the index logs must agree, or a peer that is gone
/// would go on counting in the global view.
public enum Membership {
    /// Locks the logs of `folders` (so no sync or apply is half-way through one), runs
    /// `change` (the config.xml edit), then drops what `device` announced from each.
    /// Nothing is dropped when `change` fails.
    public static func forgetPeer(
        _ device: DeviceID, folders: [String], home: KaitenHome, change: () throws -> Void
    ) throws {
        var logs: [IndexLog] = []
        defer { for log in logs { log.close() } }
        for folder in folders {
            let path = home.home.indexLogPath(folderID: folder)
            guard FileManager.default.fileExists(atPath: path) else { continue }
            logs.append(try IndexLog.open(path: path, folderID: folder))
        }
        try change()
        for log in logs { try log.removeDevice(device) }
    }

    /// Deletes this device's index of a folder (a damaged one): the next open starts a new one
    /// under a new index ID, and what it announced is worked out again from the disk.
    public static func forgetLocalIndex(_ folder: String, home: KaitenHome) {
        IndexLog.remove(path: home.home.localIndexPath(folderID: folder))
        unlink((home.home.stateDirectory as NSString).appendingPathComponent("announced-basis/\(Home.fileSafeName(folder))"))
    }

    /// Locks the folder's log, runs `change` (removing the folder from config.xml), then
    /// deletes Kaiten's records of the folder: its index log, local index (a new one comes with
    /// a new index ID), scan cache, synced journal and index expectations. The selection file (the user's) and the files on disk stay.
    public static func forgetFolder(_ folder: String, home: KaitenHome, change: () throws -> Void) throws {
        let logPath = home.home.indexLogPath(folderID: folder)
        let log = FileManager.default.fileExists(atPath: logPath) ? try IndexLog.open(path: logPath, folderID: folder) : nil
        defer { log?.close() }
        try change()
        let cache = home.home.scanCachePath(folderID: folder)
        let records = [
            logPath, home.home.localIndexPath(folderID: folder), cache, SyncedJournal.path(forCache: cache),
            IndexCompleteness.path(home.home, folder: folder),
            (home.home.stateDirectory as NSString).appendingPathComponent("announced-basis/\(Home.fileSafeName(folder))"),
        ]
        for path in records {
            unlink(path)
        }
        // The logs' snapshots too.
        IndexLog.remove(path: logPath)
        IndexLog.remove(path: home.home.localIndexPath(folderID: folder))
    }
}
