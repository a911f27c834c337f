import Foundation
import KaitenConfig

#if canImport(Glibc)
    import Glibc
#endif

/// Keeps what the peers delete or replace, as the folder's `<versioning>` says, the way
/// syncthing keeps it (lib/versioner at v1.19.2): the old file is moved into `.stversions/`
/// (or the folder's `fsPath`) just before it would go. A file deselected here is not versioned:
/// it stays on the peers.
public struct Versioner: Sendable {
    public enum Kind: String, Sendable {
        /// `.stversions/PATH`, the latest replaced version only.
        case trashcan
        /// `.stversions/DIR/NAME~YYYYMMDD-HHMMSS.EXT`, every version.
        case simple
        /// Named as simple. Kaiten keeps every version (it does not thin them out as syncthing's
        /// scheduled cleanup does): keeping more never loses data.
        case staggered
        /// The folder's `command` runs with %FOLDER_PATH% and %FILE_PATH% and must take the file
        /// away; if the file is still there afterwards, nothing else happens to it.
        case external
    }

    public let kind: Kind
    let versionsPath: String
    let command: String

    /// The folder's versioner; nil when the folder keeps no versions (or its type is unknown).
    public init?(folder: FolderConfiguration) {
        guard let kind = Kind(rawValue: folder.versioningType) else { return nil }
        self.kind = kind
        let path = folder.versioningPath.isEmpty ? ".stversions" : folder.versioningPath
        versionsPath = path.hasPrefix("/") ? path : folder.path + "/" + path
        command = folder.versioningParams["command"] ?? ""
    }

    /// The name a version of `name` gets (relative to the versions directory).
    public static func versionName(_ name: String, kind: Kind, at date: Date) -> String {
        guard kind == .simple || kind == .staggered else { return name }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyyMMdd-HHmmss"
        let tag = "~" + formatter.string(from: date)
        let base = (name as NSString).lastPathComponent
        let directory = (name as NSString).deletingLastPathComponent
        // syncthing's TagFilename: the tag goes before the extension.
        let dot = base.lastIndex(of: ".").flatMap { $0 == base.startIndex ? nil : $0 }
        let tagged = dot.map { String(base[..<$0]) + tag + String(base[$0...]) } ?? base + tag
        return directory.isEmpty ? tagged : directory + "/" + tagged
    }

    /// Moves the file at `name` (under `root`) into the versions, or has the external command
    /// take it. Throws, leaving the file where it is, when that cannot be done.
    public func archive(root: String, name: String, now: Date = Date()) throws(ApplyError) {
        let full = root + "/" + name
        if kind == .external {
            try runExternal(root: root, name: name)
            var info = stat()
            guard lstat(full, &info) != 0 else {
                throw ApplyError(.io, path: name, "the external versioning command left the file in place")
            }
            return
        }
        let versioned = Self.versionName(name, kind: kind, at: now)
        var info = stat()
        if lstat(versionsPath, &info) != 0 {
            guard mkdir(versionsPath, 0o755) == 0 || errno == EEXIST else {
                throw ApplyError(.io, path: name, "cannot create \(versionsPath): \(String(cString: strerror(errno)))")
            }
        } else if info.st_mode & S_IFMT != S_IFDIR {
            throw ApplyError(.unsafePath, path: name, "\(versionsPath) is not a directory; nothing is versioned through it")
        }
        try SafePath.prepareParents(root: versionsPath, name: versioned)
        guard rename(full, versionsPath + "/" + versioned) == 0 else {
            throw ApplyError(.io, path: name, "cannot move it into \(versionsPath): \(String(cString: strerror(errno)))")
        }
        try SafePath.syncParent(of: versionsPath + "/" + versioned, name: name)
    }

    private func runExternal(root: String, name: String) throws(ApplyError) {
        guard !command.isEmpty else { throw ApplyError(.io, path: name, "external versioning without a command") }
        // Split on spaces as syncthing does (its own quoting aside), then substitute.
        let parts = command.split(separator: " ").map {
            $0.replacingOccurrences(of: "%FOLDER_PATH%", with: root).replacingOccurrences(of: "%FILE_PATH%", with: name)
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: parts[0])
        process.arguments = Array(parts.dropFirst())
        do {
            try process.run()
        } catch {
            throw ApplyError(.io, path: name, "cannot run the external versioning command: \(error)")
        }
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw ApplyError(.io, path: name, "the external versioning command exited \(process.terminationStatus)")
        }
    }
}
