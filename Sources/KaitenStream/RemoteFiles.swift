import Crypto
import Foundation
import KaitenConfig
import KaitenIndex
import KaitenPeer
import KaitenProtocol
import KaitenScan
import KaitenSync
import KaitenTransfer
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

final class Counter: Sendable {
    private let count = Mutex(0)
    var value: Int { count.withLock { $0 } }
    func increment() { count.withLock { $0 += 1 } }
    func add(_ n: Int) { count.withLock { $0 += n } }
}

/// A bounded LRU cache of verified blocks, by content hash.
final class BlockCache: Sendable {
    private struct State {
        var blocks: [ContentHash: (data: Data, tick: UInt64)] = [:]
        var bytes = 0
        var tick: UInt64 = 0
    }

    let capacity: Int
    private let state = Mutex(State())

    init(capacity: Int) { self.capacity = capacity }

    var usage: (bytes: Int, blocks: Int) { state.withLock { ($0.bytes, $0.blocks.count) } }

    func get(_ hash: ContentHash) -> Data? {
        state.withLock { s in
            guard let hit = s.blocks[hash] else { return nil }
            s.tick += 1
            s.blocks[hash] = (hit.data, s.tick)
            return hit.data
        }
    }

    func put(_ hash: ContentHash, _ data: Data) {
        guard data.count <= capacity else { return }
        state.withLock { s in
            s.tick += 1
            if let old = s.blocks.updateValue((data, s.tick), forKey: hash) { s.bytes -= old.data.count }
            s.bytes += data.count
            while s.bytes > capacity, let oldest = s.blocks.min(by: { $0.value.tick < $1.value.tick }) {
                s.bytes -= oldest.value.data.count
                s.blocks.removeValue(forKey: oldest.key)
            }
        }
    }
}

/// Files of the global index, readable without selecting them: from a current local copy when
/// there is one, else block by block from the peers that hold them, every block verified.
public final class RemoteFiles: @unchecked Sendable {
    public let home: KaitenHome
    let logger: Logger
    let timeout: Double
    /// How long a read waits for one block before it gives up: a peer that holds the
    /// connection open but answers nothing (stopped, frozen) must not hang every reader.
    public static let blockTimeout: Duration = .seconds(20)
    /// This reader's wait for one block (the mount's --read-timeout).
    public let readTimeout: Duration
    let cache: BlockCache
    /// The peer connections, their index intake and this device's announcements.
    public let sessions: PeerSessions
    private let lock = NSLock()
    /// The logs read so far, with the size of the file when each was read: one that grew
    /// (the sessions took a peer's update in, another process synced) is read again.
    private var logs: [String: (log: IndexLog, size: Int64)] = [:]
    private var locals: [String: LocalTree] = [:]
    private let fetchedBlocks = Counter()
    private let fetchedBytes = Counter()
    /// Blocks being fetched now, by hash: a second reader of the same block (a decoder that
    /// seeks back, two requests for one range) waits for the same fetch.
    private let inFlight = Mutex<[ContentHash: Task<Data, Error>]>([:])

    /// Blocks come through the running service instead of this process's own connections.
    public let relay: BlockSource.Relay?
    /// Verified blocks kept on disk (the mount's), behind the memory cache.
    public let disk: DiskBlockCache?

    /// Blocks fetched from peers so far (cache hits and local reads not counted).
    public var blocksFetched: Int { fetchedBlocks.value }

    /// What the block cache holds now, and its limit.
    public var cacheUsage: (bytes: Int, blocks: Int, limit: Int) {
        let (bytes, blocks) = cache.usage
        return (bytes, blocks, cache.capacity)
    }
    /// Their bytes.
    public var bytesFetched: Int { fetchedBytes.value }

    /// - Parameter sessions: the sessions to read through (a service's); new ones when nil.
    /// - Parameter relay: beside a running service (which holds the peers' connections),
    ///   blocks are fetched through it; nothing is dialled then and `connect` is not called.
    public init(
        home: KaitenHome, cacheBytes: Int = 16 << 20, timeout: Double = 120, logger: Logger, sessions: PeerSessions? = nil,
        relay: BlockSource.Relay? = nil, disk: DiskBlockCache? = nil, readTimeout: Duration = RemoteFiles.blockTimeout
    ) {
        self.home = home
        self.readTimeout = readTimeout
        self.relay = relay
        self.disk = disk
        self.logger = logger
        self.timeout = timeout
        self.cache = BlockCache(capacity: cacheBytes)
        self.sessions = sessions ?? PeerSessions(home: home, timeout: timeout, logger: logger, serve: BlockServer(home: home).answer)
    }

    /// Refreshes the index of `folders` (all when empty) and keeps the peer connections.
    public func connect(folders: [String] = [], warn: @escaping @Sendable (String) -> Void) async throws {
        let reports = try await sessions.connect(folders: folders, warn: warn)
        for r in reports where !r.ok {
            warn("\(r.folder): \(r.peerLabel): \(r.problem ?? "unreachable")")
        }
    }

    /// The open peer connections: those dialled, and those peers started.
    public func connections() throws -> [DeviceID: PeerConnection] {
        sessions.connections()
    }

    public func close() async {
        await sessions.close()
    }

    private func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// One file of the global index, ready to read.
    public struct Entry: Sendable {
        public let folder: String
        public let global: FileEntry
        public let blocks: [BEPBlockInfo]
        public let holders: [DeviceID]
        /// A local copy with exactly this content, when there is one.
        public let localPath: String?
        let source: BlockSource?
        /// Why its bytes cannot be read now (no local copy, no connected peer holds it), when
        /// it was looked up without requiring them.
        public let unreachable: StreamError?

        public var size: Int64 { global.size }
        /// Changes whenever the global version does.
        public var etag: String { "\"\(global.contentHash.hex.prefix(32))\"" }
    }

    public static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : -1
    }

    /// A folder's log as it is now, and the local scan read with it: the one copy this
    /// reader keeps (a mount's view of the tree reads the same, rather than mapping its own).
    public func current(folder: String) throws(StreamError) -> (log: IndexLog, local: LocalTree) {
        do {
            return try withLock {
                // The sessions append what peers announce as it arrives, and another kaiten
                // process (a timer's `index sync`, an `apply`) may have appended: the log is
                // read again when the file changed size, so what is served is current.
                let onDisk = Self.fileSize(home.home.indexLogPath(folderID: folder))
                if let open = logs[folder], open.size != onDisk {
                    // Not closed here: a request still reading blocks through it keeps it open
                    // until it is done (the log closes when the last reference goes).
                    logs[folder] = nil
                }
                if logs[folder] == nil {
                    logs[folder] = (try PeerGenerations.openLog(home: home, folder: folder, readOnly: true), onDisk)
                    locals[folder] = ScanCache.load(path: home.home.scanCachePath(folderID: folder))
                }
                return (logs[folder]!.log, locals[folder]!)
            }
        } catch {
            throw StreamError(.unavailable, "\(folder): cannot read the index: \(error)")
        }
    }

    /// Looks a path up. Errors say why in words: not in the index, deleted, a directory, no peer.
    /// - Parameter reachable: whether a file no connected peer holds (and with no local copy) is
    ///   an error; when false it is returned with ``Entry/unreachable`` set (its content hash
    ///   is still known: a cache keyed by it can answer).
    public func entry(folder: String, path: String, reachable: Bool = true) throws(StreamError) -> Entry {
        guard let config = home.config.folders.first(where: { $0.id == folder }) else {
            throw StreamError(.notFound, "folder \"\(folder)\" is not configured")
        }
        let connections = sessions.connections()
        let (log, local) = try current(folder: folder)
        guard let g = log.index.global(path) else {
            throw StreamError(.notFound, "\(folder)/\(path): not in the global index")
        }
        guard !g.file.isDeleted else { throw StreamError(.notFound, "\(folder)/\(path): deleted on every peer") }
        guard g.file.type == .file else {
            throw StreamError(.notFound, "\(folder)/\(path): a \(g.file.type == .directory ? "directory" : "symlink"), not a file")
        }
        var localPath: String?
        if let mine = local[path], mine.kind == .file, mine.contentHash == g.file.contentHash {
            let full = config.path + "/" + path
            var info = stat()
            if lstat(full, &info) == 0, Int64(info.st_size) == mine.size,
                Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec) == mine.modifiedNs
            {
                localPath = full
            }
        }
        let blocks: [BEPBlockInfo]
        do {
            blocks = try log.blocks(of: g.file)
        } catch {
            throw StreamError(.unavailable, "\(folder)/\(path): \(error)")
        }
        var unreachable: StreamError?
        if localPath == nil && relay == nil && !g.holders.contains(where: { connections[$0] != nil }) {
            let error = StreamError(
                .noHolderConnected,
                "\(folder)/\(path): no connected peer holds it (held by \(g.holders.map(\.shortDescription).joined(separator: ", ")))")
            if reachable { throw error }
            unreachable = error
        }
        let source = BlockSource(folderID: folder, root: config.path, connections: connections, tree: LocalTree(), relay: relay)
        return Entry(
            folder: folder, global: g.file, blocks: blocks, holders: g.holders, localPath: localPath, source: source, unreachable: unreachable)
    }

    /// One block of the current global version of `path`, verified: for a process beside this
    /// one (the control socket) that has no connections of its own. A block the current
    /// version does not have (the file changed since the asker read its index) is refused.
    public func block(folder: String, path: String, offset: Int64, size: Int32, hash: Data) async throws -> Data {
        let entry = try entry(folder: folder, path: path)
        guard entry.blocks.contains(where: { $0.offset == offset && $0.size == size && $0.hash == hash }) else {
            throw StreamError(.notFound, "\(folder)/\(path): no block of \(size) bytes at offset \(offset) with that hash in the current version (it changed on the peers; read the index again)")
        }
        guard size > 0 else { return Data() }
        var data = Data(capacity: Int(size))
        try await read(entry, range: offset...(offset + Int64(size) - 1), window: 1) { data.append($0) }
        return data
    }

    /// Hands the bytes of `range` to `body` in order, a block's worth at a time; fetches only
    /// the blocks that cover the range (several at once), from the cache when they are there.
    public func read(_ entry: Entry, range: ClosedRange<Int64>, window: Int = 8, _ body: (Data) async throws -> Void) async throws {
        if let localPath = entry.localPath {
            let fd = open(localPath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            if fd >= 0 {
                defer { Glibc.close(fd) }
                var offset = range.lowerBound
                while offset <= range.upperBound {
                    let count = Int(min(Int64(1 << 20), range.upperBound - offset + 1))
                    var data = Data(count: count)
                    let n = data.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
                    guard n == count else { throw StreamError(.unavailable, "\(localPath): short read") }
                    try await body(data)
                    offset += Int64(count)
                }
                return
            }
        }
        let needed = entry.blocks.filter { $0.offset + Int64($0.size) > range.lowerBound && $0.offset <= range.upperBound }
        guard !needed.isEmpty else { return }
        let file = Self.request(for: entry)
        guard let source = entry.source else { throw StreamError(.unavailable, "no block source") }
        func fetch(_ block: BEPBlockInfo) -> Task<Data, Error> { self.fetch(block, of: file, holders: entry.holders, from: source) }
        // Fetches are not cancelled when this reader stops early (the client went away, or a
        // decoder seeked): another reader may be waiting on the same block, and the next request
        // of a seeking decoder usually wants it; it lands in the cache.
        var pending: [Task<Data, Error>] = []
        var next = 0
        while next < needed.count && pending.count < window {
            pending.append(fetch(needed[next]))
            next += 1
        }
        var index = 0
        while !pending.isEmpty {
            let task = pending.removeFirst()
            let data: Data
            do {
                data = try await Self.value(of: task, within: readTimeout, file: file.name)
            } catch let error as ApplyError {
                throw StreamError(.peerFailed, error.description)
            }
            let block = needed[index]
            index += 1
            let from = Int(max(range.lowerBound, block.offset) - block.offset)
            let to = Int(min(range.upperBound + 1, block.offset + Int64(block.size)) - block.offset)
            try await body(from == 0 && to == data.count ? data : data.subdata(in: from..<to))
            // The next block once this one is taken: `window` blocks ahead of what was sent,
            // never one more (a client that reads one block and goes costs one block).
            if next < needed.count {
                pending.append(fetch(needed[next]))
                next += 1
            }
        }
    }

    /// Starts fetching the blocks that cover `range` (into the caches) without waiting for
    /// them: a sequential reader's next blocks, read ahead.
    public func prefetch(_ entry: Entry, range: ClosedRange<Int64>) {
        guard entry.localPath == nil, let source = entry.source else { return }
        let file = Self.request(for: entry)
        for block in entry.blocks where block.offset + Int64(block.size) > range.lowerBound && block.offset <= range.upperBound {
            _ = fetch(block, of: file, holders: entry.holders, from: source)
        }
    }

    static func request(for entry: Entry) -> BEPFileInfo {
        var request = BEPFileInfo()
        request.name = entry.global.name
        request.size = entry.global.size
        request.blockSize = entry.global.blockSize
        return request
    }

    /// One block, shared with any reader fetching it now: from the memory cache, the disk
    /// cache, else a peer (verified by the source), then kept in both caches.
    func fetch(_ block: BEPBlockInfo, of file: BEPFileInfo, holders: [DeviceID], from source: BlockSource) -> Task<Data, Error> {
        guard let hash = ContentHash(data: block.hash) else {
            return Task { try await source.block(block, of: file, holders: holders) }
        }
        let cache = self.cache
        let disk = self.disk
        return inFlight.withLock { running in
            if let shared = running[hash] { return shared }
            let task = Task {
                defer { _ = self.inFlight.withLock { $0.removeValue(forKey: hash) } }
                if let hit = cache.get(hash) { return hit }
                if let hit = disk?.get(hash) {
                    cache.put(hash, hit)
                    return hit
                }
                let data = try await source.block(block, of: file, holders: holders)
                self.fetchedBlocks.increment()
                self.fetchedBytes.add(data.count)
                cache.put(hash, data)
                disk?.put(hash, data)
                return data
            }
            running[hash] = task
            return task
        }
    }

    /// The result of a shared block fetch, or an error once `timeout` passes without it. The
    /// fetch itself goes on (another reader may want the block; it lands in the cache).
    static func value(of task: Task<Data, Error>, within timeout: Duration, file: String) async throws -> Data {
        let waiting = FirstResult()
        let late = StreamError(.unavailable, "\(file): no peer holding it answered within \(timeout.components.seconds) s (stopped or cut off?)")
        return try await withCheckedThrowingContinuation { continuation in
            waiting.set(continuation)
            let timer = Task {
                do { try await Task.sleep(for: timeout) } catch { return }
                waiting.finish(.failure(late))
            }
            Task {
                waiting.finish(await task.result)
                timer.cancel()
            }
        }
    }

    /// A continuation resumed by whichever result comes first; the others are dropped.
    final class FirstResult: Sendable {
        private let slot = Mutex<CheckedContinuation<Data, Error>?>(nil)
        func set(_ continuation: CheckedContinuation<Data, Error>) { slot.withLock { $0 = continuation } }
        func finish(_ result: Result<Data, Error>) {
            slot.withLock { slot in
                slot?.resume(with: result)
                slot = nil
            }
        }
    }
}
