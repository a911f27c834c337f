#if canImport(Glibc)
    import Glibc

    /// How this process's heap keeps memory it freed (glibc's malloc, set once at start).
    ///
    /// A transfer allocates a buffer of a block's size (128 KiB to 16 MiB) for every block it
    /// reads, receives, encrypts or sends, and frees it a moment later. With glibc's defaults
    /// the heap hands such a block back to the kernel as soon as the free space at its top
    /// passes twice the block size (256 KiB), and the next block's buffer is fresh pages: a
    /// page fault and the kernel zeroing every page, once per 4 KiB moved (`perf stat` on a
    /// serving process: 332,000 faults for 1 GiB sent). Keeping up to 2 MiB free per arena,
    /// and taking blocks up to 32 MiB from the heap rather than from their own mappings, lets
    /// those buffers be reused (about 35,000 faults per GiB sent). Not more: every thread that
    /// allocates has its own arena, and 8 MiB kept in each put a stream through `kaiten serve`
    /// 10 MiB over its 80 MiB budget. A long-running service still gives everything back
    /// between rounds (`malloc_trim`).
    ///
    /// Two arenas, not glibc's eight per core: FUSE's worker threads, the event loops and
    /// Dispatch's threads each took an arena of their own, and what one thread freed stayed in
    /// its arena while another grew its own. Reading 1 GiB through a mount of a 100,000-file
    /// folder after a `find` and a `du`, the mount's anonymous memory grew by 17 MiB with the
    /// default and by 12 MiB with two arenas (peak RSS 86.0 → 80.4 MiB); four arenas took
    /// 1.3 MiB off the bench's median only.
    public enum HeapTuning {
        public static func keepBlockBuffers() {
            _ = setMallocOption(mallocTrimThreshold, 2 << 20)
            _ = setMallocOption(mallocMmapThreshold, 32 << 20)
            _ = setMallocOption(mallocArenaMax, 2)
        }

        // From glibc's malloc.h, which the Glibc module does not export.
        private static let mallocTrimThreshold: Int32 = -1
        private static let mallocMmapThreshold: Int32 = -3
        private static let mallocArenaMax: Int32 = -8
    }

    @_silgen_name("mallopt")
    private func setMallocOption(_ option: Int32, _ value: Int32) -> Int32
#else
    public enum HeapTuning {
        public static func keepBlockBuffers() {}
    }
#endif
