import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Issue 13, item 2: the snapshot and its log stay consistent under kill -9. `kaiten index
/// compact` (a new log, then a new snapshot beside it) is killed at random moments; after each
/// kill the log opens, the view read with whatever snapshot is there is exactly the view of a
/// full replay, and the next writer leaves a snapshot that is used again.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct IndexSnapshotCrashTests {
    static let peer = "MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD"

    /// Everything a view says, comparable.
    static func view(_ log: IndexLog) -> [String] {
        var lines: [String] = []
        log.index.forEachEntry { path, device, entry in
            lines.append("\(path) \(device.shortDescription) \(entry.version.descriptions) \(entry.size) \(entry.isDeleted) \(entry.recordOffset)")
        }
        lines.sort()
        lines += log.checkpoints.map { "checkpoint \($0.key.shortDescription) \($0.value.indexID) \($0.value.maxSequence)" }.sorted()
        lines.append("live \(log.liveBytes) size \(log.fileSize)")
        return lines
    }

    /// The view of a full replay (a copy of the log without its snapshot).
    static func fullReplay(_ path: String, in dir: TemporaryDirectory) throws -> [String] {
        let copy = dir.file("replay-\(UUID().uuidString).log")
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        defer { try? FileManager.default.removeItem(atPath: copy) }
        let log = try IndexLog.open(path: copy, folderID: "photos", readOnly: true)
        defer { log.close() }
        return view(log)
    }

    @Test func killingACompactionAtAnyMomentLeavesALogAndASnapshotThatAgree() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = dir.file("home")
        #expect(try KaitenCLI.run(["init", "--home", home, "--name", "ci"]).status == 0)
        #expect(try KaitenCLI.run(["peer", "add", "--home", home, Self.peer, "--name", "nas"]).status == 0)
        let add = try KaitenCLI.run(["folder", "add", "--home", home, "photos", "--path", dir.file("data"), "--share", "nas"])
        #expect(add.status == 0, "\(add.stderr)")

        // A log above the snapshot threshold (4 MiB), with dead records for compaction to drop.
        let logPath = Home(path: home).indexLogPath(folderID: "photos")
        let device = try DeviceID(Self.peer)
        let log = try IndexLog.open(path: logPath, folderID: "photos")
        var sequence: Int64 = 0
        for batch in 0..<36 {
            var files: [BEPFileInfo] = []
            for i in 0..<1000 {
                sequence += 1
                var file = BEPFileInfo()
                file.name = "d\(i % 50)/f\(batch < 30 ? batch * 1000 + i : i).jpg"
                file.size = 1000 + sequence
                file.sequence = sequence
                file.modifiedS = 1_790_000_000
                var counter = BEPCounter()
                counter.id = device.shortID
                counter.value = UInt64(sequence)
                file.version.counters = [counter]
                var block = BEPBlockInfo()
                block.size = Int32(file.size)
                block.hash = Data(repeating: UInt8(sequence & 0xFF), count: 32)
                file.blocks = [block]
                files.append(file)
            }
            try log.apply(device: device, indexID: 5, files: files, isFullIndex: batch == 0)
        }
        log.close()
        let expectedEntries = try Self.fullReplay(logPath, in: dir).dropLast()

        // How long one compaction takes here, to spread the kills over it.
        let started = Date()
        let first = try KaitenCLI.run(["index", "compact", "--home", home, "photos"])
        #expect(first.status == 0, "\(first.stderr)")
        let duration = max(Date().timeIntervalSince(started), 0.2)
        #expect(FileManager.default.fileExists(atPath: IndexLog.snapshotPath(of: logPath)), "a compacted log above 4 MiB has a snapshot")

        var generator = SystemRandomNumberGenerator()
        for round in 0..<5 {
            let process = try KaitenCLI.start(["index", "compact", "--home", home, "photos"], logPath: dir.file("compact.log"))
            usleep(UInt32(Double.random(in: 0...duration, using: &generator) * 1_000_000))
            kill(process.processIdentifier, SIGKILL)
            try process.waitForExit(timeout: 30, what: "kaiten index compact")

            // Whatever the moment: the log opens, and its view (snapshot or not) is the full replay's.
            var warnings: [String] = []
            let reader = try IndexLog.open(path: logPath, folderID: "photos", readOnly: true, warn: { warnings.append($0) })
            let seen = Self.view(reader)
            reader.close()
            #expect(seen == (try Self.fullReplay(logPath, in: dir)), "round \(round): \(warnings)")
            #expect(seen.dropLast().map { $0.split(separator: " ").dropLast().joined(separator: " ") }
                == expectedEntries.map { $0.split(separator: " ").dropLast().joined(separator: " ") },
                "round \(round): the same entries as before any compaction")

            // The next writer cleans up and leaves a snapshot the next open uses.
            let writer = try IndexLog.open(path: logPath, folderID: "photos")
            writer.close()
            let again = try IndexLog.open(path: logPath, folderID: "photos", readOnly: true)
            #expect(again.index.hasSnapshot, "round \(round): \(again.snapshotRejection ?? "no snapshot")")
            #expect(Self.view(again) == (try Self.fullReplay(logPath, in: dir)))
            again.close()
        }
    }
}
