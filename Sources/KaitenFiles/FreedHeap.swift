/// The process's heap, as glibc's malloc keeps it.
public enum FreedHeap {
    /// Gives the pages of freed heap memory back to the system: a big index leaves the heap
    /// in small pieces that glibc keeps (only its top is ever trimmed by itself).
    public static func giveBack() {
        _ = mallocTrim(0)
    }
}

/// glibc's `malloc_trim` (declared in malloc.h, which the Glibc module does not export).
@_silgen_name("malloc_trim")
private func mallocTrim(_ keep: Int) -> Int32
