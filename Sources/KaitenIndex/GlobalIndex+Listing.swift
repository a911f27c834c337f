import KaitenProtocol

extension GlobalIndex {
    /// The global entries directly inside `directory` (the folder root when empty), or
    /// everything below it when `recursive`. Deleted entries only with `includeDeleted`;
    /// entries no device holds validly are left out, as syncthing's browse leaves them out.
    public func list(under directory: String, recursive: Bool, includeDeleted: Bool) -> [GlobalEntry] {
        var found: [GlobalEntry] = []
        forEachGlobal(below: directory, recursive: recursive) { entry in
            if !entry.holders.isEmpty && (includeDeleted || !entry.file.isDeleted) { found.append(entry) }
        }
        return found.sorted { $0.path < $1.path }
    }
}
