import KaitenIndex
import KaitenProtocol
import KaitenScan

/// The files of this device no peer holds in the same content: deleting them here would lose
/// them. What `/rest/kaiten/lastcopies` and `kaiten_last_copy_files` say, from the last scan
/// (no disk is read) and the peers' announcements.
public enum LastCopies {
    public struct File: Sendable, Equatable {
        public let path: String
        public let size: Int64
        /// `local-only`: no device announced the path; `local-version`: peers have it, in
        /// other content (an edit not held yet, or a conflict).
        public let reason: String
    }

    public static func find(global: GlobalIndex, tree: LocalTree, me: DeviceID) -> [File] {
        var found: [File] = []
        for file in tree.files where file.kind == .file {
            guard let hash = Reconciler.contentHash(of: file) else { continue }
            let versions = global.versions(of: file.path).filter { $0.key != me && !$0.value.isInvalid }
            if versions.isEmpty {
                found.append(File(path: file.path, size: file.size, reason: "local-only"))
            } else if !versions.values.contains(where: { !$0.isDeleted && Reconciler.contentHash(of: $0) == hash }) {
                found.append(File(path: file.path, size: file.size, reason: "local-version"))
            }
        }
        return found.sorted { $0.path < $1.path }
    }
}
