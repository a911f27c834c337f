import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Makes the small files of a pull durable many at a time: one `syncfs(2)` of the folder's file
/// system stands for the `fsync` of every file that became ready while the previous one ran
/// (a group commit, as databases do for their log).
///
/// Each file still waits for a flush that *began* after its last write, so nothing is renamed
/// into place before its content is on disk; only the number of device flushes changes. Twenty
/// thousand 4 KiB files meant twenty thousand fsyncs, each a flush of the disk's cache; here a
/// flush covers the dozens of files in flight at once.
///
/// Errors: since Linux 5.8 `syncfs` reports a write-back error anywhere on the file system since
/// the descriptor it is given was opened (or last reported). A batch that sees one fails, and so
/// does every later file: from then on each file has its own `fsync`, whose error is per file,
/// because an error `syncfs` reported to one batch is not reported again to the next. Older
/// kernels, and files on another file system than the folder's (a mount below it), always get
/// their own `fsync`.
///
/// Other programs: `syncfs` writes out everything dirty on the file system, theirs included. When
/// the system holds more dirty data than ``dirtyLimit`` (another program copying gigabytes),
/// a round would wait for all of it and push it out early; that round's files are then fsynced
/// each on its own instead, as without a group.
public final class GroupSync: Sendable {
    private let descriptor: Int32
    private let device: UInt
    private let syncfs: @convention(c) (Int32) -> Int32
    private let state = Mutex(State())
    private let flushCount = Atomic<Int>(0)
    private let beforeFlush: (@Sendable () -> Void)?
    private let dirtyBytes: @Sendable () -> Int

    /// Above this much dirty data in the system, a round fsyncs its files one by one.
    static let dirtyLimit = 64 << 20

    private struct State {
        var waiting: [(fd: Int32, continuation: CheckedContinuation<Int32, Never>)] = []
        var flushing = false
        /// Set once a flush failed: every file is then fsynced on its own.
        var failed = false
        /// Files that have waited for a flush so far.
        var queued = 0
    }

    /// A group sync for the file system `root` is on; nil where the kernel's `syncfs` does not
    /// report write-back errors (before 5.8) or the folder cannot be opened.
    public convenience init?(root: String) {
        let recent = RecentReading(maxAgeNanoseconds: 100_000_000, read: Self.systemDirtyBytes)
        self.init(root: root, beforeFlush: nil, dirtyBytes: recent.value)
    }

    /// `beforeFlush` runs before each flush (tests hold the first one to gather waiters);
    /// `dirtyBytes` says how much data waits to be written in the system (tests pretend).
    /// `syncfs` stands for the kernel's (tests make it fail).
    init?(
        root: String, beforeFlush: (@Sendable () -> Void)?, dirtyBytes: @escaping @Sendable () -> Int,
        syncfs: (@convention(c) (Int32) -> Int32)? = GroupSync.syncfs
    ) {
        guard Self.kernelReportsSyncfsErrors(), let syncfs else { return nil }
        let fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            close(fd)
            return nil
        }
        descriptor = fd
        device = UInt(info.st_dev)
        self.syncfs = syncfs
        self.beforeFlush = beforeFlush
        self.dirtyBytes = dirtyBytes
    }

    deinit { close(descriptor) }

    /// The file system flushes made so far.
    var flushes: Int { flushCount.load(ordering: .relaxed) }

    /// The files that have waited for a flush so far (tests wait for all of theirs to be queued).
    var queued: Int { state.withLock { $0.queued } }

    /// Waits until everything written through `fd` so far is on disk; returns 0, or the errno of
    /// the failed flush.
    public func sync(_ fd: Int32) async -> Int32 {
        var info = stat()
        let shared = fstat(fd, &info) == 0 && UInt(info.st_dev) == device
        if !shared || state.withLock({ $0.failed }) { return await Self.ownFsync(fd) }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            let starts = state.withLock { state in
                state.waiting.append((fd, continuation))
                state.queued += 1
                guard !state.flushing else { return false }
                state.flushing = true
                return true
            }
            if starts { Blocking.queue.async { self.flushWhileWaiting() } }
        }
        return result
    }

    /// One flush per round for everyone waiting when it began, until no one waits.
    private func flushWhileWaiting() {
        while true {
            let batch = state.withLock { state in
                let batch = state.waiting
                state.waiting = []
                if batch.isEmpty { state.flushing = false }
                return batch
            }
            if batch.isEmpty { return }
            beforeFlush?()
            if dirtyBytes() > Self.dirtyLimit {
                // Much else waits to be written: each file's own fsync, all at once.
                let results = UnsafeMutableBufferPointer<Int32>.allocate(capacity: batch.count)
                nonisolated(unsafe) let slots = results
                DispatchQueue.concurrentPerform(iterations: batch.count) { slots[$0] = fsync(batch[$0].fd) == 0 ? 0 : errno }
                for (i, waiter) in batch.enumerated() { waiter.continuation.resume(returning: results[i]) }
                results.deallocate()
                continue
            }
            let result = syncfs(descriptor) == 0 ? 0 : errno
            flushCount.add(1, ordering: .relaxed)
            if result != 0 { state.withLock { $0.failed = true } }
            for waiter in batch { waiter.continuation.resume(returning: result) }
        }
    }

    /// `fsync(fd)` off the cooperative pool; 0 or its errno.
    static func ownFsync(_ fd: Int32) async -> Int32 {
        await withCheckedContinuation { continuation in
            Blocking.queue.async { continuation.resume(returning: fsync(fd) == 0 ? 0 : errno) }
        }
    }

    /// glibc's `syncfs`, which Swift's Glibc module leaves out (it is declared under _GNU_SOURCE).
    static let syncfs: (@convention(c) (Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
    }()

    /// The `Dirty:` line of /proc/meminfo, in bytes (0 when it cannot be read).
    static func systemDirtyBytes() -> Int {
        let fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return 0 }
        return dirtyBytes(inMeminfo: String(decoding: buffer[..<count], as: UTF8.self))
    }

    static func dirtyBytes(inMeminfo text: String) -> Int {
        for line in text.split(separator: "\n") where line.hasPrefix("Dirty:") {
            let fields = line.split(separator: " ")
            guard fields.count >= 2, let kibibytes = Int(fields[1]) else { return 0 }
            return kibibytes << 10
        }
        return 0
    }

    /// Linux 5.8 or later (`uname -r`).
    static func kernelReportsSyncfsErrors() -> Bool {
        var names = utsname()
        uname(&names)
        let release = withUnsafeBytes(of: &names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return kernel(release, isAtLeast: (5, 8))
    }

    static func kernel(_ release: String, isAtLeast minimum: (Int, Int)) -> Bool {
        let parts = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
        guard parts.count == 2 else { return false }
        return (parts[0], parts[1]) >= minimum
    }
}

extension GroupSync {
    /// Files up to this size share flushes. A bigger file's own fsync costs little beside its
    /// transfer, and a flush of the whole file system for it would also push out whatever else
    /// is waiting there (another program's writes included).
    public static let largestFile: Int64 = 1 << 20
}

/// A value read again only once the last reading is older than `maxAge`: /proc/meminfo, read
/// and parsed for each round of small files (two or three files each), cost 3 % of a pull's CPU,
/// and the dirty data it reports moves over seconds, not over a round.
final class RecentReading: Sendable {
    private let maxAge: UInt64
    private let read: @Sendable () -> Int
    private let last = Mutex<(at: UInt64, value: Int)?>(nil)

    init(maxAgeNanoseconds: UInt64, read: @escaping @Sendable () -> Int) {
        self.maxAge = maxAgeNanoseconds
        self.read = read
    }

    @Sendable func value() -> Int {
        let now = DispatchTime.now().uptimeNanoseconds
        if let last = last.withLock({ $0 }), now &- last.at < maxAge { return last.value }
        let value = read()
        last.withLock { $0 = (now, value) }
        return value
    }
}
