import KaitenApp

/// `kaiten status` as text: the service's line when one runs, then each folder's index.
public enum StatusView {
    public static func lines(_ report: StatusReport) -> [String] {
        var out: [String] = []
        if let service = report.service {
            let connected = service.peers.filter(\.connected).map { Terminal.peer($0.id, name: $0.name) }
            out.append("service: kaiten run (pid \(service.pid)) since \(service.startedAt), --apply \(service.applyMode)")
            out.append("  peers connected: \(connected.isEmpty ? "none" : connected.joined(separator: ", ")) (\(connected.count) of \(service.peers.count))")
            for peer in service.peers where peer.connected {
                if let address = peer.address { out.append("    \(Terminal.peer(peer.id, name: peer.name)) at \(address) (\(peer.via ?? "?"))") }
            }
            out.append("  last index update: \(service.lastIndexUpdate ?? "none yet")")
            if let round = service.lastRound {
                out.append(
                    "  last round: \(round.at): \(round.planned) planned, \(round.applied) applied, \(round.failed) failed, \(round.pending) pending, \(round.conflicts) conflicts\(round.error.map { " (\($0))" } ?? "")"
                )
            }
            if let busy = service.busy { out.append("  round running since \(busy.since): \(busy.doing)") }
            if let url = service.serveURL { out.append("  on demand at \(url)") }
            if let url = service.restURL { out.append("  syncthing's REST API at \(url)") }
            if let url = service.pageURL { out.append("  the web page's own listener at \(url) (`kaiten ui` prints a link)") }
        }
        for row in report.folders {
            out.append("\(row.id)  \(row.path)")
            out.append(
                "  global: \(row.global_files) files, \(row.global_directories) directories, \(row.global_symlinks) symlinks, \(Terminal.human(row.global_bytes))")
            for peer in row.peers {
                out.append("  peer \(peer.name.isEmpty ? "" : peer.name + " ")(\(peer.device_id.prefix(7))): index ID \(peer.index_id), sequence \(peer.sequence)")
            }
            if row.peers.isEmpty { out.append("  no index yet: run `kaiten index sync \(row.id)`") }
            if let mine = row.announced {
                out.append(
                    "  announced by this device: index ID \(mine.index_id), sequence \(mine.sequence); \(mine.held) held, \(mine.not_held) not held here, \(mine.deleted) deleted"
                )
            }
            out.append("  log: \(Terminal.human(row.log_bytes)), \(Int(row.log_live_fraction * 100))% live")
            for mount in row.mounts {
                out.append(
                    "  mounted at \(mount.directory) (pid \(mount.pid)): cache \(Terminal.human(mount.cache_bytes)) of \(Terminal.human(mount.cache_budget)), \(mount.cache_hits) hits, \(mount.cache_misses) misses, \(mount.cache_evictions) evictions, \(mount.cache_unkept) not kept (disk refused), \(mount.blocks_fetched) blocks fetched"
                )
            }
        }
        return out
    }
}
