import KaitenApp

/// `kaiten peer ls` and `kaiten peer check` as text.
public enum PeerView {
    /// The CONNECTED column only while the service runs (it holds the connections).
    public static func table(_ rows: [PeerEntry], live: Bool) -> [String] {
        Terminal.table(
            ["DEVICE ID", "NAME", "ADDRESSES", "FOLDERS"] + (live ? ["CONNECTED"] : []),
            rows.map { row in
                var cells = [
                    row.device_id, row.name + (row.is_self ? " (self)" : "") + (row.paused ? " (paused)" : ""),
                    row.addresses.joined(separator: ","), row.folders.joined(separator: ","),
                ]
                if live { cells.append(row.is_self ? "" : row.connected == true ? "\(row.address ?? "?") (\(row.reached_via ?? "?"))" : "no") }
                return cells
            })
    }

    public static func lines(_ r: PeerCheckResult) -> [String] {
        let who = Terminal.peerWithID(r.deviceID.description, name: r.name)
        let at = r.address.map { " at \($0)" + (r.reachedVia.map { " (\($0))" } ?? "") } ?? ""
        var lines: [String] = []
        if let client = r.clientName {
            lines.append("\(r.ok ? "ok" : "FAILED")  \(who)\(at): \(client) \(r.clientVersion ?? ""), calls itself \"\(r.remoteName ?? "")\"")
        } else {
            lines.append("FAILED  \(who)\(at)")
        }
        for folder in r.sharedBothWays { lines.append("    \(folder): shared both ways" + (r.pausedByPeer.contains(folder) ? " (paused by the peer)" : "")) }
        for folder in r.sharedOnlyHere { lines.append("    \(folder): shared here, NOT by the peer") }
        for folder in r.offeredByPeer { lines.append("    \(folder): offered by the peer, not configured here") }
        if let problem = r.problem { lines.append("    problem: \(problem)") }
        return lines
    }
}

/// `kaiten folder …` as text.
public enum FolderView {
    public static func table(_ rows: [FolderEntry], peerNames: [String: String], me: String) -> [String] {
        Terminal.table(
            ["ID", "TYPE", "PATH", "SHARED WITH"],
            rows.map { row in
                [
                    row.id + (row.paused ? " (paused)" : ""), row.type, row.path,
                    (row.devices.filter { $0 != me }.map { Terminal.peer($0, name: peerNames[$0]) }
                        + row.encrypted_devices.map { Terminal.peer($0, name: peerNames[$0]) + " (encrypted)" }).joined(separator: ","),
                ]
            })
    }

    /// What a folder verb did (a remark: said on stderr).
    public static func line(_ change: FolderChange, _ folder: String) -> String {
        switch change {
        case .added(let path, let created): return "added folder \(folder) at \(path)\(created ? " (created, with .stfolder)" : "")"
        case .shared(let peer): return "shared folder \(folder) with \(peer)"
        case .sharedEncrypted(let peer): return "shared folder \(folder) with \(peer), encrypted (it holds ciphertext only)"
        case .notShared(let peer): return "folder \(folder) is not shared with \(peer); nothing to do"
        case .unshared(let peer): return "folder \(folder) is no longer shared with \(peer); its index of the folder is dropped"
        case .removed(let path, let selection): return "removed folder \(folder); its files in \(path) are untouched\(selection.map { "; kept \($0)" } ?? "")"
        }
    }
}

/// `kaiten index sync` and `rebuild` as text: one line per folder and peer.
public enum IndexView {
    public static func lines(_ reports: [IndexReport]) -> [String] {
        reports.map { r in
            let who = Terminal.peerWithID(r.deviceID.description, name: r.name)
            guard r.ok else { return "\(r.folder)  \(who): FAILED: \(r.problem ?? "unknown error")" }
            return "\(r.folder)  \(who): \(r.filesReceived) files received\(r.fullIndex ? " (full index)" : ""), sequence now \(r.sequence)"
        }
    }
}
