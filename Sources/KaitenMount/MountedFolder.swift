import Foundation

/// What the file system asks of the folder it shows. The FUSE host (``FuseMount``) only
/// translates the kernel's requests into these calls and their answers back; every decision
/// (what a name is, where its bytes come from, what a pin does) is the folder's, which the
/// use-case layer gives.
public protocol MountedFolder: AnyObject, Sendable {
    /// A path's attributes; `""` is the root.
    func attributes(of path: String) throws(MountError) -> MountAttributes
    /// The names directly inside a directory.
    func names(in directory: String) throws(MountError) -> [String]
    /// Opens a file for reading.
    func open(_ path: String) throws(MountError) -> any MountedFile
    /// A symbolic link's target.
    func linkTarget(of path: String) throws(MountError) -> String
    /// The extended attributes a path has, by name.
    func extendedAttributeNames(of path: String) throws(MountError) -> [String]
    func extendedAttribute(_ name: String, of path: String) throws(MountError) -> [UInt8]
    func setExtendedAttribute(_ name: String, of path: String, to value: [UInt8]) throws(MountError)
    /// The file system's figures as `df` shows them (those of the disk the folder is on).
    func spaceFigures() -> statvfs?
}

/// An open file of the mount.
public protocol MountedFile: AnyObject, Sendable {
    /// Up to `count` bytes at `offset` (fewer only at the end of the file).
    func read(at offset: Int64, count: Int) async throws(MountError) -> Data
    func close()
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

    public init(kind: Kind, size: Int64, permissions: UInt32, modifiedNs: Int64) {
        self.kind = kind
        self.size = size
        self.permissions = permissions
        self.modifiedNs = modifiedNs
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
