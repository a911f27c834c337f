import KaitenErrors
import Foundation
import KaitenConfig
import KaitenProtocol
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Thumbnails by content, in Sushitrain's disk-cache layout (its Docs/thumbnails.md), so that
/// a phone running Sushitrain and Kaiten share one cache through a synced folder: the file's
/// *blocks hash* in base64, lower-cased, every character outside `a-z0-9` removed; its first
/// two characters are two directory levels; `.jpg`; neither side larger than 255 pixels.
///
/// The blocks hash is syncthing 2.x's (SHA-256 over the block hashes; Kaiten's content hash,
/// ``BEPFileInfo/blocksHash(of:)``), the one a Sushitrain device computes for its own files and
/// receives from 2.x peers. Sizes other than 255 are Kaiten's own and live under `Npx/`, which
/// Sushitrain never reads.
public struct ThumbnailCache: Sendable {
    /// Sushitrain's thumbnail size: the only one its cache layout holds.
    public static let sharedSize = 255

    public let root: String

    public init(root: String) {
        self.root = (root as NSString).standardizingPath
    }

    /// The name a thumbnail of content `hash` has under the cache root, for `size`.
    public static func relativePath(for hash: ContentHash, size: Int = sharedSize) -> String {
        relativePath(base64: Data(hash.bytes).base64EncodedString(), size: size)
    }

    /// The same from the hash as base64 text (what Sushitrain's `Entry.BlocksHash()` returns).
    public static func relativePath(base64: String, size: Int = sharedSize) -> String {
        let key = base64.lowercased().filter { ("a"..."z").contains($0) || ("0"..."9").contains($0) }
        // A SHA-256 in base64 keeps ~40 of its 44 characters; a test's short key needs 3.
        let characters = Array(key.count >= 3 ? key : key + String(repeating: "0", count: 3 - key.count))
        let shard = "\(characters[0])/\(characters[1])/\(String(characters[2...])).jpg"
        return size == sharedSize ? shard : "\(size)px/\(shard)"
    }

    public func path(for hash: ContentHash, size: Int = sharedSize) -> String {
        (root as NSString).appendingPathComponent(Self.relativePath(for: hash, size: size))
    }

    public func contains(_ hash: ContentHash, size: Int = sharedSize) -> Bool {
        var info = stat()
        return stat(path(for: hash, size: size), &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && info.st_size > 0
    }

    /// A name beside the thumbnail's for writing it: syncthing's own temp-file pattern, which
    /// syncthing and Kaiten never announce when the cache is a synced folder. The directories
    /// it needs are made and counted as in use until ``finished(_:)``.
    public func temporaryPath(for hash: ContentHash, size: Int = sharedSize) throws -> String {
        let final = path(for: hash, size: size)
        let directory = (final as NSString).deletingLastPathComponent
        try Self.directoriesInUse.withLock { inUse in
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            inUse[directory, default: 0] += 1
        }
        let name = (final as NSString).lastPathComponent
        let temp = (directory as NSString).appendingPathComponent(".syncthing.\(name).\(UInt32.random(in: 0...UInt32.max)).tmp")
        unlink(temp)
        return temp
    }

    /// Ends a write begun by ``temporaryPath(for:size:)``, made or not: the directories it made
    /// that hold nothing (a failed thumbnail) are removed, up to the cache root, unless another
    /// write in this process uses them (a failed thumbnail left empty shard directories).
    public func finished(_ temporary: String) {
        let directory = (temporary as NSString).deletingLastPathComponent
        Self.directoriesInUse.withLock { inUse in
            inUse[directory, default: 1] -= 1
            guard inUse[directory]! <= 0 else { return }
            inUse[directory] = nil
            var current = directory
            while current.utf8.starts(with: (root + "/").utf8), inUse[current] == nil, rmdir(current) == 0 {
                current = (current as NSString).deletingLastPathComponent
            }
        }
    }

    /// Shard directories with a thumbnail being written, by path: not removed meanwhile.
    private static let directoriesInUse = Mutex<[String: Int]>([:])

    /// Moves a finished (fsynced) thumbnail into place and syncs its directory. Two writers of
    /// one content make the same picture: the last rename wins, harmlessly.
    public func commit(_ temporary: String, for hash: ContentHash, size: Int = sharedSize) throws {
        let final = path(for: hash, size: size)
        guard rename(temporary, final) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temporary)
            throw MediaError("\(final): cannot move the thumbnail into place: \(why)")
        }
        let directory = open((final as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
    }
}

/// Why a thumbnail (or another media step) failed, in words naming the file.
public struct MediaError: KaitenError {
    public let message: String
    public var location: String? { nil }
    public init(_ message: String) { self.message = message }
}
