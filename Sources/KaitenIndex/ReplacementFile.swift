import Foundation
import KaitenFiles

#if canImport(Glibc)
import Glibc
#endif

/// A file written under a temporary name beside its final path and put in place whole:
/// written, fsynced, renamed over the path, the directory fsynced. A crash at any moment leaves
/// the old file or the new one at the path; an abandoned one leaves nothing behind.
/// (A compacted log and an index snapshot are written this way.)
final class ReplacementFile {
    let path: String
    let temp: String
    private var fd: Int32
    private var committed = false
    /// Bytes appended by ``write(_:)`` so far.
    private(set) var written: Int64 = 0

    init(replacing path: String, temp: String) throws(IndexLogError) {
        self.path = path
        self.temp = temp
        fd = Glibc.open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw IndexLogError(.io, file: temp, "cannot create: \(String(cString: strerror(errno)))") }
    }

    deinit { abandon() }

    func write(_ bytes: [UInt8]) throws(IndexLogError) {
        var done = 0
        while done < bytes.count {
            let n = bytes[done...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw IndexLogError(.io, file: temp, "write failed: \(String(cString: strerror(errno)))") }
            done += n
        }
        written += Int64(bytes.count)
    }

    /// Overwrites bytes already written, at `offset` (a header filled in last).
    func write(_ bytes: [UInt8], at offset: Int64) throws(IndexLogError) {
        precondition(offset + Int64(bytes.count) <= written, "only bytes already written are overwritten")
        var done = 0
        while done < bytes.count {
            let n = bytes[done...].withUnsafeBytes { Glibc.pwrite(fd, $0.baseAddress, $0.count, off_t(offset) + off_t(done)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw IndexLogError(.io, file: temp, "write failed: \(String(cString: strerror(errno)))") }
            done += n
        }
    }

    /// fsync, rename over the path, fsync the directory.
    func commit() throws(IndexLogError) {
        guard fsync(fd) == 0 else { throw IndexLogError(.io, file: temp, "fsync failed: \(String(cString: strerror(errno)))") }
        Glibc.close(fd)
        fd = -1
        guard rename(temp, path) == 0 else {
            throw IndexLogError(.io, file: path, "rename failed: \(String(cString: strerror(errno)))")
        }
        committed = true
        let directory = (path as NSString).deletingLastPathComponent
        let flushed = AtomicFile.syncDirectory(directory.isEmpty ? "." : directory)
        guard flushed == 0 else {
            throw IndexLogError(.io, file: path, "in place, but its directory could not be flushed to disk: \(String(cString: strerror(flushed)))")
        }
    }

    /// Closes and removes the temporary file unless it was put in place.
    func abandon() {
        if fd >= 0 {
            Glibc.close(fd)
            fd = -1
        }
        if !committed {
            unlink(temp)
            committed = true  // once
        }
    }
}
