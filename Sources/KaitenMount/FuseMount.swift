import CFuse3
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A folder in the file system through libfuse 3: the kernel's requests, taken by libfuse's
/// worker threads, become calls on a ``MountedFolder`` and their answers go back as libfuse
/// wants them. Nothing here decides about files.
///
/// The mount is read-write even for a folder that takes no change (which refuses each with
/// EROFS): `setfattr -n user.kaiten.pin` must reach the folder, and a read-only mount refuses
/// every extended attribute write before it gets here.
public final class FuseMount: @unchecked Sendable {
    public let mountPoint: String
    let folder: any MountedFolder
    let log: @Sendable (String) -> Void
    private let name: String
    private let handles = Mutex<(next: UInt64, open: [UInt64: any MountedFile])>((1, [:]))
    private let stopping = Atomic<Bool>(false)
    /// The content tag each path was last opened with (``MountedFile/contentTag``).
    private let openedTags = Mutex<[String: String]>([:])
    /// The libfuse handle while mounted, as an address (a pointer is not Sendable).
    private let fuse = Mutex<UInt>(0)

    /// - Parameter name: what `mount` and `df` show as the source (`kaiten:NAME`).
    public init(folder: any MountedFolder, at mountPoint: String, name: String, log: @escaping @Sendable (String) -> Void) {
        self.folder = folder
        self.mountPoint = (mountPoint as NSString).standardizingPath
        self.name = String(name.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." ? $0 : "_" })
        self.log = log
    }

    /// Mounts and serves until the file system is unmounted (``stop()``, `fusermount3 -u`,
    /// `umount`); blocks the calling thread, which must be a thread of its own.
    public func run() throws(MountError) {
        // A mount whose process died (kill -9) answers ENOTCONN to every request: cleared, said.
        if Self.isDeadMount(mountPoint) {
            Self.detach(mountPoint)
            guard !Self.isDeadMount(mountPoint) else {
                throw MountError(EBUSY, "\(mountPoint): a dead mount is there and could not be cleared (fusermount3 -u -z \(mountPoint))")
            }
            log("\(mountPoint): a mount left by a process that ended without unmounting was cleared")
        } else if Self.isMounted(mountPoint) {
            throw MountError(EBUSY, "\(mountPoint): something is already mounted there (fusermount3 -u \(mountPoint))")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: mountPoint, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw MountError(ENOTDIR, "\(mountPoint): not a directory (make it first: mkdir -p \(mountPoint))")
        }
        guard access("/dev/fuse", R_OK | W_OK) == 0 else {
            throw MountError(EACCES, "/dev/fuse: \(String(cString: strerror(errno))) (is the fuse3 package installed and the fuse module loaded?)")
        }
        var operations = Self.operations()
        let arguments = ["kaiten", "-o", "fsname=kaiten:\(name),subtype=kaiten,default_permissions"]
        var pointers = arguments.map { strdup($0) }
        defer { pointers.forEach { free($0) } }
        let created: OpaquePointer? = pointers.withUnsafeMutableBufferPointer { argv in
            var args = fuse_args(argc: Int32(argv.count), argv: argv.baseAddress, allocated: 0)
            defer { fuse_opt_free_args(&args) }
            return fuse_new(&args, &operations, MemoryLayout<fuse_operations>.size, Unmanaged.passUnretained(self).toOpaque())
        }
        guard let created else { throw MountError(EINVAL, "libfuse refused the mount's options") }
        defer { fuse_destroy(created) }
        guard fuse_mount(created, mountPoint) == 0 else {
            throw MountError(EIO, "\(mountPoint): the kernel refused the mount (see the line above; not root? /dev/fuse not usable?)")
        }
        fuse.withLock { $0 = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(created))) }
        // From here the kernel holds what is asked of the mount until the loop takes it.
        log("mounted at \(mountPoint)")
        // Asked to stop between mounting and here: the loop would not see it.
        if stopping.load(ordering: .sequentiallyConsistent) { Self.detach(mountPoint) }
        _ = fuse_loop_mt_31(created, 0)
        fuse.withLock { $0 = 0 }
        if Self.isMounted(mountPoint) { fuse_unmount(created) }
        let open = handles.withLock { state in
            defer { state.open = [:] }
            return Array(state.open.values)
        }
        for file in open { file.close() }
    }

    /// Unmounts (lazily: files open inside are closed by the kernel as their users go) and so
    /// ends ``run()``. From any thread, any number of times.
    public func stop() {
        guard !stopping.exchange(true, ordering: .sequentiallyConsistent) else { return }
        let address = fuse.withLock { $0 }
        guard let running = OpaquePointer(bitPattern: address) else { return }
        fuse_exit(running)
        Self.detach(mountPoint)
    }

    static func detach(_ mountPoint: String) {
        if geteuid() == 0 {
            umount2(mountPoint, Int32(MNT_DETACH))
            return
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        process.arguments = ["-u", "-z", "-q", mountPoint]
        try? process.run()
        process.waitUntilExit()
    }

    /// Whether what is at `path` is a mount whose process died: listing it fails with ENOTCONN.
    /// Listing asks the file system (a stat can be answered from the kernel's cache), and asks
    /// whatever is on top at that path, whether or not the mount table is read as listing it.
    static func isDeadMount(_ path: String) -> Bool {
        guard let listing = Glibc.opendir(path) else { return errno == ENOTCONN }
        closedir(listing)
        return false
    }

    /// Whether `path` is a mount point now (from /proc/self/mountinfo).
    public static func isMounted(_ path: String) -> Bool {
        guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return false }
        let standardized = (path as NSString).standardizingPath
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count > 4 else { continue }
            // Spaces and other octal escapes in mount points: \040.
            if Self.unescapeMountInfo(String(fields[4])) == standardized { return true }
        }
        return false
    }

    static func unescapeMountInfo(_ field: String) -> String {
        var out = [UInt8]()
        var bytes = Array(field.utf8)[...]
        while let byte = bytes.first {
            if byte == UInt8(ascii: "\\"), bytes.count >= 4,
                let value = UInt8(String(decoding: bytes.dropFirst().prefix(3), as: UTF8.self), radix: 8)
            {
                out.append(value)
                bytes = bytes.dropFirst(4)
            } else {
                out.append(byte)
                bytes = bytes.dropFirst()
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: - Requests

    /// utimensat(2)'s UTIME_NOW and UTIME_OMIT (macros Swift does not import).
    public static let utimeNow = (1 << 30) - 1
    public static let utimeOmit = (1 << 30) - 2

    static var current: FuseMount {
        Unmanaged<FuseMount>.fromOpaque(fuse_get_context()!.pointee.private_data).takeUnretainedValue()
    }

    /// The folder-relative path of a kernel path ("/a/b" → "a/b", "/" → "").
    static func relative(_ path: UnsafePointer<CChar>?) -> String {
        guard let path else { return "" }
        let full = String(cString: path)
        return full.hasPrefix("/") ? String(full.dropFirst()) : full
    }

    /// The negated errno libfuse expects; a refusal with a reason is logged.
    func failed(_ error: MountError, _ what: String, _ path: String) -> Int32 {
        if let reason = error.reason { log("\(what) \(path): \(reason)") }
        return -error.code
    }

    func getattr(_ path: String, _ stat: UnsafeMutablePointer<stat>) -> Int32 {
        do {
            let attributes = try folder.attributes(of: path)
            Self.fill(stat, attributes)
            return 0
        } catch {
            return failed(error, "stat", path)
        }
    }

    static func fill(_ out: UnsafeMutablePointer<stat>, _ attributes: MountAttributes) {
        memset(out, 0, MemoryLayout<stat>.size)
        switch attributes.kind {
        case .directory:
            out.pointee.st_mode = S_IFDIR | mode_t(attributes.permissions & 0o7777)
            out.pointee.st_nlink = 2
        case .file:
            out.pointee.st_mode = S_IFREG | mode_t(attributes.permissions & 0o7777)
            out.pointee.st_nlink = 1
        case .symlink:
            out.pointee.st_mode = S_IFLNK | 0o777
            out.pointee.st_nlink = 1
        }
        out.pointee.st_size = off_t(attributes.size)
        out.pointee.st_blocks = blkcnt_t((attributes.bytesHere + 511) / 512)
        out.pointee.st_blksize = 128 << 10
        out.pointee.st_uid = owner.uid
        out.pointee.st_gid = owner.gid
        let time = timespec(tv_sec: Int(attributes.modifiedNs / 1_000_000_000), tv_nsec: Int(attributes.modifiedNs % 1_000_000_000))
        out.pointee.st_mtim = time
        out.pointee.st_ctim = time
        out.pointee.st_atim = time
    }

    /// An open directory's listing, read once at opendir and handed out in the kernel's
    /// buffer-sized pieces (each readdir asks from an offset).
    private let listings = Mutex<(next: UInt64, open: [UInt64: [MountedFolderEntry]])>((1, [:]))

    func opendir(_ path: String, _ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
        do {
            let entries = try folder.entries(in: path)
            let handle = listings.withLock { listings -> UInt64 in
                defer { listings.next += 1 }
                listings.open[listings.next] = entries
                return listings.next
            }
            info?.pointee.fh = handle
            return 0
        } catch {
            return failed(error, "list", path)
        }
    }

    func releasedir(_ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
        if let handle = info?.pointee.fh { _ = listings.withLock { $0.open.removeValue(forKey: handle) } }
        return 0
    }

    /// Entries from `offset` on, each with its offset (its place + 1), so that libfuse passes
    /// the attributes on (readdirplus: the kernel's lookups and `stat`s of a walk are answered
    /// by the listing; with offset 0, libfuse 3.14 drops them) and asks again where the
    /// kernel's buffer ended.
    /// Who owns every name (the mounting user): asked once, not per name of a listing.
    static let owner = (uid: getuid(), gid: getgid())

    func readdir(
        _ path: String, _ buffer: UnsafeMutableRawPointer?, _ filler: fuse_fill_dir_t?, _ offset: off_t,
        _ info: UnsafeMutablePointer<fuse_file_info>?
    ) -> Int32 {
        guard let filler else { return -EIO }
        let entries: [MountedFolderEntry]
        if let handle = info?.pointee.fh, let listed = listings.withLock({ $0.open[handle] }) {
            entries = listed
        } else {
            do { entries = try folder.entries(in: path) } catch { return failed(error, "list", path) }
        }
        var attributes = stat()
        var place = Int(max(0, offset))
        while place < entries.count + 2 {
            let next = off_t(place + 1)
            let filled: Int32
            switch place {
            case 0: filled = filler(buffer, ".", nil, next, fuse_fill_dir_flags(rawValue: 0))
            case 1: filled = filler(buffer, "..", nil, next, fuse_fill_dir_flags(rawValue: 0))
            default:
                let entry = entries[place - 2]
                if let known = entry.attributes {
                    Self.fill(&attributes, known)
                    filled = filler(buffer, entry.name, &attributes, next, fuse_fill_dir_flags(rawValue: 2))
                } else {
                    filled = filler(buffer, entry.name, nil, next, fuse_fill_dir_flags(rawValue: 0))
                }
            }
            if filled != 0 { break }
            place += 1
        }
        return 0
    }

    func open(_ path: String, _ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
        guard let info else { return -EIO }
        do {
            let file = try folder.open(path, writing: info.pointee.flags & O_ACCMODE != O_RDONLY)
            // The same content as at the last open: what the kernel cached of it stays valid.
            if let tag = file.contentTag {
                let same = openedTags.withLock { tags in
                    defer { tags[path] = tag }
                    return tags[path] == tag
                }
                if same { info.pointee.keep_cache = 1 }
            } else {
                openedTags.withLock { $0[path] = nil }
            }
            info.pointee.fh = keep(file)
            return 0
        } catch {
            return failed(error, "open", path)
        }
    }

    func keep(_ file: any MountedFile) -> UInt64 {
        handles.withLock { state in
            let handle = state.next
            state.next += 1
            state.open[handle] = file
            return handle
        }
    }

    func create(_ path: String, _ mode: mode_t, _ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
        guard let info else { return -EIO }
        do {
            info.pointee.fh = keep(try folder.create(path, permissions: UInt32(mode & 0o7777)))
            return 0
        } catch {
            return failed(error, "create", path)
        }
    }

    func write(_ path: String, _ buffer: UnsafePointer<CChar>?, _ size: Int, _ offset: off_t, _ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
        guard let info, let buffer, let file = handles.withLock({ $0.open[info.pointee.fh] }) else { return -EBADF }
        do {
            return Int32(try file.write(UnsafeRawBufferPointer(start: buffer, count: size), at: Int64(offset)))
        } catch {
            return failed(error, "write", path)
        }
    }

    func fsync(_ path: String, _ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
        guard let info, let file = handles.withLock({ $0.open[info.pointee.fh] }) else { return 0 }
        do {
            try file.sync()
            return 0
        } catch {
            return failed(error, "fsync", path)
        }
    }

    /// A change of the tree, its refusal as libfuse wants it.
    func change(_ what: String, _ path: String, _ body: () throws(MountError) -> Void) -> Int32 {
        do {
            try body()
            return 0
        } catch {
            return failed(error, what, path)
        }
    }

    func read(_ path: String, _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ offset: off_t, _ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
        guard let info, let buffer, let file = handles.withLock({ $0.open[info.pointee.fh] }) else { return -EBADF }
        let result = Self.blocking { () async throws(MountError) -> Data in try await file.read(at: Int64(offset), count: size) }
        switch result {
        case .success(let data):
            let count = min(data.count, size)
            data.withUnsafeBytes { bytes in
                if count > 0 { memcpy(buffer, bytes.baseAddress!, count) }
            }
            return Int32(count)
        case .failure(let error):
            return failed(error, "read", path)
        }
    }

    func release(_ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
        guard let info else { return 0 }
        let file = handles.withLock { $0.open.removeValue(forKey: info.pointee.fh) }
        file?.close()
        return 0
    }

    func readlink(_ path: String, _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int32 {
        guard let buffer, size > 0 else { return -EINVAL }
        do {
            let target = Array(try folder.linkTarget(of: path).utf8)
            let count = min(target.count, size - 1)
            target.withUnsafeBytes { memcpy(buffer, $0.baseAddress!, count) }
            buffer[count] = 0
            return 0
        } catch {
            return failed(error, "readlink", path)
        }
    }

    func getxattr(_ path: String, _ name: String, _ value: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int32 {
        do {
            let bytes = try folder.extendedAttribute(name, of: path)
            return Self.copyOut(bytes, value, size)
        } catch {
            return failed(error, "getxattr \(name)", path)
        }
    }

    func listxattr(_ path: String, _ list: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int32 {
        do {
            let names = try folder.extendedAttributeNames(of: path)
            return Self.copyOut(names.flatMap { Array($0.utf8) + [0] }, list, size)
        } catch {
            return failed(error, "listxattr", path)
        }
    }

    func setxattr(_ path: String, _ name: String, _ value: UnsafePointer<CChar>?, _ size: Int) -> Int32 {
        let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size).bindMemory(to: UInt8.self)) } ?? []
        do {
            try folder.setExtendedAttribute(name, of: path, to: bytes)
            return 0
        } catch {
            return failed(error, "setxattr \(name)", path)
        }
    }

    /// xattr's two-step protocol: the size when asked with no room, ERANGE when too small.
    static func copyOut(_ bytes: [UInt8], _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int32 {
        if size == 0 { return Int32(bytes.count) }
        guard let buffer, size >= bytes.count else { return -ERANGE }
        bytes.withUnsafeBytes { if !bytes.isEmpty { memcpy(buffer, $0.baseAddress!, bytes.count) } }
        return Int32(bytes.count)
    }

    func statfs(_ out: UnsafeMutablePointer<statvfs>?) -> Int32 {
        guard let out else { return -EIO }
        if let figures = folder.spaceFigures() {
            out.pointee = figures
        } else {
            memset(out, 0, MemoryLayout<statvfs>.size)
        }
        out.pointee.f_namemax = 255
        return 0
    }

    /// Runs async work from a libfuse worker thread (never one of Swift's pool) and waits.
    public static func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws(MountError) -> T) -> Result<T, MountError> {
        let done = DispatchSemaphore(value: 0)
        let box = Mutex<Result<T, MountError>?>(nil)
        Task {
            let result: Result<T, MountError>
            do throws(MountError) { result = .success(try await body()) } catch { result = .failure(error) }
            box.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return box.withLock { $0! }
    }

    static func operations() -> fuse_operations {
        var ops = fuse_operations()
        ops.`init` = { connection, config in
            // Every listing with its entries' attributes, not only a directory's first batch
            // (the kernel's "auto" mode): `du` over a large directory then asks nothing per name.
            if let connection { connection.pointee.want &= ~UInt32(FUSE_CAP_READDIRPLUS_AUTO) }
            // Short lifetimes: names the peers add or delete show within a second, and a file
            // the peers change is read anew (the page cache is kept only for the same content).
            if let config {
                config.pointee.entry_timeout = 1
                config.pointee.attr_timeout = 1
                config.pointee.negative_timeout = 1
                config.pointee.kernel_cache = 0
                config.pointee.use_ino = 0
            }
            return fuse_get_context()!.pointee.private_data
        }
        ops.getattr = { path, stat, _ in
            guard let stat else { return -EIO }
            return FuseMount.current.getattr(FuseMount.relative(path), stat)
        }
        ops.opendir = { path, info in FuseMount.current.opendir(FuseMount.relative(path), info) }
        ops.releasedir = { _, info in FuseMount.current.releasedir(info) }
        ops.readdir = { path, buffer, filler, offset, info, _ in
            FuseMount.current.readdir(FuseMount.relative(path), buffer, filler, offset, info)
        }
        ops.open = { path, info in FuseMount.current.open(FuseMount.relative(path), info) }
        ops.read = { path, buffer, size, offset, info in FuseMount.current.read(FuseMount.relative(path), buffer, size, offset, info) }
        ops.release = { _, info in FuseMount.current.release(info) }
        ops.readlink = { path, buffer, size in FuseMount.current.readlink(FuseMount.relative(path), buffer, size) }
        ops.getxattr = { path, name, value, size in
            FuseMount.current.getxattr(FuseMount.relative(path), name.map { String(cString: $0) } ?? "", value, size)
        }
        ops.listxattr = { path, list, size in FuseMount.current.listxattr(FuseMount.relative(path), list, size) }
        ops.setxattr = { path, name, value, size, _ in
            FuseMount.current.setxattr(FuseMount.relative(path), name.map { String(cString: $0) } ?? "", value, size)
        }
        ops.removexattr = { _, _ in -ENOTSUP }
        ops.statfs = { _, out in FuseMount.current.statfs(out) }
        // Changes of the tree, as the folder takes them. Special files, hard links and owners
        // are not what syncthing syncs.
        ops.mknod = { _, _, _ in -EPERM }
        ops.link = { _, _ in -EPERM }
        ops.chown = { _, _, _, _ in 0 }
        ops.create = { path, mode, info in FuseMount.current.create(FuseMount.relative(path), mode, info) }
        ops.write = { path, buffer, size, offset, info in FuseMount.current.write(FuseMount.relative(path), buffer, size, offset, info) }
        ops.fsync = { path, _, info in FuseMount.current.fsync(FuseMount.relative(path), info) }
        ops.mkdir = { path, mode in
            let name = FuseMount.relative(path)
            return FuseMount.current.change("mkdir", name) { () throws(MountError) in
                try FuseMount.current.folder.makeDirectory(name, permissions: UInt32(mode & 0o7777))
            }
        }
        ops.symlink = { target, path in
            let name = FuseMount.relative(path)
            let to = target.map { String(cString: $0) } ?? ""
            return FuseMount.current.change("symlink", name) { () throws(MountError) in try FuseMount.current.folder.makeSymlink(name, target: to) }
        }
        ops.unlink = { path in
            let name = FuseMount.relative(path)
            return FuseMount.current.change("unlink", name) { () throws(MountError) in try FuseMount.current.folder.removeFile(name) }
        }
        ops.rmdir = { path in
            let name = FuseMount.relative(path)
            return FuseMount.current.change("rmdir", name) { () throws(MountError) in try FuseMount.current.folder.removeDirectory(name) }
        }
        ops.rename = { from, to, flags in
            let source = FuseMount.relative(from)
            let target = FuseMount.relative(to)
            // RENAME_NOREPLACE (1) is kept; RENAME_EXCHANGE (2) and the rest are not offered.
            guard flags & ~UInt32(1) == 0 else { return -EINVAL }
            return FuseMount.current.change("rename", source) { () throws(MountError) in
                try FuseMount.current.folder.rename(source, to: target, replace: flags & 1 == 0)
            }
        }
        ops.truncate = { path, size, _ in
            let name = FuseMount.relative(path)
            return FuseMount.current.change("truncate", name) { () throws(MountError) in try FuseMount.current.folder.truncate(name, to: Int64(size)) }
        }
        ops.chmod = { path, mode, _ in
            let name = FuseMount.relative(path)
            return FuseMount.current.change("chmod", name) { () throws(MountError) in
                try FuseMount.current.folder.setPermissions(name, UInt32(mode & 0o7777))
            }
        }
        ops.utimens = { path, times, _ in
            let name = FuseMount.relative(path)
            // The modification time (times[1]); UTIME_NOW and UTIME_OMIT as utimensat(2) has them.
            var nanoseconds = Int64(Date().timeIntervalSince1970 * 1e9)
            if let times {
                let modified = times[1]
                if modified.tv_nsec == FuseMount.utimeOmit { return 0 }
                if modified.tv_nsec != FuseMount.utimeNow { nanoseconds = Int64(modified.tv_sec) * 1_000_000_000 + Int64(modified.tv_nsec) }
            }
            let at = nanoseconds
            return FuseMount.current.change("utimens", name) { () throws(MountError) in try FuseMount.current.folder.setModified(name, nanoseconds: at) }
        }
        return ops
    }
}
