import KaitenIndex
import KaitenProtocol
import KaitenReconcile

/// A planned deletion, decided again as it runs: the plan may be minutes old, and what the peers
/// say now is what counts. A pure decision (the executor does the unlink), so each case is tested
/// without a folder or a peer (DeletionRecheckTests).
enum DeletionRecheck {
    enum Verdict: Equatable {
        case proceed
        /// A safety brake: too few connected peers hold the file now (reported as kept; apply exits 4).
        case kept(String)
        /// What the plan relied on is no longer so (reported as a failure of the action).
        case refused(String)
    }

    /// - Parameters:
    ///   - global: the path's global version now.
    ///   - live: the peers connected now that share the folder.
    static func verdict(for action: Action, global: GlobalEntry?, live: Set<DeviceID>, requirePeers: Int) -> Verdict {
        switch action.cause {
        case .deletedOnPeers, .movedOnPeers:
            guard global?.file.isDeleted ?? true else { return .refused("it is no longer deleted on peers; kept") }
        case .replaced:
            guard let global, !global.file.isDeleted, global.file.type == .directory else {
                return .refused("the peers no longer have a directory here; kept")
            }
        default:
            // Deselected: only peers connected now, announcing the global version this copy is
            // (or that replaces it), count. A peer last seen holding it may be the NAS that died
            // overnight.
            let holders = global.map { $0.file.isDeleted || $0.file.isInvalid ? 0 : $0.holders.filter(live.contains).count } ?? 0
            guard holders >= requirePeers else {
                return .kept(
                    "only \(holders) connected peer\(holders == 1 ? "" : "s") hold\(holders == 1 ? "s" : "") it now (--require-peers \(requirePeers)); kept")
            }
        }
        return .proceed
    }
}
