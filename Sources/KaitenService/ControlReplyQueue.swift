import Foundation
import KaitenApply
import Synchronization

/// The replies of one apply on the control socket, in order, through one writer. Events posted
/// while a frame is being written go out together in the next frame for a client that asked
/// for batches (``ControlRequest/batches``), one frame each for one that did not: a pull of
/// 5,000 small files was 5,000 JSON frames, encoded and decoded one by one.
final class ControlReplyQueue: Sendable {
    enum Item: Sendable {
        case event(ApplyEvent)
        case reply(ControlReply)
    }

    /// The most events in one frame: far below the frame's limit with long paths too.
    static let eventsPerFrame = 1_000

    let batches: Bool
    private let pending = Mutex<[Item]>([])
    private let kicks: AsyncStream<Void>
    private let kick: AsyncStream<Void>.Continuation

    init(batches: Bool) {
        self.batches = batches
        (kicks, kick) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func post(_ event: ApplyEvent) {
        pending.withLock { $0.append(.event(event)) }
        kick.yield()
    }

    func post(_ reply: ControlReply) {
        pending.withLock { $0.append(.reply(reply)) }
        kick.yield()
    }

    /// No more posts: ``run(_:)`` returns once everything posted is sent.
    func finish() { kick.finish() }

    /// Sends what is posted until ``finish()``. A failed send (the client went away) is not
    /// retried; the apply learns of a client gone from its stop signal.
    func run(_ send: @Sendable (ControlReply) async throws -> Void) async {
        for await _ in kicks { await drain(send) }
        await drain(send)
    }

    private func drain(_ send: @Sendable (ControlReply) async throws -> Void) async {
        let items = pending.withLock { items in
            let taken = items
            items.removeAll(keepingCapacity: true)
            return taken
        }
        var events: [ApplyEvent] = []
        func sendEvents() async {
            guard !events.isEmpty else { return }
            var reply = ControlReply(.event)
            reply.events = events
            events.removeAll(keepingCapacity: true)
            try? await send(reply)
        }
        for item in items {
            switch item {
            case .event(let event) where batches:
                events.append(event)
                if events.count >= Self.eventsPerFrame { await sendEvents() }
            case .event(let event):
                var reply = ControlReply(.event)
                reply.event = event
                try? await send(reply)
            case .reply(let reply):
                await sendEvents()
                try? await send(reply)
            }
        }
        await sendEvents()
    }
}
