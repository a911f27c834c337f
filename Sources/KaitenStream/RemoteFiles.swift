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
    let cache: BlockCache
    private let lock = NSLock()
    private var session: PeerSession?
    private var logs: [String: IndexLog] = [:]
    private var locals: [String: LocalTree] = [:]
    /// Connections peers started, by device.
    private var accepted: [DeviceID: PeerConnection] = [:]
    /// Accepted sessions one at a time: each holds the index logs for writing while it runs.
    private let acceptQueue = SerialQueue()
    /// What peers announced on the open connections after their first exchange, by folder,
    /// path and device: what is served follows a peer's change at once, without waiting for
    /// the next index sync to put it in the log (which the peer then sends again).
    private var updates: [String: [String: [DeviceID: BEPFileInfo]]] = [:]
    private var watchers: [Task<Void, Never>] = []

    /// Takes in the index updates `connection` carries from now on (it is past its exchange).
    private func watchUpdates(_ connection: PeerConnection) {
        let device = connection.deviceID
        let task = Task { [weak self] in
            for await event in connection.events {
                guard case .index(let folder, let files, _) = event, let self else { continue }
                self.withLock {
                    for file in files { self.updates[folder, default: [:]][file.name, default: [:]][device] = file }
                }
            }
        }
        withLock { watchers.append(task) }
    }
    private let fetchedBlocks = Counter()

    /// Blocks fetched from peers so far (cache hits and local reads not counted).
    public var blocksFetched: Int { fetchedBlocks.value }

    public init(home: KaitenHome, cacheBytes: Int = 64 << 20, timeout: Double = 120, logger: Logger) {
        self.home = home
        self.logger = logger
        self.timeout = timeout
        self.cache = BlockCache(capacity: cacheBytes)
    }

    /// Refreshes the index of `folders` (all when empty) and keeps the peer connections.
    public func connect(folders: [String] = [], warn: (String) -> Void) async throws {
        let server = BlockServer(home: home)
        let (reports, fresh) = try await IndexSync.runKeepingConnections(
            home: home, folders: folders, timeout: timeout, logger: logger, serve: server.answer, warn: warn)
        for r in reports where !r.ok {
            warn("\(r.folder): \(r.name.isEmpty ? String(r.deviceID.prefix(7)) : r.name): \(r.problem ?? "unreachable")")
        }
        let old = withLock { () -> PeerSession? in
            let old = session
            session = fresh
            logs = [:]
            locals = [:]
            return old
        }
        await old?.close(reason: "reconnecting")
        for connection in fresh.connections.values { watchUpdates(connection) }
    }

    /// Redials, with backoff (2 s doubling to 60 s), every configured peer that shares a folder,
    /// has a tcp:// address and has no open connection — one that restarted, a connection cut —
    /// so that a long-running `serve` stays useful. Cancel the task to stop.
    public func keepConnected(warn: @escaping @Sendable (String) -> Void) -> Task<Void, Never> {
        let home = self.home
        let me = home.identity.deviceID
        let wanted = home.config.devices.filter { device in
            device.id != me && !device.addresses.compactMap(PeerAddress.init).isEmpty
                && home.config.folders.contains { $0.devices.contains(device.id) }
        }.map(\.id)
        return Task {
            var delay: [DeviceID: Int] = [:]
            var due: [DeviceID: ContinuousClock.Instant] = [:]
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                let open = (try? self.connections()) ?? [:]
                let now = ContinuousClock.now
                let missing = Set(wanted.filter { open[$0] == nil && (due[$0].map { $0 <= now } ?? true) })
                guard !missing.isEmpty, !Task.isCancelled else { continue }
                let reached = ReachedPeers()
                // In turn with accepted sessions: each writes the index logs.
                await acceptQueue.run {
                    // A peer may have dialled in while this waited its turn.
                    let current = (try? self.connections()) ?? [:]
                    let still = missing.filter { current[$0] == nil }
                    reached.set(missing.subtracting(still))
                    guard !still.isEmpty else { return }
                    let server = BlockServer(home: self.home)
                    guard let (_, fresh) = try? await IndexSync.runKeepingConnections(
                        home: self.home, folders: [], timeout: self.timeout, logger: self.logger, serve: server.answer, only: still)
                    else { return }
                    self.withLock {
                        for (device, connection) in fresh.connections where connection.isOpen { self.accepted[device] = connection }
                        self.logs = [:]
                    }
                    for connection in fresh.connections.values { self.watchUpdates(connection) }
                    reached.set(missing.subtracting(still).union(fresh.connections.keys))
                }
                for device in missing {
                    if reached.value.contains(device) {
                        warn("reconnected to \(device.shortDescription)")
                        delay[device] = nil
                        due[device] = nil
                    } else {
                        let next = min(60, (delay[device] ?? 1) * 2)
                        delay[device] = next
                        due[device] = now + .seconds(next)
                    }
                }
            }
        }
    }

    /// The open peer connections: those dialled at `connect`, and those peers started.
    public func connections() throws -> [DeviceID: PeerConnection] {
        withLock {
            var all = session?.openConnections ?? [:]
            for (device, connection) in accepted where connection.isOpen && all[device] == nil { all[device] = connection }
            return all
        }
    }

    /// Listens for peers on the config's tcp listen addresses (port 0 picks a free one), each
    /// connection taken in by ``accept(_:warn:)``; only configured peers get past TLS. An address
    /// that cannot be bound (a syncthing on the same machine has it) is said and skipped.
    /// Returns the listeners and the addresses bound.
    public func listen(warn: @escaping @Sendable (String) -> Void) async -> (listeners: [PeerListener], addresses: [String]) {
        let me = home.identity.deviceID
        let configured = Set(home.config.devices.map(\.id)).subtracting([me])
        let hello = KaitenVersion.hello(deviceName: home.config.device(id: me)?.name ?? "")
        var listeners: [PeerListener] = []
        var addresses: [String] = []
        for text in home.config.options.tcpListenAddresses {
            guard let address = PeerAddress.listening(text) else { continue }
            do {
                let listener = try await PeerListener.bind(
                    to: address, identity: home.identity, hello: hello, logger: logger, isAllowed: { configured.contains($0) },
                    onRejected: { id, remote in warn("refused a connection from \(id?.description ?? "a device without a certificate") at \(remote): not a configured peer") },
                    onConnection: { connection in await self.accept(connection, warn: warn) })
                listeners.append(listener)
                addresses.append("tcp://\(address.host.contains(":") ? "[\(address.host)]" : address.host):\(listener.localPort)")
            } catch {
                warn("cannot listen for peers at \(text): \(error); peers cannot dial this device")
            }
        }
        return (listeners, addresses)
    }

    /// Takes in a connection a peer started (it dialled this device): its index goes into the
    /// logs, this device's index goes to it, and its block requests are answered, as for a
    /// connection Kaiten dialled. A second connection to a peer already connected is closed
    /// ("already connected"), as syncthing closes it, so that exactly one stays.
    public func accept(_ connection: PeerConnection, warn: @escaping @Sendable (String) -> Void) async {
        await acceptQueue.run {
            let duplicate = self.withLock {
                (self.session?.openConnections[connection.deviceID] ?? self.accepted[connection.deviceID])?.isOpen == true
            }
            if duplicate {
                await connection.close(reason: "already connected")
                return
            }
            // The logs this server reads are let go while the session writes them; the next
            // request reopens them with what the peer sent.
            self.withLock {
                self.logs = [:]
                self.locals = [:]
            }
            do {
                let server = BlockServer(home: self.home)
                let (reports, _) = try await IndexSync.accept(
                    connection, home: self.home, timeout: self.timeout, serve: server.answer, warn: warn)
                for r in reports where !r.ok { warn("\(r.folder): \(r.name.isEmpty ? String(r.deviceID.prefix(7)) : r.name): \(r.problem ?? "")") }
                self.withLock {
                    self.accepted[connection.deviceID] = connection
                    self.logs = [:]
                }
                self.watchUpdates(connection)
            } catch {
                warn("\(connection.label): \(error)")
                await connection.close(reason: "\(error)")
            }
        }
    }

    public func close() async {
        let (s, others) = withLock { () -> (PeerSession?, [PeerConnection]) in
            defer {
                session = nil
                accepted = [:]
                for task in watchers { task.cancel() }
                watchers = []
            }
            return (session, Array(accepted.values))
        }
        await s?.close(reason: "done")
        for connection in others { await connection.close(reason: "done") }
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

        public var size: Int64 { global.size }
        /// Changes whenever the global version does.
        public var etag: String { "\"\(global.contentHash.hex.prefix(32))\"" }
    }

    static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : -1
    }

    /// Looks a path up. Errors say why in words: not in the index, deleted, a directory, no peer.
    public func entry(folder: String, path: String) throws(StreamError) -> Entry {
        guard let config = home.config.folders.first(where: { $0.id == folder }) else {
            throw StreamError(.notFound, "folder \"\(folder)\" is not configured")
        }
        let (log, local, connections, fresh): (IndexLog, LocalTree, [DeviceID: PeerConnection], [DeviceID: BEPFileInfo])
        do {
            (log, local, connections, fresh) = try withLock {
                // Another kaiten process (a timer's `index sync`, an `apply`) may have appended
                // since: the log is read again when it grew, so what is served is current.
                let onDisk = Self.fileSize(home.home.indexLogPath(folderID: folder))
                if let open = logs[folder], open.fileSize != onDisk {
                    // Not closed here: a request still reading blocks through it keeps it open
                    // until it is done (the log closes when the last reference goes).
                    logs[folder] = nil
                }
                if logs[folder] == nil {
                    logs[folder] = try PeerGenerations.openLog(home: home, folder: folder, readOnly: true)
                    locals[folder] = ScanCache.load(path: home.home.scanCachePath(folderID: folder))
                }
                var open = session?.openConnections ?? [:]
                for (device, connection) in accepted where connection.isOpen && open[device] == nil { open[device] = connection }
                return (logs[folder]!, locals[folder]!, open, updates[folder]?[path] ?? [:])
            }
        } catch {
            throw StreamError(.unavailable, "\(folder): cannot read the index: \(error)")
        }
        var announcedNow: BEPFileInfo?
        var found = log.index.global(path)
        if !fresh.isEmpty {
            // The log's view with what the peers announced since: syncthing's rule picks again.
            var versions: [DeviceID: FileEntry] = [:]
            for device in log.checkpoints.keys { if let entry = log.index.entry(path, from: device) { versions[device] = entry } }
            for (device, file) in fresh { versions[device] = FileEntry(announced: file) }
            if let winner = GlobalIndex.winner(path, versions, rule: log.conflictRule), winner.file.version != found?.file.version {
                found = winner
                announcedNow = winner.holders.lazy.compactMap { fresh[$0] }.first
            }
        }
        guard let g = found else {
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
            blocks = try announcedNow?.blocks ?? log.blocks(of: g.file)
        } catch {
            throw StreamError(.unavailable, "\(folder)/\(path): \(error)")
        }
        if localPath == nil && !g.holders.contains(where: { connections[$0] != nil }) {
            throw StreamError(
                .unavailable,
                "\(folder)/\(path): no connected peer holds it (held by \(g.holders.map(\.shortDescription).joined(separator: ", ")))")
        }
        let source = BlockSource(folderID: folder, root: config.path, connections: connections, tree: LocalTree())
        return Entry(folder: folder, global: g.file, blocks: blocks, holders: g.holders, localPath: localPath, source: source)
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
        var request = BEPFileInfo()
        request.name = entry.global.name
        request.size = entry.global.size
        request.blockSize = entry.global.blockSize
        let file = request
        let holders = entry.holders
        let cache = self.cache
        let counter = self.fetchedBlocks
        guard let source = entry.source else { throw StreamError(.unavailable, "no block source") }
        func fetch(_ block: BEPBlockInfo) -> Task<Data, Error> {
            Task {
                if let hash = ContentHash(data: block.hash), let hit = cache.get(hash) { return hit }
                let data = try await source.block(block, of: file, holders: holders)
                counter.increment()
                if let hash = ContentHash(data: block.hash) { cache.put(hash, data) }
                return data
            }
        }
        var pending: [Task<Data, Error>] = []
        var next = 0
        defer { for task in pending { task.cancel() } }
        while next < needed.count && pending.count < window {
            pending.append(fetch(needed[next]))
            next += 1
        }
        var index = 0
        while !pending.isEmpty {
            let task = pending.removeFirst()
            let data: Data
            do {
                data = try await task.value
            } catch let error as ApplyError {
                throw StreamError(.peerFailed, error.description)
            }
            if next < needed.count {
                pending.append(fetch(needed[next]))
                next += 1
            }
            let block = needed[index]
            index += 1
            let from = Int(max(range.lowerBound, block.offset) - block.offset)
            let to = Int(min(range.upperBound + 1, block.offset + Int64(block.size)) - block.offset)
            try await body(from == 0 && to == data.count ? data : data.subdata(in: from..<to))
        }
    }
}

/// Runs async work one piece after another (an actor would interleave them at every await).
/// The peers one redial round reached (written inside the serial queue, read after it).
private final class ReachedPeers: @unchecked Sendable {
    private let lock = NSLock()
    private var reached: Set<DeviceID> = []
    func set(_ value: Set<DeviceID>) { lock.withLock { reached = value } }
    var value: Set<DeviceID> { lock.withLock { reached } }
}

final class SerialQueue: @unchecked Sendable {
    private let lock = NSLock()
    private var tail: Task<Void, Never>?

    func run(_ work: @escaping @Sendable () async -> Void) async {
        let task = lock.withLock { () -> Task<Void, Never> in
            let previous = tail
            let next = Task {
                await previous?.value
                await work()
            }
            tail = next
            return next
        }
        await task.value
    }
}
