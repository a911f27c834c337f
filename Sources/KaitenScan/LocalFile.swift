import KaitenProtocol

/// One entry of a folder on this machine, as the scan found it.
public struct LocalFile: Sendable, Equatable {
    public enum Kind: UInt8, Sendable {
        case file = 0
        case directory = 1
        case symlink = 2
    }

    /// Folder-relative, `/`-separated, NFC.
    public var path: String
    public var kind: Kind
    public var size: Int64
    /// Modification time in nanoseconds since the epoch.
    public var modifiedNs: Int64
    public var inode: UInt64
    /// Permission bits (mode & 0o7777).
    public var permissions: UInt32
    /// A regular file's content identity (syncthing's `blocks_hash` for `blockSize`).
    public var contentHash: ContentHash
    public var blockSize: Int32
    /// A regular file's blocks: the local block index the puller copies from.
    public var blocks: [LocalBlock]
    public var symlinkTarget: String
    /// The global version Kaiten last wrote here or confirmed equal, and its content: how a local
    /// edit is told apart from a remote change. Nil when Kaiten never synced this path.
    public var synced: SyncedVersion?

    public init(
        path: String, kind: Kind, size: Int64 = 0, modifiedNs: Int64 = 0, inode: UInt64 = 0, permissions: UInt32 = 0o644,
        contentHash: ContentHash = .zero, blockSize: Int32 = 0, blocks: [LocalBlock] = [], symlinkTarget: String = "",
        synced: SyncedVersion? = nil
    ) {
        self.path = path
        self.kind = kind
        self.size = size
        self.modifiedNs = modifiedNs
        self.inode = inode
        self.permissions = permissions
        self.contentHash = contentHash
        self.blockSize = blockSize
        self.blocks = blocks
        self.symlinkTarget = symlinkTarget
        self.synced = synced
    }

    /// Whether the file on disk still has the size, mtime, inode and type this record was made
    /// from: then its blocks need not be read again.
    func sameStat(as other: LocalFile) -> Bool {
        kind == other.kind && size == other.size && modifiedNs == other.modifiedNs && inode == other.inode
    }
}

/// One block of a local file.
public struct LocalBlock: Sendable, Equatable {
    public var hash: ContentHash
    public var weakHash: UInt32
    public var size: Int32

    public init(hash: ContentHash, weakHash: UInt32, size: Int32) {
        self.hash = hash
        self.weakHash = weakHash
        self.size = size
    }
}

/// A global version Kaiten holds locally.
public struct SyncedVersion: Sendable, Equatable {
    public var version: BEPVector
    public var contentHash: ContentHash

    public init(version: BEPVector, contentHash: ContentHash) {
        self.version = version
        self.contentHash = contentHash
    }
}

/// A folder on this machine: every entry by path.
public struct LocalTree: Sendable {
    public var entries: [String: LocalFile]

    public init(entries: [String: LocalFile] = [:]) {
        self.entries = entries
    }

    public subscript(path: String) -> LocalFile? {
        get { entries[path] }
        set { entries[path] = newValue }
    }

    public var count: Int { entries.count }
}
