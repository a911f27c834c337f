import Synchronization
import Crypto
import Foundation
import KaitenEncryption
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan

#if canImport(Glibc)
import Glibc
#endif

/// Writes the global version of one entry into the folder: a temp file beside the target,
/// every block verified, fsynced, permissions and mtime set, renamed into place, the directory
/// fsynced. Nothing is ever left under the real name but a complete global version.
public struct FilePuller: Sendable {
    let root: String
    let ignorePermissions: Bool
    let source: BlockSource
    /// When false the caller fsyncs each directory once after a batch of renames (apply does,
    /// before any deletion): a crash before that loses at most the rename, never content.
    var syncsDirectories: Bool

    public init(root: String, ignorePermissions: Bool, source: BlockSource, syncsDirectories: Bool = true) {
        self.root = root
        self.ignorePermissions = ignorePermissions
        self.source = source
        self.syncsDirectories = syncsDirectories
    }
    /// Blocks requested at once per file.
    var window = 32
    /// The bytes of blocks apply has in flight for a folder, all files together. Syncthing's
    /// puller allows 32 MiB by default (pullerMaxPendingKiB); half keeps a 1 GiB pull of four
    /// 256 MiB files under 64 MiB and is still a lone file's whole window of 256 KiB blocks
    /// (8 MiB) twice over.
    public static let applyBudget = 16 << 20
    /// Bytes of blocks in flight shared by every file this puller pulls at once (apply's; nil:
    /// only the window bounds them). A file that needs one more block waits for room.
    public var budget: AsyncBudget?
    /// Where apply records the version it writes, just before each rename (nil for `get`).
    public var journal: SyncedJournal?
    /// The folder's copyOwnershipFromParent: a written file gets its directory's owner and group.
    public var copyOwnershipFromParent = false
    /// Checked before each block: when set, the pull stops and its temp file stays.
    public var stop: StopSignal?
    /// Counts the bytes of every block in place (fetched, copied or resumed), for progress.
    public var progress: ByteCounter?
    /// Keeps the file a pull replaces (the folder's versioning), just before the rename.
    public var versioner: Versioner?
    /// Shares one flush among the small files in flight (apply); nil: each file is fsynced.
    public var groupSync: GroupSync?

    /// What is on disk at `path` before the rename must still be what the plan saw; otherwise
    /// the pull stops and the local file is left alone.
    public typealias LocalCheck = @Sendable (String) throws(ApplyError) -> Void

    /// Pulls `entry` (the global version, with its block list) and returns the new local record.
    /// - Parameter localName: where under `root` to write it, when not at its own name (`kaiten
    ///   get -o`); the peers are still asked for `entry.name`.
    /// - Parameter sealed: in a folder this device holds as the untrusted one, the entry as the
    ///   trusted device sent it: the blocks are ciphertext (their hashes cannot be checked here),
    ///   and this FileInfo is written after them as the file's trailer, as syncthing stores it.
    public func pull(
        _ entry: FileEntry, as localName: String? = nil, blocks: [BEPBlockInfo], holders: [DeviceID], sealed: BEPFileInfo? = nil,
        check: @escaping LocalCheck
    ) async throws(ApplyError) -> LocalFile {
        let name = localName ?? entry.name
        try SafePath.validate(entry.name)
        try SafePath.validate(name)
        try SafePath.prepareParents(root: root, name: name)
        let target = root + "/" + name
        switch entry.type {
        case .directory:
            var info = stat()
            if lstat(target, &info) == 0 {
                guard info.st_mode & S_IFMT == S_IFDIR else {
                    throw ApplyError(.changedLocally, path: name, "something other than a directory is in the way")
                }
            } else {
                guard mkdir(target, entry.noPermissions || ignorePermissions ? 0o755 : mode_t(entry.permissions & 0o777)) == 0 || errno == EEXIST else {
                    throw ApplyError(.io, path: name, "cannot create the directory: \(String(cString: strerror(errno)))")
                }
                try SafePath.syncParent(of: target, name: name)
            }
            return LocalFile(path: name, kind: .directory)
        case .symlink, .symlinkFile, .symlinkDirectory:
            let temp = root + "/" + SafePath.temporaryName(for: name)
            unlink(temp)
            guard symlink(entry.symlinkTarget, temp) == 0 else {
                throw ApplyError(.io, path: name, "cannot create the symlink: \(String(cString: strerror(errno)))")
            }
            let synced = SyncedVersion(version: entry.version, contentHash: Reconciler.symlinkHash(entry.symlinkTarget))
            try finish(temp: temp, target: target, name: name, synced: synced, check: check)
            return LocalFile(path: name, kind: .symlink, symlinkTarget: entry.symlinkTarget, synced: synced)
        default:
            var trailer: [UInt8]?
            if let sealed {
                do {
                    trailer = try EncryptedTrailer.encode(sealed)
                } catch {
                    throw ApplyError(.io, path: name, "cannot encode its trailer: \(error)")
                }
            }
            return try await pullFile(entry, name: name, blocks: blocks, holders: holders, trailer: trailer, check: check)
        }
    }

    private func pullFile(
        _ entry: FileEntry, name: String, blocks: [BEPBlockInfo], holders: [DeviceID], trailer: [UInt8]?, check: @escaping LocalCheck
    ) async throws(ApplyError) -> LocalFile {
        let target = root + "/" + name
        let temp = root + "/" + SafePath.temporaryName(for: name)
        // A temp file left by an interrupted run keeps what it verified: each of its blocks is
        // checked again against this version's block list and kept when it matches (as syncthing
        // reuses its temp files); the rest is fetched.
        var existing = stat()
        let fd: Int32 = {
            let fd = open(temp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0, fstat(fd, &existing) != 0 || existing.st_mode & S_IFMT != S_IFREG else { return fd }
            // Not a regular file (or unreadable): start afresh.
            close(fd)
            unlink(temp)
            existing = stat()
            return open(temp, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        }()
        guard fd >= 0 else { throw ApplyError(.io, path: name, "cannot create \(temp): \(String(cString: strerror(errno)))") }
        var ok = false
        var keepTemp = false
        defer {
            if !ok {
                close(fd)
                if !keepTemp { unlink(temp) }
            }
        }
        // Ciphertext cannot be checked here: a stored file's pull starts afresh.
        let resumed = existing.st_size > 0 && trailer == nil ? Self.verifiedBlocks(fd: fd, size: Int64(existing.st_size), blocks: blocks) : []
        if !resumed.isEmpty {
            source.countResumed(resumed.count)
            progress?.add(resumed.reduce(Int64(0)) { $0 + Int64(blocks[$1].size) })
        }
        let diskSize = entry.size + Int64(trailer?.count ?? 0)
        // Ciphertext starts afresh, sized with its trailer. Plain content keeps what it resumed,
        // cut to the file's size; a fresh temp file is sized by its writes (or by the allocation
        // below): no call at all for a small file, of the dozen a pull of one makes.
        let sized =
            trailer == nil
            ? existing.st_size == 0 || ftruncate(fd, off_t(entry.size)) == 0
            : ftruncate(fd, 0) == 0 && ftruncate(fd, off_t(diskSize)) == 0
        guard sized else {
            throw ApplyError(.io, path: name, "cannot size the temp file: \(String(cString: strerror(errno)))")
        }
        // The whole file's space up front: a full disk fails this file now, before any block is
        // fetched, rather than some later write of it (and of every other file in flight). A
        // file of one block has a single write, which fails the same way (``SerialWrites``).
        if diskSize > 0 && (blocks.count > 1 || trailer != nil) {
            let result = posix_fallocate(fd, 0, off_t(diskSize))
            if result == ENOSPC || result == EDQUOT {
                throw ApplyError(.noSpace, path: name, "no space left on the device for its \(entry.size) bytes (\(String(cString: strerror(result))))")
            }
        }
        var requestFile = BEPFileInfo()
        requestFile.name = entry.name
        requestFile.size = entry.size
        requestFile.blockSize = entry.blockSize
        let request = requestFile
        let source = self.source
        let window = self.window
        let budget = self.budget
        let stop = self.stop
        let progress = self.progress
        let wanted = blocks.indices.filter { !resumed.contains($0) }.map { blocks[$0] }
        let writes = SerialWrites(fd: fd, name: name, progress: progress, writeBehind: WriteBehind(fd: fd))
        do {
            let launched = try await withThrowingTaskGroup(of: Void.self, returning: Int.self) { group in
                var next = 0
                func launch() async {
                    let block = wanted[next]
                    next += 1
                    await budget?.acquire(Int(block.size))
                    group.addTask {
                        defer { budget?.release(Int(block.size)) }
                        let data = try await source.block(block, of: request, holders: holders)
                        try await writes.write(data, at: block.offset)
                    }
                }
                while next < wanted.count && next < window { await launch() }
                while try await group.next() != nil {
                    if next < wanted.count && stop?.isSet != true { await launch() }
                }
                return next
            }
            if launched < wanted.count {
                keepTemp = true
                throw ApplyError(.interrupted, path: name, "interrupted; the blocks fetched so far stay in \(SafePath.temporaryName(for: name)) for the next apply")
            }
        } catch let error as ApplyError {
            if error.code == .interrupted { keepTemp = true }
            throw error
        } catch {
            throw ApplyError(.peerFailed, path: name, "\(error)")
        }
        if let trailer {
            let written = trailer.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(entry.size)) }
            guard written == trailer.count else {
                throw ApplyError(.io, path: name, "cannot write its trailer: \(String(cString: strerror(errno)))")
            }
        }
        let mode: mode_t = entry.noPermissions || ignorePermissions ? 0o644 : mode_t(entry.permissions & 0o777)
        ok = true
        // Mode, owner and times first, so that the flush makes them durable too.
        fchmod(fd, mode)
        if copyOwnershipFromParent {
            // As syncthing: the directory's owner and group; without the privilege it is a no-op.
            var parent = stat()
            if stat((target as NSString).deletingLastPathComponent, &parent) == 0 { _ = fchown(fd, parent.st_uid, parent.st_gid) }
        }
        var times = [
            timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2),  // UTIME_OMIT: leave atime alone
            timespec(tv_sec: Int(entry.modifiedS), tv_nsec: Int(entry.modifiedNs)),
        ]
        futimens(fd, &times)
        var info = stat()
        fstat(fd, &info)
        // Made durable before the rename: a small file shares its flush with the others in flight
        // (see GroupSync); a bigger one (or any, without a group) has its own fsync. Both block
        // for milliseconds, so neither holds a thread of the cooperative pool meanwhile.
        let shared = entry.size <= GroupSync.largestFile ? groupSync : nil
        let flushed = if let shared { await shared.sync(fd) } else { await GroupSync.ownFsync(fd) }
        guard flushed == 0 else {
            close(fd)
            unlink(temp)
            throw ApplyError(.io, path: name, "cannot flush it to disk: \(String(cString: strerror(flushed)))")
        }
        let synced = SyncedVersion(version: entry.version, contentHash: entry.contentHash)
        try await Blocking.run {
            defer { close(fd) }
            do {
                try finish(temp: temp, target: target, name: name, synced: synced, check: check)
            } catch {
                unlink(temp)
                throw error
            }
        }
        if trailer != nil {
            // What a scan reads of it (``FolderScanner/storedFileReader``): its trailer's content
            // and version, no blocks of its own (ciphertext is never a source to copy from).
            return LocalFile(
                path: name, kind: .file, size: diskSize,
                modifiedNs: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec), inode: UInt64(info.st_ino),
                permissions: UInt32(info.st_mode & 0o7777), contentHash: entry.contentHash, blockSize: entry.blockSize,
                blocks: [], synced: synced)
        }
        var offset: Int64 = 0
        let localBlocks = blocks.map { block -> LocalBlock in
            defer { offset += Int64(block.size) }
            return LocalBlock(hash: ContentHash(data: block.hash) ?? .zero, weakHash: block.weakHash, size: block.size)
        }
        return LocalFile(
            path: name, kind: .file, size: entry.size,
            modifiedNs: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec), inode: UInt64(info.st_ino),
            permissions: UInt32(info.st_mode & 0o7777), contentHash: entry.contentHash, blockSize: entry.blockSize,
            blocks: localBlocks, synced: SyncedVersion(version: entry.version, contentHash: entry.contentHash))
    }

    /// The blocks (by index) a leftover temp file already holds, each SHA-256-verified.
    static func verifiedBlocks(fd: Int32, size: Int64, blocks: [BEPBlockInfo]) -> Set<Int> {
        var found: Set<Int> = []
        var buffer = [UInt8]()
        for (i, block) in blocks.enumerated() where block.size > 0 && block.offset + Int64(block.size) <= size {
            buffer = [UInt8](repeating: 0, count: Int(block.size))
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(block.offset)) }
            guard n == buffer.count else { continue }
            if SHA256.hash(data: buffer).elementsEqual(block.hash) { found.insert(i) }
        }
        return found
    }

    /// The last look before the rename, then the rename and the directory fsync.
    private func finish(temp: String, target: String, name: String, synced: SyncedVersion, check: LocalCheck) throws(ApplyError) {
        try check(name)
        // The record goes first: a crash after the rename must not leave the new content with
        // no word of which version it is.
        if let journal {
            do {
                try journal.record(name, synced)
            } catch {
                throw ApplyError(.io, path: name, "\(error)")
            }
        }
        if let versioner {
            var info = stat()
            if lstat(target, &info) == 0, info.st_mode & S_IFMT == S_IFREG { try versioner.archive(root: root, name: name) }
        }
        guard rename(temp, target) == 0 else {
            throw ApplyError(.io, path: name, "cannot rename into place: \(String(cString: strerror(errno)))")
        }
        if syncsDirectories { try SafePath.syncParent(of: target, name: name) }
    }
}

/// Runs blocking file-system work on a concurrent dispatch queue instead of Swift's cooperative
/// pool (one thread per core), which a few fsyncs would otherwise stall.
public enum Blocking {
    static let queue = DispatchQueue(label: "kaiten.apply.blocking", attributes: .concurrent)

    /// `body` of every item, off the cooperative pool: on every core at once when
    /// `concurrently`, else one after the other. Results in the items' order.
    public static func map<T: Sendable, R: Sendable>(
        _ items: [T], concurrently: Bool = true, _ body: @escaping @Sendable (T) -> R
    ) async -> [R] {
        let results = UnsafeMutableBufferPointer<R?>.allocate(capacity: items.count)
        results.initialize(repeating: nil)
        defer { results.deallocate() }
        // Each index is written by exactly one iteration, and read only after all have ended.
        nonisolated(unsafe) let slots = results
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async {
                if concurrently {
                    DispatchQueue.concurrentPerform(iterations: items.count) { slots[$0] = body(items[$0]) }
                } else {
                    for i in items.indices { slots[i] = body(items[i]) }
                }
                continuation.resume()
            }
        }
        let mapped = results.map { $0! }
        _ = results.deinitialize()
        return mapped
    }

    public static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws(ApplyError) -> T {
        let result: Result<T, ApplyError> = await withCheckedContinuation { continuation in
            queue.async {
                do {
                    continuation.resume(returning: .success(try body()))
                } catch let error as ApplyError {
                    continuation.resume(returning: .failure(error))
                } catch {
                    continuation.resume(returning: .failure(ApplyError(.io, path: "", "\(error)")))
                }
            }
        }
        return try result.get()
    }
}

/// A byte count many tasks add to and one reads (apply's progress by bytes).
public final class ByteCounter: Sendable {
    private let bytes = Atomic<Int64>(0)
    public init() {}
    public func add(_ n: Int64) { bytes.add(n, ordering: .relaxed) }
    public var value: Int64 { bytes.load(ordering: .relaxed) }
}
