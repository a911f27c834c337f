import KaitenProtocol

extension GlobalIndex {
    /// The global entries directly inside `directory` (the folder root when empty), or
    /// everything below it when `recursive`. Deleted entries only with `includeDeleted`;
    /// entries no device holds validly are left out, as syncthing's browse leaves them out.
    public func list(under directory: String, recursive: Bool, includeDeleted: Bool) -> [GlobalEntry] {
        let prefix = directory.isEmpty ? "" : directory + "/"
        return allGlobal().filter { entry in
            guard entry.path.hasPrefix(prefix), entry.path != directory else { return false }
            if !recursive && entry.path.dropFirst(prefix.count).contains("/") { return false }
            if entry.holders.isEmpty { return false }
            return includeDeleted || !entry.file.isDeleted
        }
    }
}
