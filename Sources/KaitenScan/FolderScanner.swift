import CZlib
import Crypto
import Dispatch
import Synchronization
import Foundation
import KaitenProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Walks a folder on disk and hashes what changed into syncthing's blocks.
///
/// Files whose size, mtime (ns), inode and block size match the previous scan keep their
/// blocks without being read; everything else is read once, block by block (SHA-256 and
/// Adler-32), on every core.
public struct FolderScanner: Sendable {
    /// Names syncthing never syncs at the folder root.
    public static let internalRootNames: Set<String> = [".stfolder", ".stignore", ".stversions"]

    public let root: String
    /// How many files to hash at once.
    public var concurrency: Int

    /// What a stored file holds, read without hashing it: for a folder this device holds as
    /// the untrusted device, whose files are ciphertext that only their trailer describes. Nil
    /// when the file is not one such (then it counts as changed here).
    public typealias StoredFileReader = @Sendable (_ path: String, _ fd: Int32, _ size: Int64) -> (contentHash: ContentHash, version: BEPVector)?
    /// Set for a folder held as ciphertext: files are read with it, never hashed.
    public var storedFileReader: StoredFileReader?
    /// The content a file that ``storedFileReader`` cannot read is given: equal to no version's.
    public static let unreadableStoredFile = ContentHash(SHA256.hash(data: Array("kaiten: not a stored file".utf8)))

    public init(root: String, concurrency: Int = ProcessInfo.processInfo.activeProcessorCount) {
        self.root = root
        self.concurrency = max(1, concurrency)
    }

    /// What a scan did, for progress lines and benchmarks.
    public struct Statistics: Sendable, Equatable {
        public var entries = 0
        public var hashedFiles = 0
        public var hashedBytes: Int64 = 0
        public var reusedFiles = 0
        /// Entries whose kind, size, mtime or inode differ from the previous scan's, or that it
        /// did not have: none (and as many entries as before) means the folder is as it was.
        public var changedEntries = 0
        /// syncthing-style temp files found (`.syncthing.*.tmp`, `~syncthing~*`): leftovers of
        /// an interrupted pull, never part of the tree.
        public var temporaries: [String] = []
        public init() {}
    }

    /// Whether a name is one of syncthing's temporary files (never synced, never reported).
    public static func isTemporary(_ name: String) -> Bool {
        (name.hasPrefix(".syncthing.") && name.hasSuffix(".tmp")) || name.hasPrefix("~syncthing~")
    }

    /// Scans the folder.
    /// - Parameters:
    ///   - previous: the last scan's records: unchanged files reuse their blocks, and every
    ///     path's synced version carries over.
    ///   - blockSizeHint: the block size to hash a path with (the global version's, so that equal
    ///     content gives an equal hash); nil for syncthing's rule.
    ///   - warn: told about entries skipped (names that are not UTF-8 NFC, unreadable files).
    ///   - directory: scan only what is below this directory (`ls` of one directory); the tree
    ///     then holds only that part. Empty: the whole folder.
    ///   - recursive: false to read only the directory's own entries, not its subdirectories'.
    /// - Throws: ``ScanError`` when the folder or its `.stfolder` marker is missing.
    public func scan(
        previous: LocalTree, blockSizeHint: (String, Int64) -> Int32? = { _, _ in nil }, warn: (String) -> Void = { _ in },
        under directory: String = "", recursive: Bool = true
    ) throws(ScanError) -> (tree: LocalTree, statistics: Statistics) {
        try checkFolder()

        var entries: [String: LocalFile] = [:]
        entries.reserveCapacity(directory.isEmpty ? previous.count : 0)
        var toHash: [LocalFile] = []
        var statistics = Statistics()
        var directories: [String] = [directory]
        var st = stat()
        if !directory.isEmpty && !(look(directory, &st) == true && st.st_mode & S_IFMT == S_IFDIR) {
            // Not a real directory here (absent, a file, under a symlink): nothing below it.
            directories = []
        }
        while let relative = directories.popLast() {
            let absolute = relative.isEmpty ? root : root + "/" + relative
            guard let dir = opendir(absolute) else {
                warn("\(absolute): cannot read directory: \(String(cString: strerror(errno)))")
                continue
            }
            defer { closedir(dir) }
            let dirFD = dirfd(dir)
            while let item = readdir(dir) {
                let name = withUnsafeBytes(of: item.pointee.d_name) { raw -> String? in
                    let bytes = raw.bindMemory(to: UInt8.self)
                    let length = bytes.firstIndex(of: 0) ?? bytes.count
                    return String(validating: UnsafeBufferPointer(rebasing: bytes[..<length]), as: UTF8.self)
                }
                guard let name else {
                    warn("\(absolute): skipped an entry whose name is not valid UTF-8")
                    continue
                }
                if name == "." || name == ".." { continue }
                if relative.isEmpty && Self.internalRootNames.contains(name) { continue }
                if Self.isTemporary(name) {
                    statistics.temporaries.append(relative.isEmpty ? name : relative + "/" + name)
                    continue
                }
                // Byte comparison: String's == treats NFD and NFC as equal.
                if !name.utf8.allSatisfy({ $0 < 0x80 }) && !name.utf8.elementsEqual(name.precomposedStringWithCanonicalMapping.utf8) {
                    warn("\(absolute)/\(name): skipped: the name is not in Unicode NFC, as syncthing requires")
                    continue
                }
                let path = relative.isEmpty ? name : relative + "/" + name
                var st = stat()
                guard fstatat(dirFD, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                let old = previous[path]
                guard
                    let (entry, reused) = Self.entry(
                        path, st, absolute: absolute + "/" + name, previous: old, blockSizeHint: blockSizeHint, stored: storedFileReader != nil)
                else { continue }  // sockets, fifos, devices: syncthing skips them too
                if !(old?.sameStat(as: entry) ?? false) { statistics.changedEntries += 1 }
                if entry.kind == .directory && recursive { directories.append(path) }
                if entry.kind == .file {
                    if reused { statistics.reusedFiles += 1 } else { toHash.append(entry) }
                }
                entries[path] = entry
            }
        }
        statistics.entries = entries.count

        let hashed = hashAll(toHash, warn: warn)
        for file in hashed {
            guard let file else { continue }
            entries[file.path] = file
            statistics.hashedFiles += 1
            statistics.hashedBytes += file.size
        }
        // A file that could not be read is left out rather than guessed at.
        for (file, result) in zip(toHash, hashed) where result == nil { entries.removeValue(forKey: file.path) }
        return (LocalTree(entries: entries), statistics)
    }

    /// `lstat` of one path as a scan finds it: true with `st` filled when it is there under real
    /// directories (never through a symlinked parent), false when it is not, nil when a scan
    /// never reports that name (syncthing's own names, temporary files, names not NFC).
    func look(_ path: String, _ st: inout stat) -> Bool? {
        let components = WireName.components(path, omittingEmpty: false)
        guard !path.isEmpty, !components.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }),
            !Self.internalRootNames.contains(String(components[0])),
            !Self.isTemporary(String(components.last!)),
            path.utf8.allSatisfy({ $0 < 0x80 }) || path.utf8.elementsEqual(path.precomposedStringWithCanonicalMapping.utf8)
        else { return nil }
        var parent = root
        for component in components.dropLast() {
            parent += "/" + component
            guard lstat(parent, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { return false }
        }
        return lstat(root + "/" + path, &st) == 0
    }

    /// Whether `path` on disk has the stat `recorded` says (kind, size, mtime, inode,
    /// permissions, a symlink's target), or is absent where nothing is recorded; names a scan
    /// never reports count as unchanged. Nothing is read but metadata.
    public func isUnchanged(_ path: String, recorded: LocalFile?) -> Bool {
        var st = stat()
        guard let present = look(path, &st) else { return true }
        guard present, let (now, _) = Self.entry(path, st, absolute: root + "/" + path, previous: nil, blockSizeHint: { _, _ in nil }) else {
            return recorded == nil
        }
        guard let recorded else { return false }
        // A directory's size and mtime move with every name made or removed in it: what is
        // inside is looked at by its own paths.
        if recorded.kind == .directory && now.kind == .directory { return recorded.inode == now.inode && recorded.permissions == now.permissions }
        return recorded.sameStat(as: now) && recorded.permissions == now.permissions && recorded.symlinkTarget == now.symlinkTarget
    }

    /// The folder exists and has its `.stfolder` marker (an unmounted disk must not look empty).
    func checkFolder() throws(ScanError) {
        var info = stat()
        guard lstat(root, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw ScanError(.folderMissing, path: root, "the folder does not exist or is not a directory")
        }
        guard lstat(root + "/.stfolder", &info) == 0 else {
            throw ScanError(
                .markerMissing, path: root,
                "the folder marker .stfolder is missing (an unmounted disk must not look like \"everything deleted\"); "
                    + "if the folder really is here, create it: mkdir \(root)/.stfolder")
        }
    }

    /// One entry from its `lstat`, carrying over the previous record's synced version and, when
    /// its stat and block size are unchanged, its blocks (`reused`); nil for what is not a
    /// file, directory or symlink.
    static func entry(
        _ path: String, _ st: stat, absolute: String, previous old: LocalFile?, blockSizeHint: (String, Int64) -> Int32?,
        stored: Bool = false
    ) -> (entry: LocalFile, reused: Bool)? {
        let modified = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
        var entry = LocalFile(
            path: path, kind: .file, size: Int64(st.st_size), modifiedNs: modified, inode: UInt64(st.st_ino),
            permissions: UInt32(st.st_mode & 0o7777))
        entry.synced = old?.synced
        switch st.st_mode & S_IFMT {
        case S_IFDIR:
            entry.kind = .directory
            entry.size = 0
        case S_IFLNK:
            entry.kind = .symlink
            entry.size = 0
            entry.symlinkTarget = Self.readLink(absolute) ?? ""
        case S_IFREG:
            let wanted = blockSizeHint(path, entry.size) ?? BlockSize.forFileSize(entry.size, previous: old?.blockSize)
            if stored, let old, old.sameStat(as: entry) {
                entry.contentHash = old.contentHash
                return (entry, true)
            }
            if let old, old.sameStat(as: entry), old.blockSize == wanted, !old.blocks.isEmpty {
                entry.contentHash = old.contentHash
                entry.blockSize = old.blockSize
                entry.blocks = old.blocks
                return (entry, true)
            }
            entry.blockSize = wanted
        default:
            return nil
        }
        return (entry, false)
    }

    /// Scans only `paths` again, into `tree` (the last scan): each is looked at with `lstat` as
    /// the whole scan would find it — under real directories only, never through a symlinked
    /// parent, skipping syncthing's own names — and hashed when its stat changed. A path gone
    /// from disk leaves the tree (a directory with everything under it). Directories are not
    /// walked: a caller that names a directory names what it wants looked at under it.
    /// - Throws: ``ScanError`` when the folder or its `.stfolder` marker is missing.
    public func rescan(
        _ paths: some Sequence<String>, in tree: inout LocalTree, blockSizeHint: (String, Int64) -> Int32? = { _, _ in nil },
        warn: (String) -> Void = { _ in }
    ) throws(ScanError) -> Statistics {
        try checkFolder()
        var statistics = Statistics()
        var toHash: [LocalFile] = []
        func removeUnder(_ directory: String) {
            let prefix = directory + "/"
            for file in tree.files(withPrefix: prefix) { tree[file.path] = nil }
        }
        for path in Set(paths) where !path.isEmpty {
            var st = stat()
            let present = look(path, &st)
            if present == nil { continue }
            let absolute = root + "/" + path
            let old = tree[path]
            guard present == true,
                let (entry, reused) = Self.entry(
                    path, st, absolute: absolute, previous: old, blockSizeHint: blockSizeHint, stored: storedFileReader != nil)
            else {
                // Gone, or not something a scan keeps (a socket, a fifo).
                tree[path] = nil
                if old?.kind == .directory { removeUnder(path) }
                continue
            }
            if old?.kind == .directory && entry.kind != .directory { removeUnder(path) }
            if entry.kind == .file && !reused {
                toHash.append(entry)
            } else {
                if entry.kind == .file { statistics.reusedFiles += 1 }
                tree[path] = entry
            }
        }
        let hashed = hashAll(toHash, warn: warn)
        for (file, result) in zip(toHash, hashed) {
            if let result {
                tree[file.path] = result
                statistics.hashedFiles += 1
                statistics.hashedBytes += result.size
            } else {
                tree[file.path] = nil
            }
        }
        statistics.entries = tree.count
        return statistics
    }

    private func hashAll(_ files: [LocalFile], warn: (String) -> Void) -> [LocalFile?] {
        guard !files.isEmpty else { return [] }
        let results = UnsafeMutableBufferPointer<LocalFile?>.allocate(capacity: files.count)
        results.initialize(repeating: nil)
        defer { results.deallocate() }
        let failures = Mutex<[String]>([])
        let next = Mutex(0)
        let root = self.root
        let workers = min(concurrency, files.count)
        nonisolated(unsafe) let output = results
        DispatchQueue.concurrentPerform(iterations: workers) { _ in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
            defer { buffer.deallocate() }
            while true {
                let index = next.withLock { value -> Int in
                    defer { value += 1 }
                    return value
                }
                guard index < files.count else { return }
                var file = files[index]
                if let reader = storedFileReader {
                    output[index] = Self.readStored(file, root: root, reader: reader)
                    continue
                }
                do {
                    let (blocks, hash) = try Self.hashFile(root + "/" + file.path, blockSize: Int(file.blockSize), buffer: buffer)
                    file.blocks = blocks
                    file.contentHash = hash
                    file.size = blocks.reduce(0) { $0 + Int64($1.size) }
                    output[index] = file
                } catch {
                    failures.withLock { $0.append("\(root)/\(file.path): skipped: \(error)") }
                }
            }
        }
        for failure in failures.withLock({ $0 }) { warn(failure) }
        return Array(results)
    }

    /// A stored file as its trailer describes it (``storedFileReader``): the content and the
    /// version it holds, recorded as synced; nil when it cannot be opened.
    static func readStored(_ file: LocalFile, root: String, reader: StoredFileReader) -> LocalFile? {
        let fd = open(root + "/" + file.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var stored = file
        stored.blocks = []
        if let (hash, version) = reader(file.path, fd, file.size) {
            stored.contentHash = hash
            stored.synced = SyncedVersion(version: version, contentHash: hash)
        } else {
            stored.contentHash = unreadableStoredFile
            stored.synced = nil
        }
        return stored
    }

    /// Reads a file once and returns its blocks and content hash.
    public static func hashFile(
        _ path: String, blockSize: Int, buffer: UnsafeMutableRawBufferPointer
    ) throws(ScanError) -> ([LocalBlock], ContentHash) {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw ScanError(.io, path: path, "cannot open: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
        var blocks: [LocalBlock] = []
        var summary = SHA256()
        // One block may span several reads of the buffer (blocks above 1 MiB).
        var blockHasher = SHA256()
        var weak: uLong = adler32(0, nil, 0)
        var inBlock = 0
        func finishBlock() {
            let hash = ContentHash(blockHasher.finalize())
            let weakHash = inBlock == 0 ? 0 : UInt32(weak)
            blocks.append(LocalBlock(hash: hash, weakHash: weakHash, size: Int32(inBlock)))
            // The content hash covers the block hashes only (BEPFileInfo.blocksHash): equal for
            // equal bytes whichever syncthing generation announced them.
            summary.update(data: hash.bytes)
            blockHasher = SHA256()
            weak = adler32(0, nil, 0)
            inBlock = 0
        }
        while true {
            let n = read(fd, buffer.baseAddress, buffer.count)
            if n < 0 {
                if errno == EINTR { continue }
                throw ScanError(.io, path: path, "read failed: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            var offset = 0
            while offset < n {
                let take = min(n - offset, blockSize - inBlock)
                let chunk = UnsafeRawBufferPointer(rebasing: buffer[offset..<(offset + take)])
                blockHasher.update(bufferPointer: chunk)
                weak = adler32(weak, chunk.baseAddress!.assumingMemoryBound(to: Bytef.self), uInt(take))
                inBlock += take
                offset += take
                if inBlock == blockSize { finishBlock() }
            }
        }
        // The last (short) block; an empty file still has exactly one, empty block.
        if inBlock > 0 || blocks.isEmpty { finishBlock() }
        return (blocks, ContentHash(summary.finalize()))
    }

    public static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(path, &buffer, buffer.count - 1)
        guard n >= 0 else { return nil }
        return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
