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
public final class GroupSync: Sendable {
    private let descriptor: Int32
    private let device: UInt
    private let syncfs: @convention(c) (Int32) -> Int32
    private let state = Mutex(State())
    private let flushCount = Atomic<Int>(0)
    private let beforeFlush: (@Sendable () -> Void)?

    private struct State {
        var waiting: [CheckedContinuation<Int32, Never>] = []
        var flushing = false
        /// Set once a flush failed: every file is then fsynced on its own.
        var failed = false
    }

    /// A group sync for the file system `root` is on; nil where the kernel's `syncfs` does not
    /// report write-back errors (before 5.8) or the folder cannot be opened.
    public convenience init?(root: String) { self.init(root: root, beforeFlush: nil) }

    /// `beforeFlush` runs before each flush (tests hold the first one to gather waiters).
    init?(root: String, beforeFlush: (@Sendable () -> Void)?) {
        guard Self.kernelReportsSyncfsErrors(), let syncfs = Self.syncfs else { return nil }
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
    }

    deinit { close(descriptor) }

    /// The file system flushes made so far.
    var flushes: Int { flushCount.load(ordering: .relaxed) }

    /// Waits until everything written through `fd` so far is on disk; returns 0, or the errno of
    /// the failed flush.
    public func sync(_ fd: Int32) async -> Int32 {
        var info = stat()
        let shared = fstat(fd, &info) == 0 && UInt(info.st_dev) == device
        if !shared || state.withLock({ $0.failed }) { return await Self.ownFsync(fd) }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            let starts = state.withLock { state in
                state.waiting.append(continuation)
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
            let result = syncfs(descriptor) == 0 ? 0 : errno
            flushCount.add(1, ordering: .relaxed)
            if result != 0 { state.withLock { $0.failed = true } }
            for waiter in batch { waiter.resume(returning: result) }
        }
    }

    private static func ownFsync(_ fd: Int32) async -> Int32 {
        await withCheckedContinuation { continuation in
            Blocking.queue.async { continuation.resume(returning: fsync(fd) == 0 ? 0 : errno) }
        }
    }

    /// glibc's `syncfs`, which Swift's Glibc module leaves out (it is declared under _GNU_SOURCE).
    static let syncfs: (@convention(c) (Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
    }()

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
