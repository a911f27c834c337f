import KaitenErrors
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Crash-safe file replacement: write a temporary file beside the target, fsync it, rename it
/// over the target, fsync the directory. A crash leaves either the old content or the new,
/// never a mix, and never a half-written file under the real name.
public enum AtomicFile {
    private static let writes = Atomic<Int>(0)

    /// Replaces (or creates) `path` with `bytes`, with permission bits `mode`.
    /// - Parameter exclusive: when true, fail if `path` already exists instead of replacing it.
    public static func write(
        _ bytes: some Collection<UInt8>, to path: String, mode: mode_t = 0o644, exclusive: Bool = false
    ) throws(FileWriteError) {
        let directory = (path as NSString).deletingLastPathComponent
        let base = (path as NSString).lastPathComponent
        // Unique per write, not only per process: two threads of one process (a service's
        // round and a plan asked on its control socket) may replace the same file at once.
        let serial = writes.add(1, ordering: .relaxed).newValue
        let temp = (directory as NSString).appendingPathComponent(".\(base).kaiten-\(getpid())-\(serial).tmp")
        let fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw failure(path, "cannot create temporary file: \(errnoText())") }
        var ok = false
        defer {
            if !ok { unlink(temp) }
        }
        let data = Array(bytes)
        var written = 0
        while written < data.count {
            let n = data[written...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                let text = errnoText()
                close(fd)
                throw failure(path, "write failed: \(text)")
            }
            written += n
        }
        // The mode given to open() is filtered by the umask; secrets must end up exactly at `mode`.
        fchmod(fd, mode)
        guard fsync(fd) == 0 else {
            let text = errnoText()
            close(fd)
            throw failure(path, "fsync failed: \(text)")
        }
        close(fd)
        if exclusive {
            // link() fails if the target exists, so two writers cannot both win.
            guard link(temp, path) == 0 else {
                throw failure(path, errno == EEXIST ? "already exists" : "cannot create: \(errnoText())")
            }
            unlink(temp)
        } else {
            guard rename(temp, path) == 0 else { throw failure(path, "rename failed: \(errnoText())") }
        }
        ok = true
        // In place, but durable only once its directory is: a failed flush is said, not hidden.
        let flushed = syncDirectory(directory.isEmpty ? "." : directory)
        guard flushed == 0 else { throw failure(path, "written, but its directory could not be flushed to disk: \(String(cString: strerror(flushed)))") }
    }

    /// Flushes a directory's entries (a rename or unlink is durable only once its directory is);
    /// 0, or the errno.
    @discardableResult
    public static func syncDirectory(_ directory: String) -> Int32 {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        return fsync(fd) == 0 ? 0 : errno
    }

    private static func failure(_ path: String, _ message: String) -> FileWriteError {
        FileWriteError(file: path, message: message)
    }

    package static func errnoText() -> String { String(cString: strerror(errno)) }
}

/// A file that could not be written whole and durable: which, and why.
public struct FileWriteError: KaitenError, Equatable {
    public let file: String
    public let message: String

    public init(file: String, message: String) {
        self.file = file
        self.message = message
    }

    public var location: String? { file }
}
