/// What this device holds of a path, as the mount's `user.kaiten.state` and `kaiten ls` say it
/// (the words file managers' placeholders use).
public enum PlaceholderState: String, Sendable, Encodable, CaseIterable {
    /// Nothing of it here: read from the peers on access.
    case onlineOnly = "online-only"
    /// Some of its blocks are in the cache.
    case partial
    /// All of it is here without being kept: in the cache, or a local copy the selection does
    /// not keep (the next apply frees it).
    case cached
    /// The selection keeps it on this device.
    case pinned
    /// On disk here and in no peer's index.
    case localOnly = "local-only"
    /// A copy on disk differs from the global version and the selection does not keep it, or
    /// it is a `.sync-conflict-` file.
    case conflict

    /// The state of a file of the folder.
    /// - Parameters:
    ///   - inGlobalIndex: a peer announces it (not deleted).
    ///   - local: whether a copy is on disk, and whether it has the global version's content.
    ///   - selected: the selection keeps it.
    ///   - cachedBlocks, blocks: how many of its global version's blocks the cache holds, of how many.
    public static func of(
        name: String, inGlobalIndex: Bool, local: LocalCopy, selected: Bool, cachedBlocks: Int, blocks: Int
    ) -> PlaceholderState {
        if name.contains(".sync-conflict-") { return .conflict }
        if !inGlobalIndex { return local == .absent ? .onlineOnly : .localOnly }
        if selected { return .pinned }
        switch local {
        case .differs: return .conflict
        case .same: return .cached
        case .absent: break
        }
        if cachedBlocks >= blocks { return .cached }
        return cachedBlocks > 0 ? .partial : .onlineOnly
    }

    public enum LocalCopy: Sendable, Equatable {
        case absent, same, differs
    }
}
