import KaitenApp

/// `kaiten ls` as text: names, or with `long` type, selection mark, local state, what this device
/// holds of it (the mount's states), size, time and peers.
public enum ListingView {
    public static func lines(_ listing: Listing, long: Bool, recursive: Bool) -> [String] {
        let directory = listing.directory
        return listing.entries.map { row in
            let bare = recursive || listing.namesAFile ? row.path : String(row.path.dropFirst(directory.isEmpty ? 0 : directory.count + 1))
            let shown = Listing.displayed(bare) + (row.type == "directory" ? "/" : "") + (row.deleted ? " (deleted)" : "")
            guard long else { return shown }
            let peers = row.peers.map { Terminal.peer($0, name: listing.peerNames[$0]) }.joined(separator: ",")
            let mark = row.selected == "explicit" ? "S" : row.selected == "parent" ? "s" : "-"
            let type = row.type == "directory" ? "d" : row.type == "symlink" ? "l" : "-"
            return "\(type)  \(mark) \(row.local.padded(10))  \((row.state ?? "").padded(11))  \(Terminal.human(row.size).leftPad(9))  \(row.modified)  \(shown)  [\(peers)]"
        }
    }
}
