import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Keeps what a pull writes to one file from piling up in the page cache: every ``step`` bytes
/// written, the file's dirty pages are sent to the disk and those already written back are
/// dropped. `POSIX_FADV_DONTNEED` does both: it starts the writeback of the file (without
/// waiting), then drops its clean pages; dirty pages and pages still being written stay.
///
/// Left alone, a 1 GiB pull filled the page cache with a gigabyte that nobody reads soon,
/// pushing out what the machine was using, and the final fsync wrote all of it. Where those
/// pages were memory the system had not used for a while, the pull paid for its first touch
/// (on a virtual machine: the copy into the page cache was 35 % of a pull's CPU, `perf`; `dd` of
/// 1 GiB, 1.05 s of system time into fresh memory, 0.32 s into freed pages). Dropped as the pull
/// goes, the same few megabytes of pages are reused by the next writes and the fsync finds
/// little left to write. Durability is the fsync's, as before; into memory used before, the
/// pull's CPU is the same with or without this (Docs/benchmarks.md).
final class WriteBehind: Sendable {
    /// How much is written between two drops.
    static let step = 8 << 20

    private let fd: Int32
    private let sinceDrop = Mutex(0)

    init(fd: Int32) {
        self.fd = fd
    }

    /// Counts `bytes` written; past ``step`` since the last drop, starts the writeback and
    /// drops what is clean. A failure is ignored: the pages then stay until the fsync.
    func wrote(_ bytes: Int) {
        let due = sinceDrop.withLock { written in
            written += bytes
            guard written >= Self.step else { return false }
            written = 0
            return true
        }
        if due { _ = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) }
    }
}
