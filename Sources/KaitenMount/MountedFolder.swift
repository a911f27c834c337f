import Foundation

/// A name in a directory, with its attributes when they are known without more work.
public typealias MountedFolderEntry = (name: String, attributes: MountAttributes?)

/// What the file system asks of the folder it shows. The FUSE host (``FuseMount``) only
/// translates the kernel's requests into these calls and their answers back; every decision
/// (what a name is, where its bytes come from, what a pin does) is the folder's, which the
/// use-case layer gives.
public protocol MountedFolder: AnyObject, Sendable {
    /// A path's attributes; `""` is the root.
    func attributes(of path: String) throws(MountError) -> MountAttributes
    /// The names directly inside a directory, each with its attributes when they are known
    /// without more work (a listing then answers the kernel's lookups too).
    func entries(in directory: String) throws(MountError) -> [MountedFolderEntry]
    /// Opens a file for reading, or for writing too.
    func open(_ path: String, writing: Bool) throws(MountError) -> any MountedFile
    /// A symbolic link's target.
    func linkTarget(of path: String) throws(MountError) -> String
    /// The extended attributes a path has, by name.
    func extendedAttributeNames(of path: String) throws(MountError) -> [String]
    func extendedAttribute(_ name: String, of path: String) throws(MountError) -> [UInt8]
    func setExtendedAttribute(_ name: String, of path: String, to value: [UInt8]) throws(MountError)
    /// The file system's figures as `df` shows them (those of the disk the folder is on).
    func spaceFigures() -> statvfs?

    // Changes of the tree. A folder that takes none refuses them all with EROFS.
    func create(_ path: String, permissions: UInt32) throws(MountError) -> any MountedFile
    func makeDirectory(_ path: String, permissions: UInt32) throws(MountError)
    func makeSymlink(_ path: String, target: String) throws(MountError)
    func removeFile(_ path: String) throws(MountError)
    func removeDirectory(_ path: String) throws(MountError)
    /// `replace`: whether an existing `to` may be replaced (rename(2)'s default).
    func rename(_ from: String, to: String, replace: Bool) throws(MountError)
    func truncate(_ path: String, to size: Int64) throws(MountError)
    func setPermissions(_ path: String, _ permissions: UInt32) throws(MountError)
    func setModified(_ path: String, nanoseconds: Int64) throws(MountError)
}

extension MountedFolder {
    public func create(_ path: String, permissions: UInt32) throws(MountError) -> any MountedFile { throw MountError(EROFS) }
    public func makeDirectory(_ path: String, permissions: UInt32) throws(MountError) { throw MountError(EROFS) }
    public func makeSymlink(_ path: String, target: String) throws(MountError) { throw MountError(EROFS) }
    public func removeFile(_ path: String) throws(MountError) { throw MountError(EROFS) }
    public func removeDirectory(_ path: String) throws(MountError) { throw MountError(EROFS) }
    public func rename(_ from: String, to: String, replace: Bool) throws(MountError) { throw MountError(EROFS) }
    public func truncate(_ path: String, to size: Int64) throws(MountError) { throw MountError(EROFS) }
    public func setPermissions(_ path: String, _ permissions: UInt32) throws(MountError) { throw MountError(EROFS) }
    public func setModified(_ path: String, nanoseconds: Int64) throws(MountError) { throw MountError(EROFS) }
}

/// An open file of the mount.
public protocol MountedFile: AnyObject, Sendable {
    /// Up to `count` bytes at `offset` (fewer only at the end of the file).
    func read(at offset: Int64, count: Int) async throws(MountError) -> Data
    /// What the content read through this file is (the global version's hash, or a local file's
    /// inode, size and time): a file opened again with the same tag may be read from the kernel's
    /// page cache; nil when that cannot be said.
    var contentTag: String? { get }
    /// Writes `bytes` at `offset`; returns how many were written.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(MountError) -> Int
    /// Makes what was written durable (fsync).
    func sync() throws(MountError)
    func close()
}

extension MountedFile {
    public func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(MountError) -> Int { throw MountError(EROFS) }
    public func sync() throws(MountError) {}
}

/// A path's attributes as the mount shows them.
public struct MountAttributes: Sendable, Equatable {
    public enum Kind: Sendable { case file, directory, symlink }
    public var kind: Kind
    public var size: Int64
    /// The permission bits (0o777 and below).
    public var permissions: UInt32
    /// Nanoseconds since the epoch.
    public var modifiedNs: Int64
    /// What of it is on this device's disk (the local file, or its cached blocks): what `du`
    /// counts, so a walk over the mount tells what it really takes.
    public var bytesHere: Int64

    public init(kind: Kind, size: Int64, permissions: UInt32, modifiedNs: Int64, bytesHere: Int64? = nil) {
        self.kind = kind
        self.size = size
        self.permissions = permissions
        self.modifiedNs = modifiedNs
        self.bytesHere = bytesHere ?? size
    }
}

/// A request refused: the errno the caller sees, and why in words for the mount's log (nil when
/// the answer is ordinary, such as a name that does not exist).
public struct MountError: Error, Sendable, Equatable {
    public let code: Int32
    public let reason: String?

    public init(_ code: Int32, _ reason: String? = nil) {
        self.code = code
        self.reason = reason
    }
}
