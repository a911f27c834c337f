import Foundation
import Synchronization
import KaitenTestSupport
import Testing

@testable import KaitenTransfer

#if canImport(Glibc)
import Glibc
#endif

@Suite(.timeLimit(.minutes(5))) struct GroupSyncTests {
    @Test(arguments: [
        ("6.18.44-fc-v669", true), ("5.8.0", true), ("5.10.0-23-amd64", true), ("6.1.0-18-cloud-amd64", true),
        ("5.7.19", false), ("4.19.0-26-amd64", false), ("", false), ("linux", false),
    ])
    func syncfsIsTrustedFromLinux58(release: String, trusted: Bool) {
        #expect(GroupSync.kernel(release, isAtLeast: (5, 8)) == trusted)
    }

    /// Every file waiting is released by a flush, none before one has run, and the files that
    /// become ready while a flush runs share the next one rather than having one each.
    @Test func filesInFlightTogetherShareFlushes() async throws {
        let root = try TemporaryDirectory()
        let count = 200
        // The first flush is held, as a slow disk would hold it, until every file waits: those
        // not in its round must then share the second. (Held until then, not for a fixed time:
        // on a loaded test pool the 200 tasks may start seconds apart, and files that do not
        // wait at the same time need not share a flush.)
        let held = Atomic<Bool>(false)
        let holder = Mutex<GroupSync?>(nil)
        guard
            let group = GroupSync(
                root: root.path,
                beforeFlush: {
                    guard !held.exchange(true, ordering: .relaxed), let group = holder.withLock({ $0 }) else { return }
                    let deadline = ContinuousClock.now + .seconds(60)
                    while group.queued < count, ContinuousClock.now < deadline { usleep(1_000) }
                }, dirtyBytes: { 0 })
        else {
            // The one line a kernel before 5.8 gets: there each file is fsynced on its own.
            try Test.cancel("syncfs does not report write-back errors before Linux 5.8: each file is fsynced, no group to test")
        }
        holder.withLock { $0 = group }
        let results = await withTaskGroup(of: Int32.self, returning: [Int32].self) { tasks in
            for i in 0..<count {
                tasks.addTask {
                    let fd = open(root.path + "/f\(i)", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
                    defer { close(fd) }
                    let bytes = [UInt8](repeating: UInt8(i & 0xff), count: 4096)
                    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                    return await group.sync(fd)
                }
            }
            return await tasks.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == count)
        #expect(results.allSatisfy { $0 == 0 })
        #expect(group.queued == count)
        // The first round (whoever waited when it began), then one for all the others (none
        // when the first round began late enough to take them all).
        #expect((1...2).contains(group.flushes))
    }

    /// A flush that fails fails every file that waited for it (none is called durable), and
    /// from then on each file has its own fsync, whose error is its own: an error syncfs
    /// reported once is not reported again to the next round.
    @Test func aFailedFlushFailsItsWaitersAndLaterFilesAreFsyncedAlone() async throws {
        let root = try TemporaryDirectory()
        defer { root.remove() }
        guard let group = GroupSync(root: root.path, beforeFlush: nil, dirtyBytes: { 0 }, syncfs: { _ in errno = EIO; return -1 }) else {
            try Test.cancel("syncfs does not report write-back errors before Linux 5.8: each file is fsynced, no group to test")
        }
        let results = await withTaskGroup(of: Int32.self, returning: [Int32].self) { tasks in
            for i in 0..<20 {
                tasks.addTask {
                    let fd = open(root.path + "/f\(i)", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
                    defer { close(fd) }
                    return await group.sync(fd)
                }
            }
            return await tasks.reduce(into: []) { $0.append($1) }
        }
        // Each file waited for a flush that failed, or came after the failure and was fsynced alone.
        #expect(results.contains(EIO), "\(results)")
        #expect(group.flushes >= 1)
        let failedRounds = group.flushes
        let fd = open(root.path + "/later", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        defer { close(fd) }
        #expect(await group.sync(fd) == 0, "a later file has its own fsync, which works")
        #expect(group.flushes == failedRounds, "no further file system flush after a failure")
        #expect(results.allSatisfy { $0 == EIO || $0 == 0 }, "\(results)")
    }

    /// With much else waiting to be written in the system, a round does not flush the whole
    /// file system for its files: each has its own fsync.
    @Test func withMuchDirtyDataElsewhereEachFileIsFsyncedOnItsOwn() async throws {
        let root = try TemporaryDirectory()
        let held = Atomic<Bool>(false)
        guard
            let group = GroupSync(
                root: root.path, beforeFlush: { if !held.exchange(true, ordering: .relaxed) { usleep(200_000) } },
                dirtyBytes: { GroupSync.dirtyLimit + 1 })
        else {
            try Test.cancel("syncfs does not report write-back errors before Linux 5.8: each file is fsynced, no group to test")
        }
        let results = await withTaskGroup(of: Int32.self, returning: [Int32].self) { tasks in
            for i in 0..<50 {
                tasks.addTask {
                    let fd = open(root.path + "/f\(i)", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
                    defer { close(fd) }
                    _ = [UInt8](repeating: 1, count: 4096).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                    return await group.sync(fd)
                }
            }
            return await tasks.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == 50 && results.allSatisfy { $0 == 0 })
        #expect(group.flushes == 0)
    }

    @Test func dirtyBytesAreReadFromMeminfo() {
        let text = "MemTotal:       24684132 kB\nDirty:              1536 kB\nWriteback:             0 kB\n"
        #expect(GroupSync.dirtyBytes(inMeminfo: text) == 1536 << 10)
        #expect(GroupSync.dirtyBytes(inMeminfo: "MemTotal: 1 kB\n") == 0)
        #expect(GroupSync.systemDirtyBytes() >= 0)
    }

    /// The dirty data is read again only once the last reading is old enough.
    @Test func theDirtyDataIsReadAtMostOncePerAge() async throws {
        let reads = Atomic<Int>(0)
        let recent = RecentReading(maxAgeNanoseconds: 1_000_000_000) { reads.add(1, ordering: .relaxed).newValue * 10 }
        #expect(recent.value() == 10)
        #expect(recent.value() == 10 && recent.value() == 10)
        #expect(reads.load(ordering: .relaxed) == 1)
        try await Task.sleep(for: .milliseconds(1100))
        #expect(recent.value() == 20)
        #expect(reads.load(ordering: .relaxed) == 2)
    }

    /// A file on another file system than the folder's (a mount below it) is not covered by the
    /// folder's syncfs: it gets its own fsync.
    @Test func aFileOnAnotherFileSystemIsFsyncedOnItsOwn() async throws {
        let root = try TemporaryDirectory()
        var rootInfo = stat(), shmInfo = stat()
        guard stat(root.path, &rootInfo) == 0, stat("/dev/shm", &shmInfo) == 0, rootInfo.st_dev != shmInfo.st_dev,
            let group = GroupSync(root: root.path)
        else {
            print("GroupSync: no second file system at /dev/shm (or kernel before 5.8); skipped")
            return
        }
        let path = "/dev/shm/kaiten-groupsync-\(getpid())"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        defer {
            close(fd)
            unlink(path)
        }
        #expect(await group.sync(fd) == 0)
        #expect(group.flushes == 0)
    }
}
