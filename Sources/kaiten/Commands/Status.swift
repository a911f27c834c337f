import ArgumentParser
import Foundation
import KaitenConfig
import KaitenService
import KaitenIndex
import KaitenSync

extension Kaiten {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show each folder's global index: totals, what Kaiten holds from each peer, log size.",
            discussion: """
                Reads the index logs as they are; `kaiten index sync` refreshes them. An index an \
                interrupted sync left partial is said so.

                Examples:
                  kaiten status
                  kaiten status photos --json | jq '.[0].peers'
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "A folder ID. When omitted: every configured folder.")
        var folder: String?

        @Flag(help: "Print JSON.")
        var json = false

        struct PeerRow: Encodable {
            let device_id: String
            let name: String
            let index_id: String
            let sequence: Int64
        }

        struct AnnouncedRow: Encodable {
            let index_id: String
            let sequence: Int64
            /// Entries peers may request (files, directories, symlinks held here).
            let held: Int
            /// Entries announced as not wanted here (invalid) or withdrawn.
            let not_held: Int
            let deleted: Int
        }

        struct FolderRow: Encodable {
            let id: String
            let path: String
            let global_files: Int
            let global_directories: Int
            let global_symlinks: Int
            let global_bytes: Int64
            let peers: [PeerRow]
            /// What this device announces for the folder (its local index); nil before the first sync.
            let announced: AnnouncedRow?
            let log_bytes: Int64
            let log_live_fraction: Double
            /// The `kaiten run` serving this home, when one runs (the same for every folder).
            let service: ServiceRecord?
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHomeForReading()
                let ids = try FolderSelection.resolve(folder.map { [$0] } ?? [], in: opened)
                var rows: [FolderRow] = []
                let service = ServiceRecord.running(opened.home)
                for id in ids {
                    let log = try FolderSelection.openLog(id, in: opened)
                    for warning in IndexCompleteness.warnings(opened, folder: id, log: log) { Terminal.error("warning: \(warning)") }
                    let totals = log.index.totals()
                    let peers = log.checkpoints.sorted { $0.key < $1.key }.map { device, checkpoint in
                        PeerRow(
                            device_id: device.description, name: opened.config.device(id: device)?.name ?? "",
                            index_id: String(checkpoint.indexID, radix: 16), sequence: checkpoint.maxSequence)
                    }
                    var announced: AnnouncedRow?
                    let localPath = opened.home.localIndexPath(folderID: id)
                    if FileManager.default.fileExists(atPath: localPath),
                        let local = try? IndexLog.open(path: localPath, folderID: id, readOnly: true),
                        let checkpoint = local.checkpoints[opened.identity.deviceID]
                    {
                        let mine = local.index.entries(from: opened.identity.deviceID)
                        announced = AnnouncedRow(
                            index_id: String(checkpoint.indexID, radix: 16), sequence: checkpoint.maxSequence,
                            held: mine.filter { !$0.isInvalid && !$0.isDeleted }.count, not_held: mine.filter(\.isInvalid).count,
                            deleted: mine.filter { $0.isDeleted && !$0.isInvalid }.count)
                        local.close()
                    }
                    rows.append(
                        FolderRow(
                            id: id, path: opened.config.folder(id: id)?.path ?? "", global_files: totals.files,
                            global_directories: totals.directories, global_symlinks: totals.symlinks,
                            global_bytes: totals.bytes, peers: peers, announced: announced, log_bytes: log.fileSize,
                            log_live_fraction: (log.liveFraction * 1000).rounded() / 1000, service: service))
                }
                if json {
                    try Terminal.json(rows)
                    return
                }
                if let service {
                    let connected = service.peers.filter(\.connected).map { $0.name.isEmpty ? String($0.id.prefix(7)) : $0.name }
                    print("service: kaiten run (pid \(service.pid)) since \(service.startedAt), --apply \(service.applyMode)")
                    print("  peers connected: \(connected.isEmpty ? "none" : connected.joined(separator: ", ")) (\(connected.count) of \(service.peers.count))")
                    for peer in service.peers where peer.connected {
                        if let address = peer.address {
                            print("    \(peer.name.isEmpty ? String(peer.id.prefix(7)) : peer.name) at \(address) (\(peer.via ?? "?"))")
                        }
                    }
                    print("  last index update: \(service.lastIndexUpdate ?? "none yet")")
                    if let round = service.lastRound {
                        print(
                            "  last round: \(round.at): \(round.planned) planned, \(round.applied) applied, \(round.failed) failed, \(round.pending) pending, \(round.conflicts) conflicts\(round.error.map { " (\($0))" } ?? "")")
                    }
                    if let busy = service.busy { print("  round running since \(busy.since): \(busy.doing)") }
                    if let url = service.serveURL { print("  on demand at \(url)") }
                }
                for row in rows {
                    print("\(row.id)  \(row.path)")
                    print(
                        "  global: \(row.global_files) files, \(row.global_directories) directories, \(row.global_symlinks) symlinks, \(Kaiten.Ls.human(row.global_bytes))"
                    )
                    for peer in row.peers {
                        print(
                            "  peer \(peer.name.isEmpty ? "" : peer.name + " ")(\(peer.device_id.prefix(7))): index ID \(peer.index_id), sequence \(peer.sequence)"
                        )
                    }
                    if row.peers.isEmpty { print("  no index yet: run `kaiten index sync \(row.id)`") }
                    if let mine = row.announced {
                        print(
                            "  announced by this device: index ID \(mine.index_id), sequence \(mine.sequence); \(mine.held) held, \(mine.not_held) not held here, \(mine.deleted) deleted"
                        )
                    }
                    print("  log: \(Kaiten.Ls.human(row.log_bytes)), \(Int(row.log_live_fraction * 100))% live")
                }
            }
        }
    }
}
