import Foundation
import Synchronization
import KaitenTestSupport
import Testing

@testable import KaitenTransfer

#if canImport(Glibc)
import Glibc
#endif

/// A file's blocks are written one at a time whichever tasks fetched them (two threads writing
/// one file spun on its inode's lock), each block's task ends only once its block is written
/// (the pull's window bounds what is held in memory), and a failed write fails its block and
/// every block after it.
@Suite(.timeLimit(.minutes(5))) struct SerialWritesTests {
    /// Records what a writer saw: how many writes ran at once at most, and every write.
    final class Recorder: Sendable {
        let active = Atomic<Int>(0)
        let mostAtOnce = Atomic<Int>(0)
        let writes = Mutex<[(offset: Int64, count: Int)]>([])

        func write(_ data: Data, _ offset: Int64) -> Int {
            let now = active.add(1, ordering: .relaxed).newValue
            _ = mostAtOnce.max(now, ordering: .relaxed)
            usleep(200)  // a write takes a while: other blocks arrive meanwhile
            writes.withLock { $0.append((offset, data.count)) }
            active.subtract(1, ordering: .relaxed)
            return data.count
        }
    }

    @Test func blocksFromManyTasksAreWrittenOneAtATimeAndAllOfThem() async throws {
        let recorder = Recorder()
        let writes = SerialWrites(name: "a.bin", progress: nil) { recorder.write($0, $1) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<400 {
                group.addTask { try await writes.write(Data(count: 100), at: Int64(i) * 100) }
            }
            try await group.waitForAll()
        }
        #expect(recorder.mostAtOnce.load(ordering: .relaxed) == 1)
        let offsets = recorder.writes.withLock { $0.map(\.offset) }.sorted()
        #expect(offsets == (0..<400).map { Int64($0) * 100 })
    }

    final class Flags: Sendable {
        let release = Atomic<Bool>(false)
        let started = Atomic<Bool>(false)
        let done = Atomic<Int>(0)
    }

    @Test func aBlocksTaskEndsOnlyOnceItsBlockIsWritten() async throws {
        let flags = Flags()
        let writes = SerialWrites(name: "a.bin", progress: nil) { data, _ in
            flags.started.store(true, ordering: .relaxed)
            // Held until released: at most 60 s, so that a second writer let in at once (holding
            // both of the pool's threads) fails the test rather than hangs it. Not less: under a
            // loaded CI the test's own task waited seconds for a thread.
            for _ in 0..<60_000 where !flags.release.load(ordering: .relaxed) { usleep(1000) }
            return data.count
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await writes.write(Data(count: 10), at: 0)
                flags.done.add(1, ordering: .relaxed)
            }
            while !flags.started.load(ordering: .relaxed) { try await Task.sleep(for: .milliseconds(1)) }
            // A second block arrives while the first is being written: it waits, its task with it.
            group.addTask {
                try await writes.write(Data(count: 10), at: 10)
                flags.done.add(1, ordering: .relaxed)
            }
            try await Task.sleep(for: .milliseconds(100))
            #expect(flags.done.load(ordering: .relaxed) == 0)
            flags.release.store(true, ordering: .relaxed)
            try await group.waitForAll()
        }
        #expect(flags.done.load(ordering: .relaxed) == 2)
    }

    @Test func aFailedWriteFailsItsBlockAndEveryLaterOne() async throws {
        let calls = Atomic<Int>(0)
        let writes = SerialWrites(name: "a.bin", progress: nil) { data, offset in
            _ = calls.add(1, ordering: .relaxed)
            usleep(500)
            if offset == 30 {
                errno = ENOSPC
                return -1
            }
            return data.count
        }
        let outcomes = await withTaskGroup(of: (Int64, ApplyError?).self, returning: [Int64: ApplyError?].self) { group in
            for i in 0..<6 {
                group.addTask {
                    do {
                        try await writes.write(Data(count: 10), at: Int64(i) * 10)
                        return (Int64(i) * 10, nil)
                    } catch let error as ApplyError {
                        return (Int64(i) * 10, error)
                    } catch {
                        Issue.record("not an ApplyError: \(error)")
                        return (Int64(i) * 10, nil)
                    }
                }
            }
            var outcomes: [Int64: ApplyError?] = [:]
            for await (offset, error) in group { outcomes[offset] = error }
            return outcomes
        }
        let failed = outcomes.filter { $0.value != nil }
        #expect(failed[30] != nil)
        #expect(failed.values.allSatisfy { $0?.code == .noSpace && $0?.description.contains("a.bin") == true })
        // After the failure nothing more is written: a later block fails without a write.
        await #expect(throws: ApplyError.self) { try await writes.write(Data(count: 10), at: 100) }
        #expect(calls.load(ordering: .relaxed) <= 6)
    }

    final class InUse: Sendable {
        let now = Atomic<Int>(0)
        let most = Atomic<Int>(0)
    }

    /// What the files of an apply hold at once: never more than the budget, whatever their
    /// number; each one waiting gets its turn; a block bigger than the budget goes alone.
    @Test func filesInFlightShareTheBudget() async {
        let budget = AsyncBudget(1000)
        let inUse = InUse()
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<200 {
                group.addTask {
                    let bytes = [100, 300, 700][i % 3]
                    await budget.acquire(bytes)
                    let now = inUse.now.add(bytes, ordering: .relaxed).newValue
                    _ = inUse.most.max(now, ordering: .relaxed)
                    try? await Task.sleep(for: .microseconds(200))
                    inUse.now.subtract(bytes, ordering: .relaxed)
                    budget.release(bytes)
                }
            }
        }
        #expect(inUse.most.load(ordering: .relaxed) <= 1000)
        #expect(inUse.most.load(ordering: .relaxed) >= 700)
        #expect(budget.used == 0)
        // Bigger than the budget: it goes when nothing else is in flight.
        await budget.acquire(5000)
        #expect(budget.used == 5000)
        budget.release(5000)
    }
}
