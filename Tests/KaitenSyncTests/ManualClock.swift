import Synchronization

/// A clock that moves only when a test says (``advance(by:)``): a loop's waits take no real time,
/// and what the test measures is the loop's own time, whatever the machine's load.
final class ManualClock: Clock, Sendable {
    typealias Instant = ContinuousClock.Instant

    private struct Sleeper {
        let id: Int
        let deadline: Instant
        let length: Duration
        let wake: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var elapsed: Duration = .zero
        var sleepers: [Sleeper] = []
        var nextID = 0
    }

    private let origin = ContinuousClock.now
    private let state = Mutex(State())

    var now: Instant { origin + elapsed }
    var minimumResolution: Duration { .zero }

    /// How far the clock has been moved.
    var elapsed: Duration { state.withLock { $0.elapsed } }

    /// Whether some task sleeps for `length` (counted from when it fell asleep).
    func hasSleeper(lasting length: Duration) -> Bool {
        state.withLock { $0.sleepers.contains { $0.length == length } }
    }

    /// Moves the clock on, waking every sleeper whose deadline has come.
    func advance(by duration: Duration) {
        let woken = state.withLock { state in
            state.elapsed += duration
            let now = origin + state.elapsed
            let woken = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return woken
        }
        for sleeper in woken { sleeper.wake.resume() }
    }

    func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (wake: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Void, any Error>? = state.withLock { state in
                    let now = origin + state.elapsed
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if deadline <= now { return .success(()) }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, length: deadline - now, wake: wake))
                    return nil
                }
                if let outcome { wake.resume(with: outcome) }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            sleeper?.wake.resume(throwing: CancellationError())
        }
    }
}
