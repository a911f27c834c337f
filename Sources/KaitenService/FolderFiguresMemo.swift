import Foundation
import KaitenConfig
import KaitenHTTPAPI
import KaitenProtocol
import KaitenSync

/// A folder's figures (counts, completion; this device's or a peer's) as last computed, with
/// the files they were computed from: while none of those changed, the figures stand. A status
/// request (tray apps and dashboards poll every few seconds) and a round that changed nothing
/// then walk no index, which takes seconds at ten million paths.
///
/// One computation at a time: a request that comes while one runs waits for it and takes its
/// result instead of starting a walk of its own.
final class FolderFiguresMemo: @unchecked Sendable {  // state behind the lock
    struct Basis: Equatable {
        let folder: FolderConfiguration
        let stamps: [FileStamp?]
        /// The selection file's bytes: an edit in place within one tick of the file system's
        /// clock that keeps its size would keep its stamp.
        let selection: Data?

        init(_ folder: FolderConfiguration, home: KaitenHome) {
            self.folder = folder
            stamps = Planner.completionInputs(folder, home: home).map { FileStamp($0) }
            selection = FileManager.default.contents(atPath: home.home.selectionPath(folderID: folder.id))
        }
    }

    private struct Key: Hashable {
        let folder: String
        let device: DeviceID?
    }

    private let lock = NSLock()
    private var kept: [Key: (basis: Basis, summary: APIFolderSummary)] = [:]

    /// The figures of `folder` (of `device`'s copy when given): the kept ones when their files
    /// are as they were, else what `compute` finds (kept for the next request).
    func summary(
        _ folder: FolderConfiguration, device: DeviceID?, home: KaitenHome, compute: () throws -> APIFolderSummary
    ) rethrows -> APIFolderSummary {
        lock.lock()
        defer { lock.unlock() }
        let key = Key(folder: folder.id, device: device)
        // Taken before computing: a file changed meanwhile makes the next request compute again.
        let basis = Basis(folder, home: home)
        if let kept = kept[key], kept.basis == basis { return kept.summary }
        let summary = try compute()
        kept[key] = (basis, summary)
        return summary
    }
}
