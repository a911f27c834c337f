import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenService

/// The change watcher of each configuration: a reload stops one and starts the next, so what
/// one opens is closed again once it is stopped, however its thread and its stop interleave.
@Suite(.timeLimit(.minutes(5)), .ownThread)
struct ChangeWatcherLifecycleTests {
    /// What this process's descriptors are (`socket:[inode]`, `anon_inode:inotify`, …).
    static func openDescriptors() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return names.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0) }
    }

    static func link(_ fd: Int32) -> String? { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)") }

    /// A folder and a selection directory to watch, made under `directory`.
    static func watched(in directory: TemporaryDirectory) throws -> (folder: String, selections: String) {
        let folder = directory.file("folder")
        let selections = directory.file("selections")
        for path in [folder, selections] { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        return (folder, selections)
    }

    @Test func aStoppedWatcherLeavesNoDescriptorOpen() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (folder, selections) = try Self.watched(in: directory)
        let config = directory.file("config.xml")
        // Other suites open sockets meanwhile (numbers are reused), but no other part of this
        // process watches with inotify: the watcher's wake sockets are known by their inodes.
        let inotify = { Self.openDescriptors().filter { $0 == "anon_inode:inotify" }.count }
        let before = inotify()
        var wakeSockets: [String] = []
        for round in 0..<100 {
            let watcher = ChangeWatcher(folders: [("f", folder)], selectionDirectory: selections, configPath: config, warn: { _ in })
            wakeSockets += [watcher.wakeFD, watcher.wakeWriteFD].compactMap(Self.link)
            // An event in flight as it stops, now and then: the thread may be awake or asleep.
            if round % 2 == 0 { try Data("\(round)".utf8).write(to: URL(fileURLWithPath: config)) }
            watcher.stop()
        }
        #expect(wakeSockets.count == 200 && wakeSockets.allSatisfy { $0.hasPrefix("socket:") })
        // The threads close their ends as they end.
        let deadline = ContinuousClock.now + .seconds(60)
        var open: Set<String> = []
        repeat {
            open = Set(Self.openDescriptors()).intersection(wakeSockets)
            if open.isEmpty && inotify() == before { break }
            try await Task.sleep(for: .milliseconds(20))
        } while ContinuousClock.now < deadline
        #expect(inotify() == before)
        #expect(open.isEmpty, "\(open.count) wake sockets still open")
    }

    /// A burst of writes (an apply pulling many small files) is read in batches, every path
    /// passed on; the first change of a burst is passed on at once.
    @Test func aBurstIsReadInBatchesAndEveryPathPassedOn() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (folder, selections) = try Self.watched(in: directory)
        let watcher = ChangeWatcher(
            folders: [("f", folder)], selectionDirectory: selections, configPath: directory.file("config.xml"), warn: { _ in })
        defer { watcher.stop() }
        var changes = watcher.changes.makeAsyncIterator()
        try Data("first".utf8).write(to: URL(fileURLWithPath: folder + "/first.txt"))
        let started = ContinuousClock.now
        var first: Set<String> = []
        while first.count < 1, let change = await changes.next() {
            if case .folder(_, let path) = change { first.insert(path) }
        }
        #expect(first == ["first.txt"])
        #expect(ContinuousClock.now - started < .seconds(5))
        // As an apply writes: a temp file, written, closed, renamed into place.
        let count = 2_000
        let burstStarted = ContinuousClock.now
        let readsBefore = watcher.readsWithEvents.load(ordering: .relaxed)
        for i in 0..<count {
            let temp = folder + "/.syncthing.f\(i).txt.tmp"
            try Data("\(i)".utf8).write(to: URL(fileURLWithPath: temp))
            rename(temp, folder + "/f\(i).txt")
        }
        var seen: Set<String> = []
        while seen.count < count, let change = await changes.next() {
            if case .folder(_, let path) = change, path.hasPrefix("f") { seen.insert(path) }
        }
        #expect(seen.count == count)
        #expect(!seen.contains { $0.contains(".tmp") })
        // Five events a file: read one wake-up each, the reads would be in the thousands. Batched,
        // there is at most one read per gather, plus the reads that half filled the buffer (each
        // event at most 48 bytes here, six a file at most): however slowly a loaded machine
        // writes the burst, that bound holds.
        let elapsed = ContinuousClock.now - burstStarted
        let reads = watcher.readsWithEvents.load(ordering: .relaxed) - readsBefore
        let gathers = Int(elapsed / .microseconds(Int(ChangeWatcher.burstGather))) + 1
        let fullReads = count * 6 * 48 / (32 * 1024) + 1
        #expect(reads <= gathers + fullReads, "\(reads) reads in \(elapsed) for \(count) files (at most \(gathers) gathers and \(fullReads) full reads)")
    }
}
