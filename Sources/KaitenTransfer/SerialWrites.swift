import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One file's blocks written one at a time, by whichever task is writing when they arrive.
///
/// Buffered writes to one file take its inode's lock in turn; two threads writing blocks of the
/// same file at once left one spinning in the kernel on the other (`rwsem_spin_on_owner`, a
/// sixth of a 1 GiB pull's CPU). A block that arrives while another task writes waits, suspended,
/// for that task to write it, and its thread goes on to other work (fetching and checking the
/// next blocks). A block's task still ends only once its block is written: the pull's window
/// keeps bounding the blocks held in memory.
final class SerialWrites: Sendable {
    /// Writes `data` at `offset`; returns the bytes written or -1 with errno set (pwrite's
    /// contract: tests put a recording writer in its place).
    typealias Writer = @Sendable (_ data: Data, _ offset: Int64) -> Int

    private enum Turn {
        case written
        case failed(ApplyError)
        case yours
    }

    private struct Waiting {
        var offset: Int64
        var data: Data
        var continuation: CheckedContinuation<Turn, Never>
    }

    private struct State {
        var waiting: [Waiting] = []
        var writing = false
        /// The first write that failed: every later block fails with it.
        var failure: ApplyError?
    }

    private let state = Mutex(State())
    private let name: String
    private let progress: ByteCounter?
    private let writer: Writer

    /// Writes to `fd`, handing what is written to `writeBehind` (see ``WriteBehind``).
    convenience init(fd: Int32, name: String, progress: ByteCounter?, writeBehind: WriteBehind? = nil) {
        self.init(name: name, progress: progress) { data, offset in
            let written = data.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
            if written > 0, let writeBehind {
                let error = errno
                writeBehind.wrote(written)
                errno = error
            }
            return written
        }
    }

    init(name: String, progress: ByteCounter?, writer: @escaping Writer) {
        self.name = name
        self.progress = progress
        self.writer = writer
    }

    /// Writes the block: at once when no other task is writing (and then every block that
    /// arrives meanwhile), else once the writing task comes to it.
    func write(_ data: Data, at offset: Int64) async throws(ApplyError) {
        let turn = await withCheckedContinuation { (continuation: CheckedContinuation<Turn, Never>) in
            let now: Turn? = state.withLock { state in
                if let failure = state.failure { return .failed(failure) }
                if state.writing {
                    state.waiting.append(Waiting(offset: offset, data: data, continuation: continuation))
                    return nil
                }
                state.writing = true
                return .yours
            }
            if let now { continuation.resume(returning: now) }
        }
        switch turn {
        case .written: return
        case .failed(let error): throw error
        case .yours: break
        }
        if let error = writeOne(data, at: offset) {
            fail(with: error)
            throw error
        }
        while true {
            let batch = state.withLock { state in
                let batch = state.waiting
                state.waiting.removeAll(keepingCapacity: true)
                if batch.isEmpty { state.writing = false }
                return batch
            }
            if batch.isEmpty { return }
            for (k, block) in batch.enumerated() {
                if let error = writeOne(block.data, at: block.offset) {
                    block.continuation.resume(returning: .failed(error))
                    for later in batch[(k + 1)...] { later.continuation.resume(returning: .failed(error)) }
                    fail(with: error)
                    return
                }
                block.continuation.resume(returning: .written)
            }
        }
    }

    private func writeOne(_ data: Data, at offset: Int64) -> ApplyError? {
        let written = writer(data, offset)
        let error = errno  // read at once: anything after the write may change it
        guard written == data.count else {
            let why = written < 0 ? String(cString: strerror(error)) : "short write (\(written) of \(data.count) bytes; is the disk full?)"
            return ApplyError(error == ENOSPC || error == EDQUOT ? .noSpace : .io, path: name, "cannot write: \(why)")
        }
        progress?.add(Int64(written))
        return nil
    }

    /// Fails every waiting block and every later one with `error`.
    private func fail(with error: ApplyError) {
        let waiting = state.withLock { state in
            state.failure = state.failure ?? error
            state.writing = false
            defer { state.waiting = [] }
            return state.waiting
        }
        for block in waiting { block.continuation.resume(returning: .failed(error)) }
    }
}
