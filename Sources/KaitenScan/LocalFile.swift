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
///
/// A tree loaded from the scan cache is that file read in place (``ScanImage``) plus, in memory,
/// only what changed since; a tree made by a scan is all in memory. Either way it reads and
/// changes the same: by path, or every entry in turn.
public struct LocalTree: Sendable {
    /// The saved scan this tree was loaded from, read in place; nil for a tree made in memory.
    var base: ScanImage?
    /// Entries set since `base` was saved (every entry, without one).
    var changed: [String: LocalFile]
    /// Paths of `base` removed since.
    var removed: Set<String>
    public private(set) var count: Int

    public init() {
        self.init(entries: [:])
    }

    public init(entries: [String: LocalFile]) {
        base = nil
        changed = entries
        removed = []
        count = entries.count
    }

    init(base: ScanImage) {
        self.base = base
        changed = [:]
        removed = []
        count = base.count
    }

    public subscript(path: String) -> LocalFile? {
        get {
            if let file = changed[path] { return file }
            guard let base, removed.isEmpty || !removed.contains(path), let i = base.index(of: path) else { return nil }
            return base.file(at: i)
        }
        set {
            let inBase = base?.index(of: path) != nil
            let had = changed[path] != nil || (inBase && !removed.contains(path))
            if let newValue {
                changed[path] = newValue
                if inBase { removed.remove(path) }
            } else {
                changed[path] = nil
                if inBase { removed.insert(path) }
            }
            count += (newValue == nil ? 0 : 1) - (had ? 1 : 0)
        }
    }

    public func contains(_ path: String) -> Bool {
        changed[path] != nil || (!removed.contains(path) && base?.index(of: path) != nil)
    }

    /// Every entry, in no particular order. A tree read in place decodes each as it comes.
    public var files: Files { Files(tree: self) }

    /// The entries whose paths start with `prefix` (`dir/` for everything below `dir`).
    public func files(withPrefix prefix: String) -> [LocalFile] {
        var found = changed.values.filter { $0.path.utf8.starts(with: prefix.utf8) }
        if let base {
            for i in base.range(withPrefix: prefix) {
                guard let file = base.file(at: i), changed[file.path] == nil, !removed.contains(file.path) else { continue }
                found.append(file)
            }
        }
        return found
    }

    /// Every entry by path: a copy, for tests and small trees.
    public func dictionary() -> [String: LocalFile] {
        var all: [String: LocalFile] = [:]
        all.reserveCapacity(count)
        for file in files { all[file.path] = file }
        return all
    }

    /// How many entries are held in memory beside the part read in place.
    public var entriesInMemory: Int { changed.count + removed.count }

    /// Gives the pages of the part read in place back to the system (they stay in the page
    /// cache): a service calls this between rounds.
    public func releasePages() { base?.releasePages() }

    public struct Files: Sequence {
        let tree: LocalTree

        public func makeIterator() -> Iterator { Iterator(tree: tree, rest: tree.changed.values.makeIterator()) }

        public struct Iterator: IteratorProtocol {
            let tree: LocalTree
            var index = 0
            var rest: Dictionary<String, LocalFile>.Values.Iterator

            public mutating func next() -> LocalFile? {
                if let base = tree.base {
                    let overridden = !tree.changed.isEmpty || !tree.removed.isEmpty
                    while index < base.count {
                        let i = index
                        index += 1
                        // Changed entries come from memory, after the saved ones.
                        guard let file = base.file(at: i) else { continue }
                        if overridden && (tree.changed[file.path] != nil || tree.removed.contains(file.path)) { continue }
                        return file
                    }
                }
                return rest.next()
            }
        }
    }
}
