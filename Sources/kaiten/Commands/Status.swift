import ArgumentParser
import Foundation
import KaitenApp

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

        func run() async throws {
            try await reportingErrors {
                let report = try global.app.status(folders: folder.map { [$0] } ?? [])
                let rows = report.folders
                let service = report.service
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
