import Foundation
import KaitenTransfer
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSync
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The file operations the actions make, each re-checking what the plan saw.
extension Applier {
    /// Moves a local copy that lost a conflict to syncthing's conflict name beside it, after
    /// checking it is what the plan saw; returns the new name.
    static func moveAsideForConflict(root: String, name: String, planned: LocalFile?, winner: UInt64) throws(ApplyError) -> String {
        try SafePath.validate(name)
        try SafePath.prepareParentsExisting(root: root, name: name)
        try checkUnchanged(root: root, name: name, planned: planned)
        var now = time(nil)
        var parts = tm()
        localtime_r(&now, &parts)
        let copy = LocalChange.conflictCopyName(
            name, year: Int(parts.tm_year) + 1900, month: Int(parts.tm_mon) + 1, day: Int(parts.tm_mday), hour: Int(parts.tm_hour),
            minute: Int(parts.tm_min), second: Int(parts.tm_sec), winner: winner)
        var info = stat()
        guard lstat(root + "/" + copy, &info) != 0 else {
            throw ApplyError(.changedLocally, path: name, "\(copy) exists already; kept as it is, apply again in a second")
        }
        guard rename(root + "/" + name, root + "/" + copy) == 0 else {
            throw ApplyError(.io, path: name, "cannot move it aside as \(copy): \(String(cString: strerror(errno)))")
        }
        try SafePath.syncParent(of: root + "/" + name, name: name)
        return copy
    }

    /// Sets permission bits on a file or directory that is not a symlink (checked just before).
    static func setMode(_ full: String, _ mode: UInt32, name: String) throws(ApplyError) {
        var info = stat()
        guard lstat(full, &info) == 0 else { throw ApplyError(.changedLocally, path: name, "gone since the plan") }
        guard info.st_mode & S_IFMT != S_IFLNK else { throw ApplyError(.unsafePath, path: name, "is a symlink; its target is left alone") }
        guard chmod(full, mode_t(mode)) == 0 else {
            throw ApplyError(.io, path: name, "cannot set permissions: \(String(cString: strerror(errno)))")
        }
    }

    /// The pulls in turn from each directory (the first of each, then the second, …), each
    /// directory's in plan order. Creating a file takes its directory's lock: with 64 files in
    /// flight from one directory, a pull of many small files spent a tenth of its CPU spinning
    /// on that lock (perf: `open(O_CREAT)`, `down_write`); spread over directories, they rarely meet.
    static func interleavedByDirectory(_ pulls: [Action]) -> [Action] {
        var order: [Substring] = []
        var byDirectory: [Substring: [Action]] = [:]
        for pull in pulls {
            let directory = pull.path.lastIndex(of: "/").map { pull.path[..<$0] } ?? ""
            if byDirectory[directory] == nil { order.append(directory) }
            byDirectory[directory, default: []].append(pull)
        }
        guard order.count > 1 else { return pulls }
        var queues = order.map { byDirectory[$0]![...] }
        var interleaved: [Action] = []
        interleaved.reserveCapacity(pulls.count)
        while interleaved.count < pulls.count {
            for i in queues.indices {
                if let next = queues[i].popFirst() { interleaved.append(next) }
            }
        }
        return interleaved
    }

    /// The path is still what the plan saw: absent if it was absent, else the same kind, size,
    /// mtime and inode (or, failing that, the same content).
    static func checkUnchanged(root: String, name: String, planned: LocalFile?) throws(ApplyError) {
        var info = stat()
        let exists = lstat(root + "/" + name, &info) == 0
        guard let planned else {
            if exists { throw ApplyError(.changedLocally, path: name, "appeared locally since the plan; left untouched") }
            return
        }
        guard exists else { return }
        let kind: LocalFile.Kind = info.st_mode & S_IFMT == S_IFDIR ? .directory : info.st_mode & S_IFMT == S_IFLNK ? .symlink : .file
        // A symlink is its target: the scan records no size for it (a link's st_size is its
        // target's length), so compare what it points at, dangling or not.
        if kind == .symlink && planned.kind == .symlink {
            if FolderScanner.readLink(root + "/" + name) == planned.symlinkTarget { return }
            throw ApplyError(.changedLocally, path: name, "the symlink points elsewhere since the plan; left untouched")
        }
        let modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        if kind == planned.kind && Int64(info.st_size) == planned.size && modified == planned.modifiedNs && UInt64(info.st_ino) == planned.inode {
            return
        }
        if kind == .file && planned.kind == .file && planned.blockSize > 0 {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
            defer { buffer.deallocate() }
            if let (_, hash) = try? FolderScanner.hashFile(root + "/" + name, blockSize: Int(planned.blockSize), buffer: buffer),
                hash == planned.contentHash
            {
                return
            }
        }
        throw ApplyError(.changedLocally, path: name, "changed locally since the plan; left untouched")
    }
}
