#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KaitenProtocol

/// What a file is, by its name: the thumbnailer decodes images and video frames only.
public enum MediaKind: String, Sendable, Codable {
    case image, video

    static let images: Set<String> = ["jpg", "jpeg", "jpe", "png", "webp", "heic", "heif", "avif", "gif", "tif", "tiff"]
    static let videos: Set<String> = ["mp4", "m4v", "mov", "mkv", "webm", "avi", "3gp", "mts", "m2ts", "mpg", "mpeg", "wmv"]
    static let jpegs: Set<String> = ["jpg", "jpeg", "jpe"]

    /// nil for anything else (a document, a song, a file without an extension).
    public init?(path: String) {
        let ext = Self.extensionOf(path)
        if Self.images.contains(ext) {
            self = .image
        } else if Self.videos.contains(ext) {
            self = .video
        } else {
            return nil
        }
    }

    /// Whether the name says HEIF (HEIC, AVIF): a container whose index says where its embedded
    /// thumbnail is.
    public static func isHEIF(_ path: String) -> Bool { ["heic", "heif", "avif"].contains(extensionOf(path)) }

    /// Whether the name says JPEG: the format that carries an EXIF thumbnail near its start.
    public static func isJPEG(_ path: String) -> Bool { jpegs.contains(extensionOf(path)) }

    static func extensionOf(_ path: String) -> String {
        let name = WireName.components(path).last ?? ""
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        return name[name.index(after: dot)...].lowercased()
    }
}

/// The pictures and videos under a directory, as import and view folders read a source: regular
/// files whose names say media, hidden files and directories (.Trashes, .thumbnails, syncthing's
/// temp files) skipped. nil when the directory cannot be read.
enum MediaWalk {
    static func files(under root: String) -> [(path: String, info: stat)]? {
        guard let walker = FileManager.default.enumerator(atPath: root) else { return nil }
        var found: [(path: String, info: stat)] = []
        while let relative = walker.nextObject() as? String {
            let name = (relative as NSString).lastPathComponent
            if name.hasPrefix(".") {
                if (walker.fileAttributes?[.type] as? FileAttributeType) == .typeDirectory { walker.skipDescendants() }
                continue
            }
            guard MediaKind(path: name) != nil else { continue }
            let full = (root as NSString).appendingPathComponent(relative)
            var info = stat()
            guard lstat(full, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            found.append((full, info))
        }
        return found
    }
}
