import KaitenEncryption
import KaitenIndex
import KaitenProtocol
import KaitenScan

/// A folder this device holds as the untrusted device, on disk: each file is the sealed blocks
/// a trusted device sent, then the encrypted FileInfo it came with and that FileInfo's length
/// (the trailer), as syncthing's untrusted device stores it. The trailer is the only record of
/// what a file holds: no hash of ciphertext is checked against anything.
public enum StoredFolder {
    /// What a stored file holds, from its trailer: its blocks' content hash and the version.
    /// Nil when the file has no trailer, or one that names another path (a file moved).
    @Sendable public static func read(path: String, fd: Int32, size: Int64) -> (contentHash: ContentHash, version: BEPVector)? {
        guard let outer = try? EncryptedTrailer.read(fd: fd, size: size), outer.name == path else { return nil }
        return (BEPFileInfo.blocksHash(of: outer.blocks), outer.version)
    }

    /// Readies a scan of the folder for the plan: the directories syncthing makes only to hold
    /// encrypted names leave it (they are nobody's entries), and a file holding the global
    /// content under an older version (metadata sealed anew: the same blocks, another
    /// trailer) counts as the older version, so that it is written again with the new trailer.
    public static func prepare(_ tree: inout LocalTree, global: GlobalIndex) {
        var parents: [String] = []
        var stale: [(String, LocalFile)] = []
        for file in tree.files {
            if file.kind == .directory {
                if EncryptedPath.isParent(file.path) && global.global(file.path) == nil { parents.append(file.path) }
                continue
            }
            guard file.kind == .file, let synced = file.synced, let g = global.global(file.path), !g.file.isDeleted,
                g.file.contentHash == file.contentHash, synced.version.compare(g.file.version) != .equal
            else { continue }
            var older = file
            let marker = BEPFileInfo.blocksHash(ofHashes: [file.contentHash, FolderScanner.unreadableStoredFile])
            older.contentHash = marker
            older.synced = SyncedVersion(version: synced.version, contentHash: marker)
            stale.append((file.path, older))
        }
        for path in parents { tree[path] = nil }
        for (path, file) in stale { tree[path] = file }
    }
}

extension StoredFolder {
    /// What this device announces of a folder it holds as ciphertext: each global entry it
    /// holds, as the trusted device sent it (sealed FileInfo, blocks, version), so that the
    /// other trusted devices count it and pull from it. Nothing else: an entry not held yet is
    /// not announced (one without its sealed FileInfo would not open on the peers, and an
    /// untrusted device never announces anything of its own).
    /// - Parameter scope: only these paths (a service's round); nil: every global path.
    public static func forEachAnnounced(
        log: IndexLog, local: LocalTree, only scope: Set<String>? = nil, _ body: (BEPFileInfo) throws -> Void
    ) throws {
        func one(_ g: GlobalEntry) throws {
            guard !g.file.isInvalid, holds(g.file, local[g.path]) else { return }
            var info = try log.fileInfo(of: g.file)
            info.invalid = false
            try body(info)
        }
        if let scope {
            for path in scope { if let g = log.index.global(path) { try one(g) } }
        } else {
            try log.index.forEachGlobal { try one($0) }
        }
    }

    /// Whether the disk holds the global entry `file`: a deletion nothing, a directory a
    /// directory, a file whose trailer is this very version.
    static func holds(_ file: FileEntry, _ here: LocalFile?) -> Bool {
        if file.isDeleted { return here == nil }
        switch file.type {
        case .directory: return here?.kind == .directory
        case .file:
            guard let here, here.kind == .file, here.contentHash == file.contentHash, let synced = here.synced else { return false }
            return synced.version.compare(file.version) == .equal
        default: return false
        }
    }
}
