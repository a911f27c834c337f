import Foundation
import KaitenApply
import KaitenTestThreads
import Synchronization
import Testing

@testable import KaitenService

/// An apply's replies on the control socket: in order, events together for a client that takes
/// batches, one to a frame for one that does not.
@Suite(.timeLimit(.minutes(2)), .ownThread)
struct ControlReplyQueueTests {
    /// What the writer sent, frame by frame: each event by the path it names, replies by kind.
    final class Sent: Sendable {
        let frames = Mutex<[[String]]>([])
        func record(_ reply: ControlReply) {
            let names: [String]
            switch reply.type {
            case .event: names = (reply.event.map { [$0] } ?? []).map(Self.name) + (reply.events ?? []).map(Self.name)
            default: names = [reply.type.rawValue]
            }
            frames.withLock { $0.append(names) }
        }
        static func name(_ event: ApplyEvent) -> String {
            if case .removedTemporary(_, let path) = event { return path }
            return "?"
        }
        var all: [[String]] { frames.withLock { $0 } }
    }

    static func event(_ n: Int) -> ApplyEvent { .removedTemporary(folder: "f", path: "e\(n)") }

    @Test func eventsGoTogetherAndRepliesKeepTheirPlace() async {
        let queue = ControlReplyQueue(batches: true)
        let sent = Sent()
        queue.post(Self.event(1))
        queue.post(Self.event(2))
        var note = ControlReply(.note)
        note.message = "waiting"
        queue.post(note)
        queue.post(Self.event(3))
        queue.post(ControlReply(.report))
        queue.finish()
        await queue.run { sent.record($0) }
        #expect(sent.all == [["e1", "e2"], ["note"], ["e3"], ["report"]])
    }

    @Test func aClientThatTakesNoBatchesGetsAFramePerEvent() async {
        let queue = ControlReplyQueue(batches: false)
        let sent = Sent()
        for n in 1...3 { queue.post(Self.event(n)) }
        queue.post(ControlReply(.report))
        queue.finish()
        await queue.run { sent.record($0) }
        #expect(sent.all == [["e1"], ["e2"], ["e3"], ["report"]])
    }

    @Test func aFrameHoldsAtMostItsShareOfEvents() async {
        let queue = ControlReplyQueue(batches: true)
        let sent = Sent()
        let count = ControlReplyQueue.eventsPerFrame * 2 + 5
        for n in 0..<count { queue.post(Self.event(n)) }
        queue.finish()
        await queue.run { sent.record($0) }
        #expect(sent.all.map(\.count) == [ControlReplyQueue.eventsPerFrame, ControlReplyQueue.eventsPerFrame, 5])
        #expect(sent.all.flatMap { $0 } == (0..<count).map { "e\($0)" })
    }

    /// While a frame is written (a client reading slowly), what comes meanwhile waits and goes
    /// out as one frame, not one each.
    @Test func eventsPostedDuringAWriteGoOutInTheNextFrame() async throws {
        let queue = ControlReplyQueue(batches: true)
        let sent = Sent()
        let (gate, open) = AsyncStream<Void>.makeStream()
        let writing = Mutex(false)
        let writer = Task {
            await queue.run { reply in
                let first = writing.withLock { was in
                    defer { was = true }
                    return !was
                }
                if first { for await _ in gate { break } }
                sent.record(reply)
            }
        }
        queue.post(Self.event(0))
        while !writing.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        for n in 1...50 { queue.post(Self.event(n)) }
        open.yield()
        queue.finish()
        await writer.value
        #expect(sent.all == [["e0"], (1...50).map { "e\($0)" }])
    }
}
