import Foundation
import KaitenTransfer
import KaitenIndex
import KaitenScan
import KaitenSync

/// `kaiten get`: copies a file or a directory tree of the global index to a place outside the
/// folder, without selecting it. Every block verified; blocks this machine already holds (any
/// file of the folder, per the scan cache) are read locally.
public struct FetchReport: Sendable {
    /// Entries written (files, links, directories), and those that failed (path, why).
    public var written = 0
    public var failed: [(path: String, why: String)] = []
    public var bytes: Int64 = 0
    public var blocksFetched = 0
    public var blocksReadLocally = 0
}

extension RemoteFiles {
    /// Writes `path` of `folder` (a file, or a directory and everything under it) to
    /// `destination`: the file itself, or the directory that receives the tree.
    /// - Parameters:
    ///   - replace: whether a file already at a target may be replaced (`--force`); never a
    ///     directory, and without it nothing that exists is touched (as `cp -n`).
    ///   - onFile: called after each file of a tree is written.
    ///   - journal: where a file written into the folder itself is recorded as synced at the
    ///     version fetched (the mount bringing a file here to change it), as apply records it.
    public func fetch(
        folder: String, path: String, to destination: String, replace: Bool = false, journal: SyncedJournal? = nil,
        onFile: (String) -> Void = { _ in }
    ) async throws -> FetchReport {
        let log = try PeerGenerations.openLog(home: home, folder: folder, readOnly: true)
        defer { log.close() }
        guard let g = log.index.global(path), !g.file.isDeleted else {
            throw StreamError(
                .notFound, "\(folder)/\(path): not in the global index\(log.index.global(path) != nil ? " (deleted on every peer)" : "")")
        }
        var wanted: [(remote: String, local: String)] = []
        let root: String
        if g.file.type == .directory {
            root = destination
            for entry in log.index.list(under: path, recursive: true, includeDeleted: false)
            where entry.file.type == .file || entry.file.isSymlink || entry.file.type == .directory {
                wanted.append((entry.path, String(entry.path.dropFirst(path.count + 1))))
            }
        } else {
            root = (destination as NSString).deletingLastPathComponent
            wanted.append((path, (destination as NSString).lastPathComponent))
        }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        var report = FetchReport()
        guard let folderPath = home.config.folders.first(where: { $0.id == folder })?.path else {
            throw StreamError(.notFound, "folder \"\(folder)\" is not configured")
        }
        let localBlocks = ScanCache.load(path: home.home.scanCachePath(folderID: folder))
        for (remote, local) in wanted {
            guard let entry = log.index.global(remote) else { continue }
            do {
                if entry.file.type == .directory {
                    try SafePath.prepareParents(root: root, name: local + "/x")
                    report.written += 1
                    continue
                }
                let blocks = entry.file.type == .file ? try log.blocks(of: entry.file) : []
                let source = BlockSource(folderID: folder, root: folderPath, connections: try connections(), tree: localBlocks, relay: relay)
                var puller = FilePuller(root: root, ignorePermissions: false, source: source)
                puller.journal = journal
                let target = (root as NSString).appendingPathComponent(local)
                // Checked before the fetch (nothing fetched for a file that stays) and again just
                // before the rename (a file that appeared meanwhile is not replaced either).
                let check: FilePuller.LocalCheck = { _ throws(ApplyError) in try Self.mayWrite(target, replace: replace) }
                try check(local)
                _ = try await puller.pull(entry.file, as: local, blocks: blocks, holders: entry.holders, check: check)
                report.written += 1
                report.bytes += entry.file.size
                report.blocksReadLocally += source.statistics.copied
                report.blocksFetched += source.statistics.fetched
                if wanted.count > 1 { onFile(remote) }
            } catch {
                report.failed.append((remote, (error as? ApplyError)?.hint ?? "\(error)"))
            }
        }
        return report
    }

    /// Whether `get` may write `target`: it does not exist, or it is a file or a link that
    /// `replace` allows to be replaced. A directory is never replaced by a file.
    static func mayWrite(_ target: String, replace: Bool) throws(ApplyError) {
        var info = stat()
        guard lstat(target, &info) == 0 else { return }
        if (info.st_mode & S_IFMT) == S_IFDIR {
            throw ApplyError(.changedLocally, path: target, "\(target) is a directory; not replaced")
        }
        guard replace else {
            throw ApplyError(.changedLocally, path: target, "\(target) already exists; not replaced (--force replaces it)")
        }
    }
}
