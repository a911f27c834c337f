@_spi(CustomByteBufferAllocator) import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The memory of the frames the block server reads blocks into, kept for the next frames once
/// sent (up to 16 MiB).
///
/// Every block served is read into a new frame of its size (128 KiB to 16 MiB, rounded up to a
/// power of two) on a worker thread and freed on the event loop once TLS has it. From glibc those
/// came back as fresh pages: the worker's arena gives its top back to the kernel whenever more
/// than 2 MiB are free there (``HeapTuning``), so the read into the next frame faulted in and
/// cleared every page — 14 % of a serving process's CPU in `clear_page_erms` under `pread`.
/// Kept here, a frame's pages stay mapped for the next one. Nothing else uses this memory.
public enum FrameMemory {
    /// Buffers from this allocator come from (and go back to) the kept frames.
    public static let allocator = ByteBufferAllocator(
        allocate: { size in frameAllocate(size) },
        reallocate: { pointer, oldSize, newSize in frameReallocate(pointer, oldSize, newSize) },
        deallocate: { pointer in frameDeallocate(pointer) },
        copy: { destination, source, count in destination.copyMemory(from: source, byteCount: count) })

    /// At most this many bytes of sent frames are kept.
    static let keptLimit = 16 << 20

    /// Bytes before each frame's memory, holding its size (a multiple of 16: malloc's alignment).
    static let header = 64

    struct Kept {
        /// Frames' addresses (as numbers: a pointer is not Sendable) by size.
        var free: [Int: [UInt]] = [:]
        var bytes = 0
    }

    static let kept = Mutex(Kept())

    /// A kept frame of exactly `size` bytes (its header's address), if there is one.
    static func take(_ size: Int) -> UnsafeMutableRawPointer? {
        kept.withLock { kept in
            guard let base = kept.free[size]?.popLast() else { return nil }
            kept.bytes -= size
            return UnsafeMutableRawPointer(bitPattern: base)
        }
    }

    /// Keeps a sent frame for the next one unless that would pass the limit.
    static func keep(_ base: UnsafeMutableRawPointer, size: Int) -> Bool {
        kept.withLock { kept in
            guard kept.bytes + size <= keptLimit else { return false }
            kept.free[size, default: []].append(UInt(bitPattern: base))
            kept.bytes += size
            return true
        }
    }

    /// Gives every kept frame back (a service between rounds: an idle process keeps nothing).
    public static func releaseKept() {
        let all = kept.withLock { kept in
            defer { kept = Kept() }
            return kept.free.values.flatMap { $0 }
        }
        for base in all { free(UnsafeMutableRawPointer(bitPattern: base)) }
    }

    /// Bytes kept now (tests).
    static var keptBytes: Int { kept.withLock { $0.bytes } }
}

private func frameAllocate(_ size: Int) -> UnsafeMutableRawPointer? {
    if let base = FrameMemory.take(size) { return base + FrameMemory.header }
    guard let base = malloc(size + FrameMemory.header) else { return nil }
    base.storeBytes(of: size, as: Int.self)
    return base + FrameMemory.header
}

private func frameDeallocate(_ pointer: UnsafeMutableRawPointer) {
    let base = pointer - FrameMemory.header
    if !FrameMemory.keep(base, size: base.load(as: Int.self)) { free(base) }
}

private func frameReallocate(_ pointer: UnsafeMutableRawPointer?, _ oldSize: Int, _ newSize: Int) -> UnsafeMutableRawPointer? {
    guard let fresh = frameAllocate(newSize) else { return nil }
    if let pointer {
        fresh.copyMemory(from: pointer, byteCount: min(oldSize, newSize))
        frameDeallocate(pointer)
    }
    return fresh
}
