/// What `kaiten run` applies on its own, without anyone reviewing the plan. An edit made here
/// and on the peers at once is settled as syncthing settles it, in `safe` and `all`: the newer
/// modification wins, and the other is kept as `NAME.sync-conflict-…` (a pull that moves the
/// local edit aside, `conflict-lost`, or a send the peers move theirs aside for,
/// `conflict-won`): nothing is lost. Other conflicts wait for `kaiten resolve` or `apply`.
public enum AutoApply: String, Sendable, CaseIterable {
    /// Plan and log only.
    case none
    /// What loses nothing anywhere: pulls, sends of changes made here, edits made here and on
    /// the peers at once (settled by syncthing's rule), directories, modes, the `.stignore`
    /// write, and deselect-deletions (files the peers still hold; the brakes
    /// `--max-delete`, `--require-peers` and the last-copy rule still apply).
    case safe
    /// Also what the peers decided that removes local files (deleted or moved on the peers, a
    /// file replaced by a directory) and deletions made here sent to the peers.
    case all

    /// Whether an action of a plan is applied in this mode.
    public func admits(_ action: Action) -> Bool {
        switch self {
        case .none:
            return false
        case .all:
            return true
        case .safe:
            switch action.action {
            case .pull, .mkdir, .chmod, .writeStIgnore, .send: return true
            case .rmdir: return action.cause == .emptied
            case .delete: return action.cause == .deselected
            case .sendDelete: return false
            }
        }
    }

    /// The plan with only what this mode applies (conflicts and warnings kept, for the log).
    public func filter(_ plan: Plan) -> Plan {
        var kept = plan
        for i in kept.folders.indices { kept.folders[i].actions.removeAll { !admits($0) } }
        return kept
    }
}
