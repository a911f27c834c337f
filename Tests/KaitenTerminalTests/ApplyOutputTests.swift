import Foundation
import Synchronization
import Testing

@testable import KaitenTerminal

/// `apply --json` writes the lines of finished actions together, never out of order, and none
/// waits long.
@Suite struct ApplyOutputTests {
    final class Written: Sendable {
        let chunks = Mutex<[String]>([])
        var all: [String] { chunks.withLock { $0 } }
        var lines: [String] { all.joined().split(separator: "\n").map(String.init) }
    }

    func output() -> (ApplyOutput, Written) {
        let written = Written()
        return (ApplyOutput(json: true) { bytes in written.chunks.withLock { $0.append(String(decoding: bytes, as: UTF8.self)) } }, written)
    }

    @Test func finishedActionsWaitForTheNextLineOfAnotherKindAndGoOutInOneWriteInOrder() {
        let (output, written) = output()
        for i in 0..<3 { output.emit(["type": "action_done", "path": "f\(i)"]) }
        #expect(written.all.isEmpty, "a finished action's line was written at once")
        output.emit(["type": "progress", "files_done": 3])
        #expect(written.all.count == 1, "the waiting lines and the progress line were not one write")
        #expect(written.lines.map { $0.contains("\"progress\"") ? "progress" : String($0.split(separator: "\"path\":\"")[1].prefix(2)) } == ["f0", "f1", "f2", "progress"])
    }

    @Test func aFinishedActionsLineIsWrittenWithinAFifthOfASecondWhenNothingFollows() async throws {
        let (output, written) = output()
        output.emit(["type": "action_done", "path": "alone"])
        let deadline = ContinuousClock.now + .seconds(5)
        while written.all.isEmpty && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(written.lines.count == 1 && written.lines[0].contains("\"alone\""))
    }

    @Test func theEndWritesWhatWaits() {
        let (output, written) = output()
        output.emit(["type": "action_done", "path": "last"])
        output.flush()
        #expect(written.lines.count == 1)
        output.flush()
        #expect(written.all.count == 1, "an empty flush wrote")
    }

    @Test func manyFinishedActionsAreWrittenOnceTheyFillTheBuffer() {
        let (output, written) = output()
        let path = String(repeating: "p", count: 1000)
        for _ in 0..<(ApplyOutput.unwrittenBytes / 1000 + 1) { output.emit(["type": "action_done", "path": path]) }
        #expect(!written.all.isEmpty, "32 KiB of lines still waited")
    }
}
