import Crypto
import Foundation
import KaitenProtocol
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Verified blocks of files read on demand, kept on disk by content hash within a byte budget
/// (`<home>/cache/blocks/ab/abcd…`): a renamed or duplicated file costs nothing twice, and what
/// was read survives a restart. Least recently used blocks go first when the budget is passed;
/// blocks of files open now (``hold(_:)``) are never evicted under their readers.
///
/// A block is checked against its name every time it is read from disk: a damaged or truncated
/// file is dropped and the block fetched again, never served. Files are written to a temporary
/// name and renamed, so a crash leaves a whole block or none under a hash's name; they are not
/// flushed (a block lost to a crash is fetched again).
public final class DiskBlockCache: Sendable {
    /// What the cache holds and did, for `kaiten status` and the mount's log.
    public struct Figures: Sendable, Equatable, Encodable {
        public var bytes: Int64 = 0
        public var blocks = 0
        public var budget: Int64 = 0
        public var hits = 0
        public var misses = 0
        public var evictions = 0
        /// Blocks found damaged on disk and dropped.
        public var dropped = 0
        /// Blocks the disk refused to keep (full, read-only, out of quota): read from the peers
        /// each time instead.
        public var unkept = 0
    }

    private struct State {
        var sizes: [ContentHash: Int32] = [:]
        /// Use order: the tick of each block's last use (older first out).
        var lastUse: [ContentHash: UInt64] = [:]
        var tick: UInt64 = 0
        /// Blocks of open files, with how many open files hold each.
        var held: [ContentHash: Int] = [:]
        var figures = Figures()
        /// Whether the last block written was refused: the log says so once per spell.
        var refusing = false
        /// The smallest block refused in the spell: only one at least as big that fits, with
        /// ``roomToEndASpell(after:)`` left beside it, ends it (a file's short last block fits in
        /// what a full disk has left, and a full one in what a refused one freed when it was
        /// removed; either way the next block is refused again).
        var smallestRefused = Int.max
    }

    public let directory: String
    public let budget: Int64
    private let state = Mutex(State())
    private let log: @Sendable (String) -> Void

    /// Opens (creating) the cache in `directory`: what is there is taken in, oldest use first
    /// by modification time (a hit touches its file), leftovers of interrupted writes removed.
    /// `log` hears when the disk starts and stops refusing blocks (a full disk).
    public init(directory: String, budget: Int64, log: @escaping @Sendable (String) -> Void = { _ in }) throws {
        self.directory = directory
        self.budget = budget
        self.log = log
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var found: [(hash: ContentHash, size: Int32, mtime: Int64)] = []
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for shard in names where shard.count == 2 {
            let shardPath = directory + "/" + shard
            for name in (try? FileManager.default.contentsOfDirectory(atPath: shardPath)) ?? [] {
                let path = shardPath + "/" + name
                guard let hash = Self.hash(named: name), name.hasPrefix(shard) else {
                    unlink(path)
                    continue
                }
                var info = stat()
                guard stat(path, &info) == 0, info.st_size > 0, info.st_size <= Int64(Int32.max) else {
                    unlink(path)
                    continue
                }
                found.append((hash, Int32(info.st_size), Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)))
            }
        }
        found.sort { $0.mtime < $1.mtime }
        state.withLock { s in
            for item in found {
                s.tick += 1
                s.sizes[item.hash] = item.size
                s.lastUse[item.hash] = s.tick
                s.figures.bytes += Int64(item.size)
            }
            s.figures.blocks = s.sizes.count
            s.figures.budget = budget
        }
        evict()
    }

    /// The default budget: 10 % of the file system the cache is on, at most 20 GiB.
    public static func defaultBudget(for directory: String) -> Int64 {
        var info = statvfs()
        var probe = directory
        while statvfs(probe, &info) != 0 && probe != "/" { probe = (probe as NSString).deletingLastPathComponent }
        let total = Int64(info.f_blocks) * Int64(info.f_frsize)
        return min(total / 10, 20 << 30)
    }

    /// A budget as the user writes it: a size (`500M`, `2G`, `1.5GiB`, bytes when bare) or a
    /// percentage of the file system the cache is on (`10%`). Nil when it is neither.
    public static func budget(_ text: String, for directory: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.hasSuffix("%") {
            guard let percent = Double(trimmed.dropLast()), percent > 0, percent <= 100 else { return nil }
            var info = statvfs()
            var probe = directory
            while statvfs(probe, &info) != 0 && probe != "/" { probe = (probe as NSString).deletingLastPathComponent }
            return Int64(Double(Int64(info.f_blocks) * Int64(info.f_frsize)) * percent / 100)
        }
        let units: [(String, Double)] = [
            ("TIB", 0x1p40), ("GIB", 0x1p30), ("MIB", 0x1p20), ("KIB", 0x1p10), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3),
            ("T", 0x1p40), ("G", 0x1p30), ("M", 0x1p20), ("K", 0x1p10), ("B", 1),
        ]
        let upper = trimmed.uppercased()
        for (suffix, factor) in units where upper.hasSuffix(suffix) {
            guard let number = Double(upper.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)), number >= 0 else { return nil }
            return Int64(number * factor)
        }
        return Int64(trimmed).flatMap { $0 >= 0 ? $0 : nil }
    }

    public var figures: Figures { state.withLock { $0.figures } }

    /// How many of `hashes` a cache in `directory` holds, from the files there (for a reader
    /// that does not open the cache, such as `kaiten ls`).
    public static func count(of hashes: [ContentHash], in directory: String) -> Int {
        var info = stat()
        return hashes.reduce(0) { count, hash in
            let hex = hash.hex
            return count + (stat(directory + "/" + hex.prefix(2) + "/" + hex, &info) == 0 ? 1 : 0)
        }
    }

    func path(of hash: ContentHash) -> String {
        let hex = hash.hex
        return directory + "/" + hex.prefix(2) + "/" + hex
    }

    static func hash(named name: String) -> ContentHash? {
        guard name.count == 64 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        var index = name.startIndex
        while index < name.endIndex {
            let next = name.index(index, offsetBy: 2)
            guard let byte = UInt8(name[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return ContentHash(bytes: bytes)
    }

    public func contains(_ hash: ContentHash) -> Bool { state.withLock { $0.sizes[hash] != nil } }

    /// How many of `hashes` the cache holds.
    public func count(of hashes: [ContentHash]) -> Int {
        state.withLock { s in hashes.reduce(0) { $0 + (s.sizes[$1] != nil ? 1 : 0) } }
    }

    /// The bytes of `hashes` the cache holds.
    public func bytes(of hashes: [ContentHash]) -> Int64 {
        state.withLock { s in hashes.reduce(0) { $0 + Int64(s.sizes[$1] ?? 0) } }
    }

    /// The block, verified against its hash; nil (a miss) when it is not here or is damaged.
    public func get(_ hash: ContentHash) -> Data? {
        let known = state.withLock { s -> Bool in
            guard s.sizes[hash] != nil else {
                s.figures.misses += 1
                return false
            }
            return true
        }
        guard known else { return nil }
        let path = path(of: hash)
        guard let data = FileManager.default.contents(atPath: path), ContentHash(SHA256.hash(data: data)) == hash else {
            unlink(path)
            state.withLock { s in
                if let size = s.sizes.removeValue(forKey: hash) { s.figures.bytes -= Int64(size) }
                s.lastUse[hash] = nil
                s.figures.blocks = s.sizes.count
                s.figures.dropped += 1
                s.figures.misses += 1
            }
            return nil
        }
        state.withLock { s in
            s.tick += 1
            s.lastUse[hash] = s.tick
            s.figures.hits += 1
        }
        // The order outlives the process: a hit is the file's new modification time.
        utimensat(AT_FDCWD, path, nil, 0)
        return data
    }

    /// Keeps a verified block (its hash is the name it is kept under), then evicts what is over
    /// the budget. A block the disk refuses is not kept (the read it came for has it already):
    /// counted, said once per spell of refusals, and the partial file removed.
    public func put(_ hash: ContentHash, _ data: Data) {
        guard !data.isEmpty, Int64(data.count) <= budget, !contains(hash) else { return }
        let path = path(of: hash)
        let shard = (path as NSString).deletingLastPathComponent
        mkdir(shard, 0o700)
        let temporary = shard + "/.tmp-" + hash.hex.prefix(16) + "-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return refused(errno, size: data.count) }
        var written = 0
        var failure: Int32 = 0
        data.withUnsafeBytes { bytes in
            while written < bytes.count {
                let n = write(fd, bytes.baseAddress! + written, bytes.count - written)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else {
                    failure = n < 0 ? errno : ENOSPC
                    return
                }
                written += n
            }
        }
        close(fd)
        guard failure == 0, rename(temporary, path) == 0 else {
            let reason = failure != 0 ? failure : errno
            unlink(temporary)
            return refused(reason, size: data.count)
        }
        let smallestRefused = state.withLock { s -> Int? in
            s.tick += 1
            if s.sizes.updateValue(Int32(data.count), forKey: hash) == nil { s.figures.bytes += Int64(data.count) }
            s.lastUse[hash] = s.tick
            s.figures.blocks = s.sizes.count
            return s.refusing && data.count >= s.smallestRefused ? s.smallestRefused : nil
        }
        if let smallestRefused, let free = freeBytes(), free >= Self.roomToEndASpell(after: smallestRefused) {
            let recovered = state.withLock { s in
                defer { (s.refusing, s.smallestRefused) = (false, Int.max) }
                return s.refusing
            }
            if recovered { log("cache: blocks are kept in \(directory) again") }
        }
        evict()
    }

    /// The free space a spell of refusals ends with: twice the smallest block refused, and at
    /// least 1 MiB. A disk at its edge keeps a block now and then (one that fits in what a
    /// refused block's removal freed) without the log going back and forth.
    static func roomToEndASpell(after smallestRefused: Int) -> Int64 {
        max(2 * Int64(smallestRefused), 1 << 20)
    }

    /// What the cache's file system has free for this process, nil when it cannot tell.
    private func freeBytes() -> Int64? {
        var info = statvfs()
        guard statvfs(directory, &info) == 0 else { return nil }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    private func refused(_ code: Int32, size: Int) {
        let first = state.withLock { s in
            s.figures.unkept += 1
            s.smallestRefused = min(s.smallestRefused, size)
            defer { s.refusing = true }
            return !s.refusing
        }
        if first {
            log("cache: \(directory) cannot keep blocks (\(String(cString: strerror(code)))): reads go on from the peers, nothing more is kept until it can")
        }
    }

    /// Blocks of a file being opened: not evicted until ``release(_:)``.
    public func hold(_ hashes: [ContentHash]) {
        state.withLock { s in for hash in hashes { s.held[hash, default: 0] += 1 } }
    }

    public func release(_ hashes: [ContentHash]) {
        state.withLock { s in
            for hash in hashes {
                guard let count = s.held[hash] else { continue }
                s.held[hash] = count > 1 ? count - 1 : nil
            }
        }
        evict()
    }

    /// Drops the blocks (`kaiten free`): those held by an open file stay. Returns the bytes freed.
    @discardableResult
    public func drop(_ hashes: [ContentHash]) -> Int64 {
        let removed: [ContentHash] = state.withLock { s in
            var removed: [ContentHash] = []
            for hash in Set(hashes) where s.held[hash] == nil {
                guard let size = s.sizes.removeValue(forKey: hash) else { continue }
                s.lastUse[hash] = nil
                s.figures.bytes -= Int64(size)
                removed.append(hash)
            }
            s.figures.blocks = s.sizes.count
            return removed
        }
        var freed: Int64 = 0
        for hash in removed {
            var info = stat()
            let path = path(of: hash)
            if stat(path, &info) == 0 { freed += Int64(info.st_size) }
            unlink(path)
        }
        return freed
    }

    /// Removes least recently used blocks not held by an open file until the cache is within
    /// its budget.
    private func evict() {
        let victims: [ContentHash] = state.withLock { s in
            guard s.figures.bytes > budget else { return [] }
            var victims: [ContentHash] = []
            for (hash, _) in s.lastUse.sorted(by: { $0.value < $1.value }) where s.held[hash] == nil {
                guard s.figures.bytes > budget else { break }
                if let size = s.sizes.removeValue(forKey: hash) { s.figures.bytes -= Int64(size) }
                s.lastUse[hash] = nil
                s.figures.evictions += 1
                victims.append(hash)
            }
            s.figures.blocks = s.sizes.count
            return victims
        }
        for hash in victims { unlink(path(of: hash)) }
    }
}
