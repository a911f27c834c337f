import Synchronization

/// At most `limit` units held at once (bytes of blocks in flight, helper processes), granted in
/// the order asked; one request bigger than the limit is granted when nothing else is held.
///
/// The files an apply pulls at once share one of bytes: what a pull holds in memory is bounded
/// by it, not by the files in flight times their windows (4 files of 256 KiB blocks, 32 each,
/// held 32 MiB: the 1 GiB pull went past its 64 MiB budget).
public final class AsyncBudget: Sendable {
    private struct State {
        var used = 0
        var waiting: [(bytes: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    public let limit: Int
    private let state = Mutex(State())

    public init(_ limit: Int) { self.limit = limit }

    /// Waits until `bytes` fit (in turn: the first waiting goes first), then takes them.
    public func acquire(_ bytes: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state in
                guard state.waiting.isEmpty, state.used == 0 || state.used + bytes <= limit else {
                    state.waiting.append((bytes, continuation))
                    return false
                }
                state.used += bytes
                return true
            }
            if now { continuation.resume() }
        }
    }

    /// Gives back what an ``acquire(_:)`` took.
    public func release(_ bytes: Int) {
        let ready = state.withLock { state in
            state.used -= bytes
            var ready: [CheckedContinuation<Void, Never>] = []
            while let first = state.waiting.first, state.used == 0 || state.used + first.bytes <= limit {
                state.waiting.removeFirst()
                state.used += first.bytes
                ready.append(first.continuation)
            }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    /// Bytes taken now (tests).
    var used: Int { state.withLock { $0.used } }
}
