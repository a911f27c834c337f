import KaitenProtocol

/// One device's announcement of one path, without its block list.
///
/// Block lists are most of an index's bytes and a plan never needs them; they stay in the log
/// and ``IndexLog/blocks(of:)`` reads them when a pull does.
public struct FileEntry: Sendable, Equatable {
    public var name: String
    public var type: BEPFileInfoType
    public var size: Int64
    public var permissions: UInt32
    public var modifiedS: Int64
    public var modifiedNs: Int32
    public var modifiedBy: UInt64
    public var isDeleted: Bool
    public var isInvalid: Bool
    public var noPermissions: Bool
    public var version: BEPVector
    public var sequence: Int64
    public var blockSize: Int32
    public var blockCount: Int32
    public var symlinkTarget: String
    /// The content identity of a live regular file (``BEPFileInfo/contentHash``, computed by
    /// Kaiten from the blocks, never the peer's own `blocks_hash`); zero otherwise.
    /// Equal hashes mean equal content, so a plan compares local files without block lists.
    public var contentHash: ContentHash
    /// Where the record holding this entry's blocks sits in the log.
    public var recordOffset: Int64
    public var recordLength: Int32

    init(_ file: BEPFileInfo, recordOffset: Int64, recordLength: Int32) {
        name = file.name
        type = file.type
        size = file.size
        permissions = file.permissions
        modifiedS = file.modifiedS
        modifiedNs = file.modifiedNs
        modifiedBy = file.modifiedBy
        isDeleted = file.deleted
        isInvalid = file.invalid
        noPermissions = file.noPermissions
        version = file.version
        sequence = file.sequence
        blockSize = file.blockSize
        blockCount = Int32(clamping: file.blocks.count)
        symlinkTarget = file.symlinkTarget
        contentHash = file.type == .file && !file.deleted && !file.invalid ? file.contentHash : .zero
        self.recordOffset = recordOffset
        self.recordLength = recordLength
    }

    /// Every field as given (a snapshot's record).
    init(
        name: String, type: BEPFileInfoType, size: Int64, permissions: UInt32, modifiedS: Int64, modifiedNs: Int32,
        modifiedBy: UInt64, isDeleted: Bool, isInvalid: Bool, noPermissions: Bool, version: BEPVector, sequence: Int64,
        blockSize: Int32, blockCount: Int32, symlinkTarget: String, contentHash: ContentHash, recordOffset: Int64,
        recordLength: Int32
    ) {
        self.name = name
        self.type = type
        self.size = size
        self.permissions = permissions
        self.modifiedS = modifiedS
        self.modifiedNs = modifiedNs
        self.modifiedBy = modifiedBy
        self.isDeleted = isDeleted
        self.isInvalid = isInvalid
        self.noPermissions = noPermissions
        self.version = version
        self.sequence = sequence
        self.blockSize = blockSize
        self.blockCount = blockCount
        self.symlinkTarget = symlinkTarget
        self.contentHash = contentHash
        self.recordOffset = recordOffset
        self.recordLength = recordLength
    }

    /// An announcement that lives in no log (one that arrived during an apply).
    public init(announced file: BEPFileInfo) {
        self.init(file, recordOffset: 0, recordLength: 0)
    }

    /// Whether this is a link (including the deprecated symlink types).
    public var isSymlink: Bool { type == .symlink || type == .symlinkFile || type == .symlinkDirectory }

    /// Syncthing's WinsConflict, for concurrent versions: the valid one beats an invalid one;
    /// under the 1.x rule (lib/protocol/bep_extensions.go at v1.19.2) a modification beats a
    /// deletion; then the newer mtime (a deletion's is when it was deleted), then the version
    /// vector's tie-break. 2.0 dropped the modification-beats-deletion step
    /// (lib/protocol/bep_fileinfo.go at v2.1.3).
    public func winsConflict(over other: FileEntry, rule: ConflictRule = .syncthing1) -> Bool {
        if isInvalid != other.isInvalid { return !isInvalid }
        if rule == .syncthing1 {
            if !isDeleted && other.isDeleted { return true }
            if isDeleted && !other.isDeleted { return false }
        }
        if (modifiedS, modifiedNs) != (other.modifiedS, other.modifiedNs) {
            return (modifiedS, modifiedNs) > (other.modifiedS, other.modifiedNs)
        }
        return version.compare(other.version) == .concurrentGreater
    }
}

/// How concurrent versions of a path are ordered: the rule the peers' syncthing generation uses.
public enum ConflictRule: String, Sendable {
    /// Syncthing 1.x: a modification always beats a deletion, then the newer mtime wins.
    case syncthing1
    /// Syncthing 2.x: the newer mtime wins, deletion or not.
    case syncthing2
}
