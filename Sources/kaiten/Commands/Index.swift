import ArgumentParser
import KaitenApp
import Foundation
import KaitenConfig
import KaitenIndex
import KaitenService
import KaitenSync

extension Kaiten {
    struct Index: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch, compact and rebuild the global index Kaiten keeps per folder.",
            discussion: """
                The global index is what peers announced, kept in an append-only log per folder \
                (index/<folder>.log in the home). `index sync` brings it up to date; peers send \
                only what changed since the last sync.
                """,
            subcommands: [Sync.self, Compact.self, Rebuild.self])
    }
}

extension Kaiten.Index {
    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Receive what is new from every peer sharing the folders, and append it to the log.",
            discussion: """
                Connects to each peer that shares one of the folders, sends what Kaiten already \
                holds so that only newer entries come, appends them (fsynced per batch) and \
                disconnects. Prints a line per folder and peer. Exits 1 if any peer failed.

                Example:
                  kaiten index sync photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Folder IDs. When omitted: every configured folder.")
        var folders: [String] = []

        @Option(help: "Seconds to wait for a peer's index. When omitted: 120.")
        var timeout: Double = 120

        @Flag(help: "Print a JSON array of per-peer results.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                // A running service holds the peers' connections (syncthing accepts one per
                // device) and takes every update in as it comes: nothing to fetch.
                if let service = ServiceRecord.running(opened.home) {
                    _ = try App.folders(folders, in: opened)
                    if json {
                        try Terminal.json([IndexSync.Report]())
                    } else {
                        print("kaiten run (pid \(service.pid)) keeps the index current (last update: \(service.lastIndexUpdate ?? "none yet")); nothing to do")
                    }
                    return
                }
                // So does `kaiten serve`, whose sessions take the updates in as well.
                if let server = ControlClient.running(opened.home) {
                    _ = try App.folders(folders, in: opened)
                    if json {
                        try Terminal.json([IndexSync.Report]())
                    } else {
                        print("kaiten \(server.role) (pid \(server.pid)) keeps the index current; nothing to do")
                    }
                    return
                }
                let reports = try await IndexSync.run(
                    home: opened, folders: folders, timeout: timeout, logger: global.logger,
                    warn: { Terminal.error($0) })
                try Self.render(reports, json: json)
                if reports.contains(where: { !$0.ok }) { throw ExitCode(1) }
            }
        }

        static func render(_ reports: [IndexSync.Report], json: Bool) throws {
            if json {
                try Terminal.json(reports)
                return
            }
            if reports.isEmpty { Terminal.note("no peer shares these folders") }
            for r in reports {
                let who = (r.name.isEmpty ? "" : r.name + " ") + "(" + String(r.deviceID.prefix(7)) + ")"
                if r.ok {
                    print(
                        "\(r.folder)  \(who): \(r.filesReceived) files received\(r.fullIndex ? " (full index)" : ""), sequence now \(r.sequence)"
                    )
                } else {
                    print("\(r.folder)  \(who): FAILED: \(r.problem ?? "unknown error")")
                }
            }
        }
    }

    struct Compact: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Rewrite index logs with only their live records.",
            discussion: """
                Kaiten compacts a log by itself when dead records outweigh live ones. The new log is \
                written beside the old one, fsynced and renamed over it: a crash leaves one or \
                the other, whole. A log of more than 4 MiB then gets a new snapshot beside it \
                (FOLDER.log.snap), from which the next open reads the view in place.

                Example:
                  kaiten index compact photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Folder IDs. When omitted: every configured folder.")
        var folders: [String] = []

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                let ids = try App.folders(folders, in: opened)
                let logs = try IndexSync.openLogs(home: opened, folders: ids, warn: { Terminal.error($0) })
                for id in ids {
                    guard let log = logs[id] else { continue }
                    let before = log.fileSize
                    try log.compact(warn: { Terminal.error($0) })
                    print("\(id): \(before) → \(log.fileSize) bytes")
                }
            }
        }
    }

    struct Rebuild: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Drop a folder's index log and fetch full indexes from its peers again.",
            discussion: """
                The remedy for a damaged log. Only Kaiten's copy of what peers announced is \
                dropped; no file in the folder is touched. When this device's own index of the \
                folder (index/FOLDER.local) is damaged too, it is dropped as well and starts \
                again under a new index ID (peers then take it in full). Both are checked \
                before anything is removed.

                Example:
                  kaiten index rebuild photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Option(help: "Seconds to wait for a peer's index. When omitted: 120.")
        var timeout: Double = 120

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                _ = try App.folders([folder], in: opened)
                let path = opened.home.indexLogPath(folderID: folder)
                let localPath = opened.home.localIndexPath(folderID: folder)
                // Known before anything is removed: a local index that cannot be read for
                // another reason (permissions, a newer format) stops the rebuild untouched.
                let localDamage = try Self.damage(of: localPath, folder: folder)
                IndexLog.remove(path: path)
                if let localDamage {
                    Membership.forgetLocalIndex(folder, home: opened)
                    Terminal.warning(
                        "\(localDamage.description); removed: this device's index of \(folder) starts again under a new index ID, which peers take in full")
                }
                let reports = try await IndexSync.run(
                    home: opened, folders: [folder], timeout: timeout, logger: global.logger, warn: { Terminal.error($0) })
                try Sync.render(reports, json: false)
                if reports.contains(where: { !$0.ok }) { throw ExitCode(1) }
            }
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
}
