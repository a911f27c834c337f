import Foundation
import KaitenConfig
import KaitenIndex
import KaitenMount
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenService
import KaitenStream
import KaitenSync
import KaitenTransfer
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten mount FOLDER DIR`.
public struct MountRequest: Sendable {
    public var folder: String
    public var directory: String
    /// `--cache-budget`: a size or a percentage; the default (10 % of the file system, at most
    /// 20 GiB) when nil.
    public var cacheBudget: String?
    /// How long a read waits for a peer's block before it fails with EIO.
    public var readTimeout: Duration = .seconds(10)
    /// `--read-only`: changes are refused with EROFS even in a folder that sends.
    public var readOnly = false
    /// Verified blocks kept in memory in front of the disk cache.
    static let memoryCache = 4 << 20

    public init(folder: String, directory: String, cacheBudget: String? = nil) {
        self.folder = folder
        self.directory = directory
        self.cacheBudget = cacheBudget
    }
}

/// What a mount did, said when it ends.
public struct MountReport: Sendable {
    public let cache: DiskBlockCache.Figures
    public let blocksFetched: Int
}

extension App {
    /// Opens the on-demand block cache of the home within `budget` (a size or a percentage).
    public func blockCache(budget: String?, log: @escaping @Sendable (String) -> Void = { _ in }) throws -> DiskBlockCache {
        let opened = try openForReading()
        let directory = opened.home.blockCacheDirectory
        let bytes: Int64
        if let budget {
            guard let parsed = DiskBlockCache.budget(budget, for: opened.home.path) else {
                throw ArgumentError("--cache-budget \(budget): give a size (500M, 2G, 1.5GiB) or a share of the file system (10%)")
            }
            bytes = parsed
        } else {
            bytes = DiskBlockCache.defaultBudget(for: opened.home.path)
        }
        do {
            return try DiskBlockCache(directory: directory, budget: bytes, log: log)
        } catch {
            throw ArgumentError("\(directory): cannot open the block cache: \(error.localizedDescription)")
        }
    }

    /// Shows `folder`'s global tree at `directory` until it is unmounted (`onStop`'s function,
    /// `fusermount3 -u`): files kept here are read from disk, the others fetched on read, every
    /// block verified, into the home's block cache. Beside a running service the blocks come
    /// through it, as for `cat`.
    public func mount(
        _ request: MountRequest, log: @escaping @Sendable (String) -> Void,
        onStop: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void
    ) async throws -> MountReport {
        let opened = try open()
        _ = try Self.folders([request.folder], in: opened)
        try Self.refuseCiphertext(request.folder, in: opened, "a mount")
        // With no service running, this process holds the peers' connections (syncthing takes
        // one per device): it takes the home's lock and answers on the control socket, as
        // `kaiten serve` does, so apply, cat and get beside it go through it.
        let lock = ControlClient.running(opened.home) == nil ? try ServiceRecord.lock(opened.home, role: "mount") : nil
        defer { withExtendedLifetime(lock) {} }
        let disk = try blockCache(budget: request.cacheBudget, log: log)
        // Blocks are kept on disk: a small memory cache in front of it (the mount's RSS).
        let files = try await remoteFiles(
            opened, verb: "mount", folder: request.folder, disk: disk, readTimeout: request.readTimeout, memoryBytes: MountRequest.memoryCache)
        // On its own connections: a peer that goes away is dialled again.
        let redial = files.relay == nil ? files.sessions.keepConnected(warn: log) : nil
        let endpoints: LocalEndpoints?
        if lock != nil {
            endpoints = try? await LocalEndpoints.start(
                home: opened, files: files, peerAddresses: [], folders: [request.folder], role: "mount", stop: StopSignal(), http: nil,
                controlLog: log, controlFailed: log)
        } else {
            endpoints = nil
        }
        let running = startMount(request, opened: opened, files: files, disk: disk, log: log)
        onStop { running.mount.stop() }
        let result = await running.ended.value
        await endpoints?.close()
        redial?.cancel()
        await files.close()
        if case .failure(let error) = result {
            throw ArgumentError(error.reason ?? "mount failed: \(String(cString: strerror(error.code)))")
        }
        return MountReport(cache: disk.figures, blocksFetched: files.blocksFetched)
    }
}

/// A running mount as `kaiten status` shows it: written by the mount every few seconds to
/// `state/mounts/FOLDER-PID.json`, removed when it ends.
public struct MountRecord: Codable, Sendable {
    public var folder: String
    public var directory: String
    public var pid: Int32
    public var cache_bytes: Int64
    public var cache_budget: Int64
    public var cache_hits: Int
    public var cache_misses: Int
    public var cache_evictions: Int
    public var cache_unkept: Int
    public var blocks_fetched: Int

    static func directory(_ home: Home) -> String { home.stateDirectory + "/mounts" }

    /// The records of mounts whose process still runs.
    public static func running(_ home: Home, folder: String) -> [MountRecord] {
        let directory = directory(home)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.sorted().compactMap { name -> MountRecord? in
            guard name.hasSuffix(".json"), let data = FileManager.default.contents(atPath: directory + "/" + name),
                let record = try? JSONDecoder().decode(MountRecord.self, from: data), record.folder == folder
            else { return nil }
            return kill(record.pid, 0) == 0 || errno == EPERM ? record : nil
        }
    }
}

/// A mount serving on a thread of its own (libfuse's loop blocks it) until it is unmounted.
struct RunningMount: Sendable {
    let mount: FuseMount
    let ended: Task<Result<Void, MountError>, Never>
}

extension App {
    func startMount(
        _ request: MountRequest, opened: KaitenHome, files: RemoteFiles, disk: DiskBlockCache, log: @escaping @Sendable (String) -> Void
    ) -> RunningMount {
        let type = opened.config.folders.first { $0.id == request.folder }!.type
        let writable = !request.readOnly && (type == .sendreceive || type == .sendonly)
        let view = MountedFolderView(app: self, home: opened, folder: request.folder, files: files, disk: disk, writable: writable, log: log)
        let mount = FuseMount(folder: view, at: request.directory, name: request.folder, log: log)
        let recordPath = MountRecord.directory(opened.home) + "/\(request.folder.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "folder")-\(getpid()).json"
        let folder = request.folder
        let directory = request.directory
        let figures: @Sendable () -> MountRecord = {
            let cache = disk.figures
            return MountRecord(
                folder: folder, directory: directory, pid: getpid(), cache_bytes: cache.bytes, cache_budget: cache.budget, cache_hits: cache.hits,
                cache_misses: cache.misses, cache_evictions: cache.evictions, cache_unkept: cache.unkept,
                blocks_fetched: files.blocksFetched)
        }
        // What `kaiten status` shows, kept current while the mount lives.
        let recorder = Task {
            try? FileManager.default.createDirectory(atPath: (recordPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            while !Task.isCancelled {
                if let data = try? JSONEncoder().encode(figures()) { try? data.write(to: URL(fileURLWithPath: recordPath), options: .atomic) }
                try? await Task.sleep(for: .seconds(2))
            }
        }
        let ended = Task {
            defer {
                recorder.cancel()
                unlink(recordPath)
            }
            return await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, MountError>, Never>) in
                let thread = Thread {
                    do throws(MountError) {
                        try mount.run()
                        continuation.resume(returning: .success(()))
                    } catch {
                        continuation.resume(returning: .failure(error))
                    }
                }
                thread.name = "kaiten-mount"
                thread.start()
            }
        }
        return RunningMount(mount: mount, ended: ended)
    }

    /// `kaiten run --mount FOLDER=DIR`: each mount reads through the service's control socket
    /// (the peers' connections and index the service holds), from when the socket answers
    /// until `stop`. Problems are said as `mount` events; the service goes on without the mount.
    func hostMounts(
        _ requests: [MountRequest], home: Home, stop: StopSignal, events: @escaping @Sendable (ServiceEvent) -> Void
    ) -> Task<Void, Never> {
        Task { @Sendable in
            var client: ControlClient?
            while client == nil && !stop.isSet {
                client = ControlClient.running(home)
                if client == nil { try? await Task.sleep(for: .milliseconds(100)) }
            }
            guard let client, !stop.isSet else { return }
            let opened: KaitenHome
            do {
                opened = try self.open()
            } catch {
                events(ServiceEvent("error", "mounts not made: \(error)"))
                return
            }
            var running: [(MountRequest, RunningMount, RemoteFiles, DiskBlockCache)] = []
            for request in requests {
                let log: @Sendable (String) -> Void = { events(ServiceEvent("mount", folder: request.folder, $0)) }
                do {
                    let disk = try blockCache(budget: request.cacheBudget, log: log)
                    let files = RemoteFiles(
                        home: opened, cacheBytes: MountRequest.memoryCache, logger: logger, relay: client.relay, disk: disk,
                        readTimeout: request.readTimeout)
                    let mount = startMount(request, opened: opened, files: files, disk: disk, log: log)
                    running.append((request, mount, files, disk))
                } catch {
                    log("not mounted at \(request.directory): \(error)")
                }
            }
            let mounts = running.map(\.1.mount)
            stop.onRaise { _ in for mount in mounts { mount.stop() } }
            for (request, mount, files, disk) in running {
                let result = await mount.ended.value
                await files.close()
                let figures = disk.figures
                switch result {
                case .success:
                    events(ServiceEvent(
                        "mount", folder: request.folder,
                        "unmounted \(request.directory): cache \(figures.bytes) B of \(figures.budget) B, \(figures.hits) hit(s), \(figures.evictions) eviction(s), \(figures.unkept) not kept (disk refused)"))
                case .failure(let error):
                    events(ServiceEvent("error", folder: request.folder, "mount at \(request.directory): \(error.reason ?? String(cString: strerror(error.code)))"))
                }
            }
        }
    }
}

/// A folder as the mount shows it: the global tree (what the peers announce, deleted entries
/// absent), with what is kept on disk here read from disk and everything else read from the
/// peers through the block cache. The index log, the selection and the last scan are read again
/// when their files change, so what peers add or delete shows while mounted.
final class MountedFolderView: MountedFolder, @unchecked Sendable {
    let app: App
    let home: KaitenHome
    let folder: String
    let root: String
    let files: RemoteFiles
    let disk: DiskBlockCache
    /// Changes act on the folder (a folder that sends, not mounted --read-only).
    let writable: Bool
    let log: @Sendable (String) -> Void

    /// What the view is made of, and the files' stamps it was read at.
    private struct Sources {
        var log: IndexLog
        var logSize: Int64
        var selection: Selection
        var selectionStamp: FileStamp?
        var scan: LocalTree
        var scanStamp: FileStamp?
    }

    private let lock = NSLock()
    private var sources: Sources?
    /// The block hashes of file contents asked about, by content: `find` and `du` stat every
    /// file, and decoding a file's blocks each time would cost more than the answer.
    private var blocksByContent: [ContentHash: [ContentHash]] = [:]
    private var checked = ContinuousClock.now
    private var skippedNames: Set<String> = []
    /// Names listed since the snapshot's pages were last given back.
    private var listedSinceRelease = 0

    init(
        app: App, home: KaitenHome, folder: String, files: RemoteFiles, disk: DiskBlockCache, writable: Bool,
        log: @escaping @Sendable (String) -> Void
    ) {
        self.app = app
        self.writable = writable
        self.home = home
        self.folder = folder
        self.root = home.config.folders.first { $0.id == folder }!.path
        self.files = files
        self.disk = disk
        self.log = log
    }


    /// The sources, read again when a file changed (looked at most every quarter second: a
    /// `find` asks thousands of times a second).
    private func current() throws(MountError) -> Sources {
        lock.lock()
        defer { lock.unlock() }
        if let sources, ContinuousClock.now - checked < .milliseconds(250) { return sources }
        checked = .now
        let logPath = home.home.indexLogPath(folderID: folder)
        let selectionPath = home.home.selectionPath(folderID: folder)
        let scanPath = home.home.scanCachePath(folderID: folder)
        let logSize = RemoteFiles.fileSize(logPath)
        let selectionStamp = FileStamp(selectionPath)
        let scanStamp = FileStamp(scanPath)
        if var sources {
            if sources.logSize == logSize && sources.selectionStamp == selectionStamp && sources.scanStamp == scanStamp { return sources }
            do {
                if sources.logSize != logSize {
                    sources.log = try files.current(folder: folder).log
                    sources.logSize = logSize
                }
                if sources.scanStamp != scanStamp {
                    sources.scan = ScanCache.load(path: scanPath)
                    sources.scanStamp = scanStamp
                }
                sources.selection = Selection(try Planner.readSelection(selectionPath).0, global: sources.log.index)
                sources.selectionStamp = selectionStamp
            } catch {
                // The last good view stays; the problem is said once per change.
                log("\(folder): \(error) (the mount shows the folder as it was)")
                sources.logSize = logSize
                sources.selectionStamp = selectionStamp
                sources.scanStamp = scanStamp
            }
            self.sources = sources
            return sources
        }
        do {
            let log = try files.current(folder: folder).log
            let selection = Selection(try Planner.readSelection(selectionPath).0, global: log.index)
            let made = Sources(
                log: log, logSize: logSize, selection: selection, selectionStamp: selectionStamp, scan: ScanCache.load(path: scanPath),
                scanStamp: scanStamp)
            sources = made
            return made
        } catch {
            throw MountError(EIO, "\(folder): cannot read the index or the selection: \(error)")
        }
    }

    /// A name of the folder's own (syncthing's marker and temporary files), never shown.
    static func isInternal(_ name: String) -> Bool {
        name == ".stfolder" || name == ".stignore" || name == ".stversions" || name.hasPrefix(".syncthing.") || name.hasPrefix("~syncthing~")
    }

    /// The global entry a path shows, if any: live, held by a peer, and a name this system can have.
    private func global(_ path: String, in sources: Sources) -> GlobalEntry? {
        guard let entry = sources.log.index.global(path), !entry.file.isDeleted, !entry.holders.isEmpty else { return nil }
        return entry
    }

    private func localStat(_ path: String) -> stat? {
        var info = stat()
        return lstat(path.isEmpty ? root : root + "/" + path, &info) == 0 ? info : nil
    }

    /// A path is shown from disk when it is kept (selected), when the peers do not have it, or
    /// when it is a directory.
    private func showsLocal(_ path: String, _ info: stat, _ entry: GlobalEntry?, _ sources: Sources) -> Bool {
        entry == nil || (info.st_mode & S_IFMT) == S_IFDIR || sources.selection.state(of: path) != .no
    }

    private func check(_ path: String) throws(MountError) {
        if WireName.components(path).contains(where: { Self.isInternal(String($0)) }) { throw MountError(ENOENT) }
    }

    func attributes(of path: String) throws(MountError) -> MountAttributes {
        try check(path)
        let sources = try current()
        let entry = path.isEmpty ? nil : global(path, in: sources)
        if let info = localStat(path), path.isEmpty || showsLocal(path, info, entry, sources) {
            let kind: MountAttributes.Kind
            switch info.st_mode & S_IFMT {
            case S_IFDIR: kind = .directory
            case S_IFLNK: kind = .symlink
            case S_IFREG: kind = .file
            default: throw MountError(ENOENT)
            }
            return MountAttributes(
                kind: kind, size: Int64(info.st_size), permissions: UInt32(info.st_mode & 0o7777),
                modifiedNs: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec))
        }
        if path.isEmpty {
            return MountAttributes(kind: .directory, size: 0, permissions: 0o755, modifiedNs: 0)
        }
        guard let entry else { throw MountError(ENOENT) }
        return globalAttributes(entry.file, in: sources)
    }

    /// A global entry's attributes as the mount shows them.
    private func globalAttributes(_ file: FileEntry, in sources: Sources) -> MountAttributes {
        let modified = file.modifiedS * 1_000_000_000 + Int64(file.modifiedNs)
        switch file.type {
        case .directory:
            let permissions = file.noPermissions || file.permissions == 0 ? 0o755 : file.permissions & 0o777
            return MountAttributes(kind: .directory, size: 0, permissions: permissions, modifiedNs: modified)
        case .file:
            let permissions = file.noPermissions || file.permissions == 0 ? 0o644 : file.permissions & 0o777
            // An empty cache holds nothing of it: no blocks to look up.
            let here = disk.figures.blocks == 0 ? 0 : disk.bytes(of: blockHashes(of: file, in: sources))
            return MountAttributes(kind: .file, size: file.size, permissions: permissions, modifiedNs: modified, bytesHere: here)
        default:
            return MountAttributes(kind: .symlink, size: Int64(file.symlinkTarget.utf8.count), permissions: 0o777, modifiedNs: modified)
        }
    }

    private func blockHashes(of file: FileEntry, in sources: Sources) -> [ContentHash] {
        if let known = lock.withLock({ blocksByContent[file.contentHash] }) { return known }
        let hashes = ((try? sources.log.blocks(of: file)) ?? []).compactMap { ContentHash(data: $0.hash) }
        lock.withLock {
            if blocksByContent.count > 100_000 { blocksByContent.removeAll(keepingCapacity: true) }
            blocksByContent[file.contentHash] = hashes
        }
        return hashes
    }

    func names(in directory: String) throws(MountError) -> [String] {
        try entries(in: directory).map(\.name)
    }

    func entries(in directory: String) throws(MountError) -> [(name: String, attributes: MountAttributes?)] {
        let attributes = try attributes(of: directory)
        guard attributes.kind == .directory else { throw MountError(ENOTDIR) }
        let sources = try current()
        var entries: [(name: String, attributes: MountAttributes?)] = []
        var seen: Set<String> = []
        let here = directory.isEmpty ? root : root + "/" + directory
        let onDisk = Set(((try? FileManager.default.contentsOfDirectory(atPath: here)) ?? []).filter { !Self.isInternal($0) })
        for entry in sources.log.index.list(under: directory, recursive: false, includeDeleted: false) {
            let name = String(SafePath.lastComponent(entry.path))
            do {
                try SafePath.validate(entry.path)
            } catch {
                if skippedNames.insert(entry.path).inserted { log("\(folder)/\(entry.path): not shown: \(error.hint)") }
                continue
            }
            if Self.isInternal(name) { continue }
            guard seen.insert(name).inserted else { continue }
            // A name also on disk may show the local file: its attributes come from a lookup.
            entries.append((name, onDisk.contains(name) ? nil : globalAttributes(entry.file, in: sources)))
        }
        for name in onDisk.sorted() where seen.insert(name).inserted { entries.append((name, nil)) }
        // A walk reads the whole snapshot a directory at a time: what it read goes back every
        // few thousand names (it stays in the page cache), so the mount's memory holds a few
        // directories' worth of it, not the tree's.
        let release = lock.withLock {
            listedSinceRelease += entries.count
            defer { if listedSinceRelease >= 5_000 { listedSinceRelease = 0 } }
            return listedSinceRelease >= 5_000
        }
        if release { sources.log.index.releaseSnapshotPages() }
        return entries
    }

    func open(_ path: String, writing: Bool) throws(MountError) -> any MountedFile {
        let attributes = try attributes(of: path)
        guard attributes.kind == .file else { throw MountError(attributes.kind == .directory ? EISDIR : ELOOP) }
        if writing {
            try localize(path)
            let fd = Glibc.open(local(path), O_RDWR | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw MountError(errno) }
            return LocalMountedFile(fd: fd)
        }
        let sources = try current()
        let entry = global(path, in: sources)
        if let info = localStat(path), showsLocal(path, info, entry, sources) {
            let fd = Glibc.open(root + "/" + path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw MountError(errno) }
            return LocalMountedFile(fd: fd)
        }
        let readable: RemoteFiles.Entry
        do {
            readable = try files.entry(folder: folder, path: path, reachable: false)
        } catch {
            throw MountError(EIO, "\(error)")
        }
        let hashes = readable.blocks.compactMap { ContentHash(data: $0.hash) }
        sources.log.index.releaseSnapshotPages()
        if let unreachable = readable.unreachable, disk.count(of: hashes) < hashes.count {
            throw MountError(EIO, unreachable.description)
        }
        return RemoteMountedFile(entry: readable, files: files, disk: disk, hashes: hashes)
    }

    func linkTarget(of path: String) throws(MountError) -> String {
        let attributes = try attributes(of: path)
        guard attributes.kind == .symlink else { throw MountError(EINVAL) }
        let sources = try current()
        let entry = global(path, in: sources)
        if let info = localStat(path), showsLocal(path, info, entry, sources) {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: root + "/" + path) else { throw MountError(EIO) }
            return target
        }
        guard let entry else { throw MountError(ENOENT) }
        return entry.file.symlinkTarget
    }

    // MARK: - Changes: made in the folder on disk, as doing the same there directly would, and
    // kept by the selection (a new file is selected, so the plan sends it).

    func local(_ path: String) -> String { root + "/" + path }

    private func refuseUnlessWritable() throws(MountError) {
        guard writable else { throw MountError(EROFS) }
    }

    /// The directories above `path` made on disk where the global tree has them and the disk not yet.
    private func prepareParents(_ path: String) throws(MountError) {
        let parent = (path as NSString).deletingLastPathComponent
        guard !parent.isEmpty else { return }
        do {
            try FileManager.default.createDirectory(atPath: local(parent), withIntermediateDirectories: true)
        } catch {
            throw MountError(EIO, "cannot make \(parent) in the folder: \(error.localizedDescription)")
        }
    }

    /// `path` kept by the selection (`kaiten select`: a file on disk in a folder that sends).
    private func keep(_ path: String) throws(MountError) {
        if let sources = try? current(), sources.selection.state(of: path) != .no { return }
        do {
            _ = try app.select(folder, [path], force: false)
        } catch {
            throw MountError(EIO, "cannot select it: \(error)")
        }
        lock.withLock { checked = .now - .seconds(1) }
    }

    /// Brings `path` onto the disk here and keeps it, so a change acts on the local file: a file
    /// of the global tree is fetched (every block verified, a temporary file renamed into place).
    private func localize(_ path: String) throws(MountError) {
        try refuseUnlessWritable()
        let sources = try current()
        let entry = global(path, in: sources)
        if let info = localStat(path) {
            if !showsLocal(path, info, entry, sources) { try keep(path) }
            return
        }
        guard let entry else { throw MountError(ENOENT) }
        try prepareParents(path)
        switch entry.file.type {
        case .directory:
            if mkdir(local(path), 0o755) != 0 && errno != EEXIST { throw MountError(errno) }
        case .file:
            let files = self.files
            let folder = self.folder
            let target = local(path)
            // Recorded as synced at the version fetched, as apply records a pull: an edit made
            // next is this device's change of that version, not a conflict with it.
            let journal = try? SyncedJournal(path: SyncedJournal.path(forCache: home.home.scanCachePath(folderID: folder)))
            let fetched = FuseMount.blocking { () async throws(MountError) -> FetchReport in
                do {
                    return try await files.fetch(folder: folder, path: path, to: target, journal: journal)
                } catch {
                    throw MountError(EIO, "\(error)")
                }
            }
            journal?.sync()
            switch fetched {
            case .success(let report):
                if let failure = report.failed.first { throw MountError(EIO, "cannot bring it here to change it: \(failure.why)") }
                // Folded into the scan cache now, while the file has the content the record names
                // (a record counts only for that content, and the change comes next).
                if let config = home.config.folders.first(where: { $0.id == folder }) {
                    _ = try? Planner.loadFolder(config, home: home, warn: { [log] in log("\(folder): \($0)") })
                }
            case .failure(let error):
                throw MountError(EIO, "cannot bring it here to change it: \(error.reason ?? "")")
            }
        default:
            if symlink(entry.file.symlinkTarget, local(path)) != 0 { throw MountError(errno) }
        }
        try keep(path)
    }

    func create(_ path: String, permissions: UInt32) throws(MountError) -> any MountedFile {
        try refuseUnlessWritable()
        try check(path)
        try prepareParents(path)
        let fd = Glibc.open(local(path), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode_t(permissions))
        guard fd >= 0 else { throw MountError(errno) }
        do {
            try keep(path)
        } catch {
            Glibc.close(fd)
            unlink(local(path))
            throw error
        }
        return LocalMountedFile(fd: fd)
    }

    func makeDirectory(_ path: String, permissions: UInt32) throws(MountError) {
        try refuseUnlessWritable()
        try check(path)
        try prepareParents(path)
        guard mkdir(local(path), mode_t(permissions)) == 0 else { throw MountError(errno) }
        try keep(path)
    }

    func makeSymlink(_ path: String, target: String) throws(MountError) {
        try refuseUnlessWritable()
        try check(path)
        try prepareParents(path)
        guard symlink(target, local(path)) == 0 else { throw MountError(errno) }
        try keep(path)
    }

    func removeFile(_ path: String) throws(MountError) {
        try refuseUnlessWritable()
        let sources = try current()
        let entry = global(path, in: sources)
        guard let info = localStat(path), showsLocal(path, info, entry, sources) else {
            guard entry != nil else { throw MountError(ENOENT) }
            throw MountError(EACCES, "not on this device: pin it (so it is kept here) to delete it everywhere")
        }
        guard unlink(local(path)) == 0 else { throw MountError(errno) }
    }

    func removeDirectory(_ path: String) throws(MountError) {
        try refuseUnlessWritable()
        guard try names(in: path).isEmpty else { throw MountError(ENOTEMPTY) }
        guard localStat(path) != nil else { throw MountError(EACCES, "not on this device: pin it to delete it everywhere") }
        guard rmdir(local(path)) == 0 else { throw MountError(errno) }
    }

    func rename(_ from: String, to: String, replace: Bool) throws(MountError) {
        try refuseUnlessWritable()
        try check(to)
        let attributes = try attributes(of: from)
        if attributes.kind == .directory {
            // A directory's files not on this device would stay behind under the old name.
            let sources = try current()
            let away = sources.log.index.list(under: from, recursive: true, includeDeleted: false).contains { entry in
                localStat(entry.path) == nil && !entry.holders.isEmpty
            }
            if away { throw MountError(EACCES, "has files not on this device: pin it first to move it everywhere") }
        }
        if !replace, (try? self.attributes(of: to)) != nil { throw MountError(EEXIST) }
        try localize(from)
        try prepareParents(to)
        guard Glibc.rename(local(from), local(to)) == 0 else { throw MountError(errno) }
        // The old name's line stays: with it the plan sends the old name's deletion, as for a
        // kept file removed (syncthing sees a rename as a new file and a deletion).
        try keep(to)
    }

    func truncate(_ path: String, to size: Int64) throws(MountError) {
        try localize(path)
        guard Glibc.truncate(local(path), off_t(size)) == 0 else { throw MountError(errno) }
    }

    func setPermissions(_ path: String, _ permissions: UInt32) throws(MountError) {
        try localize(path)
        guard chmod(local(path), mode_t(permissions)) == 0 else { throw MountError(errno) }
    }

    func setModified(_ path: String, nanoseconds: Int64) throws(MountError) {
        try localize(path)
        var times = [
            timespec(tv_sec: 0, tv_nsec: FuseMount.utimeOmit),
            timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000)),
        ]
        guard utimensat(AT_FDCWD, local(path), &times, AT_SYMLINK_NOFOLLOW) == 0 else { throw MountError(errno) }
    }

    static let stateAttribute = "user.kaiten.state"
    static let holdersAttribute = "user.kaiten.holders"
    static let pinAttribute = "user.kaiten.pin"

    func extendedAttributeNames(of path: String) throws(MountError) -> [String] {
        _ = try attributes(of: path)
        return [Self.stateAttribute, Self.holdersAttribute, Self.pinAttribute]
    }

    func extendedAttribute(_ name: String, of path: String) throws(MountError) -> [UInt8] {
        let attributes = try attributes(of: path)
        let sources = try current()
        let entry = path.isEmpty ? nil : global(path, in: sources)
        switch name {
        case Self.stateAttribute:
            return Array(state(of: path, attributes, entry, sources).rawValue.utf8)
        case Self.holdersAttribute:
            // Beside a service this process has no connections of its own: the service's,
            // as its record says them.
            let connected: Set<DeviceID>
            if files.relay != nil {
                connected = Set((ServiceRecord.running(home.home)?.peers ?? []).filter(\.connected).compactMap { try? DeviceID($0.id) })
            } else {
                connected = Set(((try? files.connections()) ?? [:]).keys)
            }
            let holders = (entry?.holders ?? []).filter { connected.contains($0) }
            return Array(holders.map(\.description).joined(separator: "\n").utf8)
        case Self.pinAttribute:
            return Array((path.isEmpty || sources.selection.state(of: path) == .no ? "0" : "1").utf8)
        default:
            throw MountError(ENODATA)
        }
    }

    private func state(of path: String, _ attributes: MountAttributes, _ entry: GlobalEntry?, _ sources: Sources) -> PlaceholderState {
        let selected = !path.isEmpty && sources.selection.state(of: path) != .no
        let info = path.isEmpty ? nil : localStat(path)
        var local = PlaceholderState.LocalCopy.absent
        if let info {
            if let entry, entry.file.type == .file, (info.st_mode & S_IFMT) == S_IFREG {
                let scanned = sources.scan[path]
                let same =
                    scanned != nil && scanned!.size == Int64(info.st_size)
                    && scanned!.modifiedNs == Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
                    && scanned!.contentHash == entry.file.contentHash
                local = same ? .same : .differs
            } else {
                local = .same
            }
        }
        var blocks = 0
        var cached = 0
        if let entry, entry.file.type == .file, local == .absent {
            let hashes = blockHashes(of: entry.file, in: sources)
            blocks = hashes.count
            // From the files themselves: `kaiten free` in another process may have dropped some.
            cached = DiskBlockCache.count(of: hashes, in: disk.directory)
        }
        return PlaceholderState.of(
            name: (path as NSString).lastPathComponent, inGlobalIndex: path.isEmpty || entry != nil, local: local, selected: selected,
            cachedBlocks: cached, blocks: blocks)
    }

    func setExtendedAttribute(_ name: String, of path: String, to value: [UInt8]) throws(MountError) {
        guard name == Self.pinAttribute else { throw MountError(name.hasPrefix("user.kaiten.") ? EPERM : ENOTSUP) }
        guard !path.isEmpty else { throw MountError(EPERM, "the folder's root is not pinned alone: pin what is in it") }
        let text = String(decoding: value, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        do {
            switch text {
            case "1": _ = try app.select(folder, [path], force: false)
            case "0":
                for result in try app.deselect(folder, [path]) {
                    if case .selectedThrough(_, let parent) = result {
                        throw MountError(EPERM, "kept through \(parent): unpin that instead")
                    }
                    if case .selectedByPattern(_, let pattern, _) = result {
                        throw MountError(EPERM, "kept by the selection line \(pattern): edit the selection file")
                    }
                }
            default: throw MountError(EINVAL, "\(Self.pinAttribute) takes 1 (pin) or 0 (unpin), not \"\(text)\"")
            }
        } catch let error as MountError {
            throw error
        } catch {
            throw MountError(EPERM, "\(error)")
        }
        lock.withLock { checked = .now - .seconds(1) }
    }

    func spaceFigures() -> statvfs? {
        var info = statvfs()
        return statvfs(root, &info) == 0 ? info : nil
    }
}

/// A file kept on disk, read and written as it is.
final class LocalMountedFile: MountedFile, @unchecked Sendable {
    let fd: Int32
    init(fd: Int32) { self.fd = fd }

    var contentTag: String? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return "local:\(info.st_dev):\(info.st_ino):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(MountError) -> Int {
        let n = pwrite(fd, bytes.baseAddress, bytes.count, off_t(offset))
        guard n >= 0 else { throw MountError(errno) }
        return n
    }

    func sync() throws(MountError) {
        guard fsync(fd) == 0 else { throw MountError(errno) }
    }

    func read(at offset: Int64, count: Int) async throws(MountError) -> Data {
        var data = Data(count: count)
        let n = data.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
        guard n >= 0 else { throw MountError(errno) }
        return n == count ? data : data.prefix(n)
    }

    func close() { Glibc.close(fd) }
}

/// A file read from the peers: the blocks a read covers, verified, through the block cache;
/// a reader going forward has the next blocks fetched ahead of it.
final class RemoteMountedFile: MountedFile, @unchecked Sendable {
    let entry: RemoteFiles.Entry
    let files: RemoteFiles
    let disk: DiskBlockCache
    let hashes: [ContentHash]
    private let lastEnd = Mutex<Int64>(-1)
    /// How far ahead of a sequential reader blocks are fetched.
    static let readAhead: Int64 = 4 << 20

    var contentTag: String? { "global:\(entry.global.contentHash.hex)" }

    init(entry: RemoteFiles.Entry, files: RemoteFiles, disk: DiskBlockCache, hashes: [ContentHash]) {
        self.entry = entry
        self.files = files
        self.disk = disk
        self.hashes = hashes
        disk.hold(hashes)
    }

    func read(at offset: Int64, count: Int) async throws(MountError) -> Data {
        let size = entry.size
        guard offset < size, count > 0 else { return Data() }
        let end = min(size, offset + Int64(count))
        let sequential = lastEnd.withLock { last in
            defer { last = end }
            return last == offset
        }
        var data = Data(capacity: Int(end - offset))
        do {
            try await files.read(entry, range: offset...(end - 1), window: 4) { data.append($0) }
        } catch {
            throw MountError(EIO, "\(entry.folder)/\(entry.global.name): \(error)")
        }
        if sequential && end < size {
            files.prefetch(entry, range: end...min(size - 1, end + Self.readAhead))
        }
        return data
    }

    func close() { disk.release(hashes) }
}

/// What `kaiten free` did.
public struct Freed: Sendable, Encodable {
    /// Files whose cached blocks were dropped.
    public var files: [String] = []
    public var bytes: Int64 = 0
    /// Files left alone because the selection keeps them (unpin them first).
    public var pinned: [String] = []
}

extension App {
    /// Drops the cached blocks of `paths` (files, or everything under a directory) that the
    /// selection does not keep. Blocks a kept file shares are kept; a mount reading a freed
    /// file fetches its blocks again.
    public func free(_ folder: String, _ paths: [String]) throws -> Freed {
        let opened = try openForReading()
        let log = try openLog(folder, in: opened)
        defer { log.close() }
        let (file, _) = try Planner.readSelection(opened.home.selectionPath(folderID: folder))
        let selection = Selection(file, global: log.index)
        let disk = try DiskBlockCache(directory: opened.home.blockCacheDirectory, budget: .max)
        var freed = Freed()
        var drop: [ContentHash] = []
        for path in paths {
            let clean = Self.clean(path)
            guard let named = log.index.global(clean), !named.file.isDeleted else {
                throw ArgumentError("\(clean) is not in the global index of \(folder) (see `kaiten ls \(folder)`)")
            }
            let entries = named.file.type == .directory ? log.index.list(under: clean, recursive: true, includeDeleted: false) : [named]
            for entry in entries where entry.file.type == .file {
                if selection.state(of: entry.path) != .no {
                    freed.pinned.append(entry.path)
                    continue
                }
                let hashes = try log.blocks(of: entry.file).compactMap { ContentHash(data: $0.hash) }
                guard disk.count(of: hashes) > 0 else { continue }
                freed.files.append(entry.path)
                drop += hashes
            }
        }
        // Content a kept file shares is not dropped with the file that is not kept.
        var kept: Set<ContentHash> = []
        for root in selection.roots {
            guard let entry = log.index.global(root), !entry.file.isDeleted else { continue }
            let files = entry.file.type == .directory ? log.index.list(under: root, recursive: true, includeDeleted: false) : [entry]
            for file in files where file.file.type == .file {
                for block in (try? log.blocks(of: file.file)) ?? [] { if let hash = ContentHash(data: block.hash) { kept.insert(hash) } }
            }
        }
        freed.bytes = disk.drop(drop.filter { !kept.contains($0) })
        return freed
    }
}
