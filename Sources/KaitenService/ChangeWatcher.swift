import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Tells when something a plan depends on changed on disk: a file in a folder, a selection
/// file, config.xml. One job: noticing; what a change means is the planner's. Linux inotify,
/// one watch per directory (new directories are watched as they appear). When the kernel's
/// watch limit is reached, or its queue overflows, the periodic rescan still finds everything:
/// this only makes it sooner.
public final class ChangeWatcher: @unchecked Sendable {
    public enum Change: Sendable, Equatable {
        /// Something changed in a folder: its ID and the path (folder-relative), every one reported.
        case folder(String, path: String)
        /// The kernel's queue overflowed: anything in the folder may have changed.
        case eventsLost(folder: String)
        case selection
        case config
    }

    private enum Target {
        case folder(id: String, path: String)
        case selections
        case configDirectory
    }

    private let fd: Int32
    /// A socket pair (close-on-exec) ``stop()`` writes to, to wake the reading thread, which otherwise sleeps in
    /// poll(2) until the kernel has an event: an idle service does not wake to look at a flag.
    let wakeFD: Int32
    let wakeWriteFD: Int32
    private let configName: String
    private var targets: [Int32: Target] = [:]
    private var roots: [String: String] = [:]
    private let continuation: AsyncStream<Change>.Continuation
    public let changes: AsyncStream<Change>
    private let stopped = Atomic<Bool>(false)
    private var thread: Thread?
    /// Said once: the watch limit was reached.
    private let limitHit = Atomic<Bool>(false)
    /// The kernel's inotify watch limit left some directory unwatched.
    public var limitReached: Bool { limitHit.load(ordering: .relaxed) }
    private let warn: @Sendable (String) -> Void
    /// Reads of the kernel's queue that found events (tests see bursts read together).
    let readsWithEvents = Atomic<Int>(0)

    /// - Parameters:
    ///   - folders: folder ID and path of each folder to watch, recursively.
    ///   - selectionDirectory: where the selection files are.
    ///   - configPath: config.xml (its directory is watched: editors and Kaiten replace it by rename).
    public init(
        folders: [(id: String, path: String)], selectionDirectory: String, configPath: String, warn: @escaping @Sendable (String) -> Void
    ) {
        self.warn = warn
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        var wakeEnds: [Int32] = [-1, -1]
        // A socket pair rather than a pipe: a wake sent after the thread ended (and closed its
        // end) is an error to ignore (MSG_NOSIGNAL), where a pipe would raise SIGPIPE.
        if socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &wakeEnds) != 0 {
            wakeEnds = [-1, -1]
        }
        (wakeFD, wakeWriteFD) = (wakeEnds[0], wakeEnds[1])
        configName = (configPath as NSString).lastPathComponent
        // Not bounded: the service tells its own writes from news path by path, and a dropped
        // path could be the news. The reader takes each at once; a flood of paths turns into
        // one "look at everything" on its side.
        (changes, continuation) = AsyncStream<Change>.makeStream(bufferingPolicy: .unbounded)
        guard fd >= 0 else {
            warn("cannot watch for changes (inotify: \(String(cString: strerror(errno)))); the periodic rescan finds them")
            for end in wakeEnds where end >= 0 { close(end) }
            return
        }
        for folder in folders {
            roots[folder.id] = folder.path
            watchTree(folder.path, folder: folder.id)
        }
        add(selectionDirectory, .selections)
        add((configPath as NSString).deletingLastPathComponent, .configDirectory)
        let thread = Thread { [self] in readEvents() }
        thread.name = "kaiten.watch"
        self.thread = thread
        thread.start()
    }

    deinit {
        stop()
    }

    public func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        // The write end is this side's to close, after the write: closed by the reading thread
        // (which may see the flag and end before the write), the write could land in whatever
        // the process opened next under the same number.
        if thread != nil, wakeWriteFD >= 0 {
            var byte: UInt8 = 1
            _ = send(wakeWriteFD, &byte, 1, Int32(MSG_NOSIGNAL))
            close(wakeWriteFD)
        }
        continuation.finish()
    }

    private static let folderMask = UInt32(
        IN_CREATE | IN_DELETE | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MODIFY)

    private func add(_ path: String, _ target: Target) {
        let wd = inotify_add_watch(fd, path, Self.folderMask | UInt32(IN_ONLYDIR))
        if wd >= 0 {
            targets[wd] = target
        } else if errno == ENOSPC && !limitReached {
            limitHit.store(true, ordering: .relaxed)
            warn("the kernel's inotify watch limit is reached (fs.inotify.max_user_watches); changes below \(path) are found by the periodic rescan")
        }
    }

    private func watchTree(_ root: String, folder: String) {
        var stack = [root]
        while let directory = stack.popLast() {
            add(directory, .folder(id: folder, path: directory))
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { continue }
            for name in names where name != ".stversions" {
                let full = directory + "/" + name
                var info = stat()
                if lstat(full, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR { stack.append(full) }
            }
        }
    }

    private func readEvents() {
        defer {
            close(fd)
            if wakeFD >= 0 { close(wakeFD) }
        }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while !stopped.load(ordering: .relaxed) {
            var pollers = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
            // Without the wake pipe (pipe failed), look at the stop flag every 250 ms.
            guard poll(&pollers, wakeFD >= 0 ? 2 : 1, wakeFD >= 0 ? -1 : 250) > 0, pollers[0].revents & Int16(POLLIN) != 0 else { continue }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { continue }
            readsWithEvents.add(1, ordering: .relaxed)
            var changed: [Change] = []
            var offset = 0
            while offset + 16 <= n {
                let (wd, mask, length) = buffer.withUnsafeBytes { raw in
                    (raw.loadUnaligned(fromByteOffset: offset, as: Int32.self),
                     raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self),
                     Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)))
                }
                let nameBytes = buffer[(offset + 16)..<min(n, offset + 16 + length)].prefix { $0 != 0 }
                let name = String(decoding: nameBytes, as: UTF8.self)
                offset += 16 + length
                if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                    // Events were lost: every folder may have changed.
                    for target in targets.values { if case .folder(let id, _) = target { changed.append(.eventsLost(folder: id)) } }
                    changed.append(.selection)
                    continue
                }
                if mask & UInt32(IN_IGNORED) != 0 {
                    targets[wd] = nil
                    continue
                }
                switch targets[wd] {
                case .folder(let id, let path):
                    // Syncthing's and Kaiten's temp files come and go during a pull: the rename
                    // into place is the change that counts.
                    if name.hasPrefix(".syncthing.") && name.hasSuffix(".tmp") { continue }
                    if mask & UInt32(IN_ISDIR) != 0 && mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 && name != ".stversions" {
                        watchTree(path + "/" + name, folder: id)
                    }
                    changed.append(.folder(id, path: String((path + "/" + name).dropFirst(roots[id]?.count ?? 0)).trimmingCharacters(in: CharacterSet(charactersIn: "/"))))
                case .selections:
                    changed.append(.selection)
                case .configDirectory:
                    if name == configName { changed.append(.config) }
                case nil:
                    continue
                }
            }
            var seen: Set<String> = []
            for change in changed {
                let key: String
                switch change {
                // Every path once: the service tells its own writes from news path by path.
                case .folder(let id, let path): key = "folder " + id + "\u{0}" + path
                case .eventsLost(let id): key = "lost " + id
                case .selection: key = "selection"
                case .config: key = "config"
                }
                if seen.insert(key).inserted { continuation.yield(change) }
            }
            // The first event of a burst is passed on at once; the rest of it (an apply writing
            // thousands of files, several events each, most of them on temp files) is read in
            // batches, at most one read per gather unless a read half filled the buffer: that one
            // is followed at once, so the kernel's queue does not overflow.
            if n < buffer.count / 2 { usleep(Self.burstGather) }
        }
    }

    /// How long the reading thread lets events gather after passing some on (microseconds).
    static let burstGather: useconds_t = 50_000
}
