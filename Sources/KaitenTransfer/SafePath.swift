import Crypto
import Foundation
import KaitenFiles
import KaitenProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Name checks made before any file-system call, so nothing is ever written outside a folder
/// and no symlink is ever followed (bep-brief §6).
public enum SafePath {
    /// A folder-relative name as BEP allows it: NFC, `/`-separated, clean, not internal.
    public static func validate(_ name: String) throws(ApplyError) {
        guard isClean(name) else { throw ApplyError(.unsafePath, path: name, "not a clean folder-relative name") }
        // Byte comparison: String's == treats NFD and NFC as equal. ASCII is NFC as it is, and
        // most names are ASCII: the normalisation (a third of a deselect's checks) is skipped.
        guard WireName.isASCII(name) || name.utf8.elementsEqual(name.precomposedStringWithCanonicalMapping.utf8) else {
            throw ApplyError(.unsafePath, path: name, "not in Unicode NFC")
        }
        let utf8 = name.utf8
        let first = utf8.firstIndex(of: UInt8(ascii: "/")).map { Substring(utf8[..<$0]) } ?? Substring(name)
        guard first != ".stfolder", first != ".stignore", first != ".stversions" else {
            throw ApplyError(.unsafePath, path: name, "a name syncthing reserves")
        }
        let base = lastComponent(name)
        guard !(base.hasPrefix(".syncthing.") && base.hasSuffix(".tmp")), !base.hasPrefix("~syncthing~") else {
            throw ApplyError(.unsafePath, path: name, "a temporary-file name")
        }
    }

    /// The part of a clean name after its last `/` (the whole name when it has none). Byte by
    /// byte: a walk over a mounted folder asks it of every name, and NSString's is slow.
    public static func lastComponent(_ name: String) -> Substring {
        let utf8 = name.utf8
        guard let slash = utf8.lastIndex(of: UInt8(ascii: "/")) else { return Substring(name) }
        return Substring(utf8[utf8.index(after: slash)...])
    }

    /// `path.Clean(name) == name` and relative: not empty, no leading or trailing `/`, no NUL,
    /// no empty, `.` or `..` component.
    public static func isClean(_ name: String) -> Bool {
        var length = 0  // of the component so far
        var dots = 0  // how many of its bytes are dots
        for byte in name.utf8 {
            switch byte {
            case 0: return false
            case UInt8(ascii: "/"):
                // An empty, `.` or `..` component (a leading `/` is an empty first one).
                if length == 0 || dots == length && length <= 2 { return false }
                length = 0
                dots = 0
            case UInt8(ascii: "."):
                length += 1
                dots += 1
            default:
                length += 1
            }
        }
        // The last component: empty when the name is empty or ends in `/`.
        return !(length == 0 || dots == length && length <= 2)
    }

    /// Makes sure every parent of `name` below `root` is a real directory (creating missing ones
    /// with mode 0755), never a symlink.
    public static func prepareParents(root: String, name: String) throws(ApplyError) {
        var current = root
        let parts = WireName.components(name).dropLast()
        for part in parts {
            current += "/" + part
            var info = stat()
            if lstat(current, &info) == 0 {
                guard info.st_mode & S_IFMT == S_IFDIR else {
                    throw ApplyError(
                        .unsafePath, path: name,
                        "\(current) is \(info.st_mode & S_IFMT == S_IFLNK ? "a symlink" : "not a directory"); nothing is written through it")
                }
            } else if errno == ENOENT {
                guard mkdir(current, 0o755) == 0 || errno == EEXIST else {
                    throw ApplyError(.io, path: name, "cannot create \(current): \(String(cString: strerror(errno)))")
                }
            } else {
                throw ApplyError(.io, path: name, "cannot inspect \(current): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Where a pull writes before renaming (lib/fs/tempname.go): `.syncthing.NAME.tmp` beside
    /// the target, or a hash of NAME when NAME is longer than 145 bytes.
    public static func temporaryName(for name: String) -> String {
        let directory = (name as NSString).deletingLastPathComponent
        let base = (name as NSString).lastPathComponent
        let middle = base.utf8.count > 145 ? ContentHash(SHA256.hash(data: Array(base.utf8))).hex : base
        let temp = ".syncthing." + middle + ".tmp"
        return directory.isEmpty ? temp : directory + "/" + temp
    }

    /// syncthing's conflict copy name: `NAME.sync-conflict-YYYYMMDD-HHMMSS-SHORTID.EXT`
    /// (bep-brief §5.6), local time.
    public static func conflictName(for name: String, date: Date = Date(), shortID: String) -> String {
        let directory = (name as NSString).deletingLastPathComponent
        let base = (name as NSString).lastPathComponent
        var stem = base
        var ext = ""
        if let dot = base.lastIndex(of: ".") {
            stem = String(base[..<dot])
            ext = String(base[dot...])
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = .current
        formatter.dateFormat = "yyyyMMdd-HHmmss"
        let renamed = "\(stem).sync-conflict-\(formatter.string(from: date))-\(shortID)\(ext)"
        return directory.isEmpty ? renamed : directory + "/" + renamed
    }

    /// fsyncs each directory once, all at the same time off the cooperative pool (apply's
    /// renames and deletions are made durable this way, per directory rather than per file).
    /// fsyncs each directory; the ones that could not be flushed, with the errno.
    @discardableResult
    public static func syncDirectories(_ directories: Set<String>) async -> [String: Int32] {
        await withTaskGroup(of: (String, Int32).self) { group in
            for directory in directories {
                group.addTask { (directory, (try? await Blocking.run { syncDirectory(directory) }) ?? EIO) }
            }
            var failed: [String: Int32] = [:]
            for await (directory, result) in group where result != 0 { failed[directory] = result }
            return failed
        }
    }

    /// fsyncs a directory, so a rename or unlink in it is durable; 0, or the errno.
    @discardableResult
    public static func syncDirectory(_ path: String) -> Int32 { AtomicFile.syncDirectory(path) }
}

extension SafePath {
    /// Deletes a file. In a directory without write permission, as syncthing does, the
    /// directory is made writable for the moment and its mode put back afterwards.
    public static func unlinkMakingWritable(_ full: String, name: String) throws(ApplyError) {
        if unlink(full) == 0 || errno == ENOENT { return }
        let firstError = errno
        let directory = (full as NSString).deletingLastPathComponent
        var info = stat()
        guard firstError == EACCES || firstError == EPERM, lstat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR,
            info.st_mode & 0o200 == 0, chmod(directory, (info.st_mode & 0o7777) | 0o700) == 0
        else {
            throw ApplyError(.io, path: name, "cannot delete: \(String(cString: strerror(firstError)))")
        }
        let removed = unlink(full) == 0 || errno == ENOENT
        let secondError = errno
        chmod(directory, info.st_mode & 0o7777)
        guard removed else { throw ApplyError(.io, path: name, "cannot delete: \(String(cString: strerror(secondError)))") }
    }

    /// Every parent of `name` below `root` exists as a real directory (not a symlink); nothing is
    /// created.
    public static func prepareParentsExisting(root: String, name: String) throws(ApplyError) {
        var current = root
        for part in WireName.components(name).dropLast() {
            current += "/" + part
            var info = stat()
            guard lstat(current, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                throw ApplyError(.unsafePath, path: name, "\(current) is not a real directory; nothing is deleted through it")
            }
        }
    }
}

extension SafePath {
    /// Flushes the directory `name` was put in; a failure is the write's failure (the entry is
    /// in place, but a crash could still lose it).
    public static func syncParent(of full: String, name: String) throws(ApplyError) {
        let flushed = syncDirectory((full as NSString).deletingLastPathComponent)
        guard flushed == 0 else {
            throw ApplyError(.io, path: name, "in place, but its directory could not be flushed to disk: \(String(cString: strerror(flushed)))")
        }
    }
}
