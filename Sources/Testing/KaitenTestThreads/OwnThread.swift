import Foundation
import Testing

/// Runs each test of a suite on a thread of its own instead of Swift's cooperative pool.
///
/// The pool has one thread per core (two on CI). Swift Testing starts every test at once, and
/// a test that blocks (waits for a `kaiten` or `syncthing` it ran, kills a process at a random
/// moment) or computes for seconds (a fuzzer) holds a pool thread all that time: the other
/// tests' continuations queue behind it, and a test that takes a millisecond measured 78 s
/// against its one-minute limit. Tests that block or compute for long carry this trait so the
/// pool stays free for those that only await.
///
/// Not for tests of code that must share the pool with them: a test that holds a thread to
/// show that another task waits.
public struct OwnThreadTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // A suite's own scope wraps its tests'; only a test case needs the thread.
        guard testCase != nil else { return try await function() }
        let executor = ThreadExecutor(name: test.name)
        defer { executor.finish() }
        try await withTaskExecutorPreference(executor) { try await function() }
    }
}

extension Trait where Self == OwnThreadTrait {
    /// Each test on a thread of its own: for tests that block or compute for long.
    public static var ownThread: Self { OwnThreadTrait() }
}

/// A task executor of its own threads: a job that finds no thread waiting gets a new one, so
/// a task that blocks never holds up another (two child tasks of a test may both wait on
/// processes). The threads end once the test has finished and the jobs given have run.
public final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let name: String
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var waiting = 0
    private var finished = false

    public init(name: String) {
        self.name = String(name.prefix(15))
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        // Counted against the threads waiting, not yet woken: a second job enqueued before the
        // first one's thread wakes gets a thread of its own.
        let needsThread = jobs.count > waiting
        condition.signal()
        condition.unlock()
        if needsThread {
            let thread = Thread { [self] in runJobs() }
            thread.name = name
            thread.start()
        }
    }

    /// Lets the threads end once the jobs already given have run.
    public func finish() {
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    private func runJobs() {
        condition.lock()
        while true {
            if !jobs.isEmpty {
                let job = jobs.removeFirst()
                condition.unlock()
                job.runSynchronously(on: asUnownedTaskExecutor())
                condition.lock()
                continue
            }
            if finished { break }
            waiting += 1
            condition.wait()
            waiting -= 1
        }
        condition.unlock()
    }
}
