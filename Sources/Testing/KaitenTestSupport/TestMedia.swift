import Foundation

/// Test pictures and videos, made by the tests themselves with real tools from Debian (ffmpeg
/// encodes, exiftool writes EXIF), never by the code under test and never committed as blobs.
/// scripts/test installs both.
public enum TestMedia {
    public struct Missing: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    static func tool(_ name: String, package: String) throws -> String {
        guard let path = ProcessRunner.which(name) else {
            throw Missing(description: "\(name) is not installed (scripts/test installs \(package)): the media tests make their files with it")
        }
        return path
    }

    static func run(_ name: String, package: String, _ arguments: [String]) throws {
        try FileManager.default.createDirectory(
            atPath: ((arguments.last ?? "") as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let result = try ProcessRunner.run(try tool(name, package: package), arguments)
        guard result.status == 0 else { throw Missing(description: "\(name) \(arguments.joined(separator: " ")): \(result.stderr)") }
    }

    public static func ffmpeg(_ arguments: [String]) throws {
        try run("ffmpeg", package: "ffmpeg", ["-loglevel", "error", "-y"] + arguments)
    }

    /// A JPEG of ffmpeg's test pattern (plus noise, so it does not compress to nothing).
    public static func jpeg(_ path: String, width: Int, height: Int, quality: Int = 2, noise: Bool = false) throws {
        let source = noise ? "testsrc=size=\(width)x\(height),noise=alls=40:allf=t" : "testsrc=size=\(width)x\(height)"
        try ffmpeg(["-f", "lavfi", "-i", source, "-frames:v", "1", "-q:v", "\(quality)", path])
    }

    public static func png(_ path: String, width: Int, height: Int, color: String? = nil) throws {
        let source = color.map { "color=\($0):s=\(width)x\(height)" } ?? "testsrc=size=\(width)x\(height)"
        try ffmpeg(["-f", "lavfi", "-i", source, "-frames:v", "1", path])
    }

    /// An H.264 MP4 of `seconds` at `bitrate` (e.g. "4M"); moov at the end, as cameras write it,
    /// unless `faststart`.
    /// With `noise` the pictures do not compress: the file is as large as the bitrate says.
    public static func video(
        _ path: String, seconds: Int, width: Int = 640, height: Int = 360, bitrate: String = "2M", noise: Bool = false, faststart: Bool = false
    ) throws {
        let source = "testsrc=duration=\(seconds):size=\(width)x\(height):rate=25" + (noise ? ",noise=alls=30:allf=t" : "")
        try ffmpeg(
            ["-f", "lavfi", "-i", source, "-c:v", "libx264", "-preset", "ultrafast",
             "-pix_fmt", "yuv420p", "-b:v", bitrate]
                + (faststart ? ["-movflags", "+faststart"] : []) + [path])
    }

    /// An MP4 with sound and no picture.
    public static func audioOnly(_ path: String) throws {
        try ffmpeg(["-f", "lavfi", "-i", "sine=frequency=440:duration=2", "-c:a", "aac", path])
    }

    /// A HEIC made from a JPEG by libheif's heif-enc (its EXIF copied), with an embedded
    /// thumbnail of `thumbnail` pixels on its long side.
    public static func heic(_ path: String, from jpeg: String, thumbnail: Int = 320) throws {
        try run("heif-enc", package: "libheif-examples", ["-q", "50", "-t", "\(thumbnail)", "-o", path, jpeg])
    }

    /// Writes EXIF into a JPEG with exiftool: an embedded thumbnail (a JPEG file), the
    /// orientation tag, the capture date and time zone.
    public static func exif(_ path: String, thumbnail: String? = nil, orientation: Int? = nil, dateTimeOriginal: String? = nil, offset: String? = nil)
        throws
    {
        var arguments = ["-q", "-overwrite_original"]
        if let thumbnail { arguments.append("-ThumbnailImage<=\(thumbnail)") }
        if let orientation { arguments.append("-Orientation#=\(orientation)") }
        if let dateTimeOriginal { arguments.append("-DateTimeOriginal=\(dateTimeOriginal)") }
        if let offset { arguments.append("-OffsetTimeOriginal=\(offset)") }
        try run("exiftool", package: "libimage-exiftool-perl", arguments + [path])
    }
}
