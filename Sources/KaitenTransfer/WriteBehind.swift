import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Keeps what a pull writes to one file from piling up in the page cache: every ``step`` bytes
/// written, the file's dirty pages are sent to the disk and those already written back are
/// dropped. `POSIX_FADV_DONTNEED` does both: it starts the writeback of the file (without
/// waiting), then drops its clean pages; dirty pages and pages still being written stay.
///
/// Left alone, a 1 GiB pull filled the page cache with a gigabyte that nobody reads soon, and
/// the final fsync wrote all of it. Each of those pages was memory the kernel had not used
/// for a while; on this virtual machine the first touch of such memory is slow (the copy into
/// the page cache was 35 % of the pull's CPU, `perf`; `dd` of 1 GiB: 1.05 s of system time the
/// first time, 0.32 s into recycled pages). Dropped as the pull goes, the same few megabytes
/// of pages are reused by the next writes, a pull does not push the user's working set out of
/// the cache, and the fsync finds little left to write. Durability is the fsync's, as before.
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
