import Foundation
import Synchronization

/// syncthing's event stream: events numbered from 1 as they happen, the latest ``capacity``
/// kept, read by long polls (`/rest/events?since=N`) that wait until something newer happens.
/// A waiting poll holds no thread; their number is bounded.
public final class EventLog: Sendable {
    public struct Event: Sendable {
        public var id: Int
        public var time: Date
        public var type: String
        /// The event's `data`, already JSON.
        public var data: [UInt8]
    }

    /// The types `/rest/events` sends when none are asked for (syncthing's default mask: every
    /// type but the two `/rest/events/disk` sends).
    public static let diskTypes: Set<String> = ["LocalChangeDetected", "RemoteChangeDetected"]

    public let capacity: Int
    /// Long polls waiting at once; one more is answered at once with nothing.
    public let maximumWaiting: Int

    private struct State {
        /// The kept events are `stored[first...]`: the oldest are dropped by moving `first`,
        /// and the array is compacted once as many are dropped as are kept (dropping each from
        /// the front moved the other thousand: a pull of 5,000 files is 10,000 events).
        var stored: [Event] = []
        var first = 0
        var events: ArraySlice<Event> { stored[first...] }
        var nextID = 1
        var waiting: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0
        /// How many events of each type were made (all of them, not only those kept).
        var made: [String: Int] = [:]
    }

    private let state = Mutex(State())

    public init(capacity: Int = 1000, maximumWaiting: Int = 256) {
        self.capacity = capacity
        self.maximumWaiting = maximumWaiting
    }

    /// Records an event; `data` is any JSON value (a dictionary, mostly).
    public func append(_ type: String, _ data: Any, at time: Date = Date()) {
        let encoded =
            ((data as? [String: Any]).flatMap(FlatJSON.object).map { Array($0.utf8) })
            ?? (try? JSONSerialization.data(withJSONObject: data, options: [.fragmentsAllowed, .sortedKeys, .withoutEscapingSlashes])).map(Array.init)
            ?? Array("null".utf8)
        append(type, json: encoded, at: time)
    }

    /// Records an event whose `data` is already JSON (the frequent ones, written directly).
    public func append(_ type: String, json encoded: [UInt8], at time: Date = Date()) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.stored.append(Event(id: state.nextID, time: time, type: type, data: encoded))
            state.made[type, default: 0] += 1
            state.nextID += 1
            state.first = max(state.first, state.stored.count - capacity)
            if state.first >= capacity {
                state.stored.removeFirst(state.first)
                state.first = 0
            }
            let woken = Array(state.waiting.values)
            state.waiting.removeAll()
            return woken
        }
        for continuation in woken { continuation.resume() }
    }

    /// The events after `since` of `types` (nil: all but the disk ones), the last `limit` of
    /// them; when there are none, waits up to `timeout` for one (and answers nothing after).
    public func events(since: Int, types: Set<String>?, limit: Int?, timeout: Duration) async -> [Event] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let (found, next) = matching(since: since, types: types, limit: limit)
            if !found.isEmpty || ContinuousClock.now >= deadline || Task.isCancelled { return found }
            guard await waitForEvent(numbered: next, until: deadline) else { return found }
        }
    }

    /// The events that match, and the id the next event will get.
    func matching(since: Int, types: Set<String>?, limit: Int?) -> ([Event], next: Int) {
        let (found, next) = state.withLock { state in
            (state.events.filter { $0.id > since && (types?.contains($0.type) ?? !Self.diskTypes.contains($0.type)) }, state.nextID)
        }
        if let limit, limit > 0, found.count > limit { return (Array(found.suffix(limit)), next) }
        return (found, next)
    }

    /// Waits until event `next` exists or the deadline; false when no wait was possible (too many).
    private func waitForEvent(numbered next: Int, until deadline: ContinuousClock.Instant) async -> Bool {
        let ticket = state.withLock { state -> Int? in
            guard state.waiting.count < maximumWaiting else { return nil }
            state.nextWaiter += 1
            return state.nextWaiter
        }
        guard let ticket else { return false }
        let timer = Task {
            try? await Task.sleep(until: deadline, clock: .continuous)
            self.wake(ticket)
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state -> Bool in
                    // An event since the matching, or the deadline already passed.
                    if state.nextID > next || ContinuousClock.now >= deadline { return true }
                    state.waiting[ticket] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            self.wake(ticket)
        }
        timer.cancel()
        return true
    }

    private func wake(_ ticket: Int) {
        state.withLock { $0.waiting.removeValue(forKey: ticket) }?.resume()
    }

    /// The id of the latest event (the `since` that waits for the next one).
    public var lastID: Int { state.withLock { $0.nextID - 1 } }

    /// How many events of each type were made since the start.
    public var madeByType: [String: Int] { state.withLock { $0.made } }

    /// How many polls wait now.
    var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// Events as syncthing sends them: `[{"id", "globalID", "time", "type", "data"}, …]`.
    public static func json(_ events: [Event]) -> [UInt8] {
        var out = Array("[".utf8)
        for (index, event) in events.enumerated() {
            if index > 0 { out += Array(",\n".utf8) }
            out += Array("{\"id\":\(event.id),\"globalID\":\(event.id),\"time\":\"\(APITime.string(event.time))\",\"type\":".utf8)
            out += (try? JSONSerialization.data(withJSONObject: event.type, options: .fragmentsAllowed)).map(Array.init) ?? Array("\"\"".utf8)
            out += Array(",\"data\":".utf8) + event.data + Array("}".utf8)
        }
        return out + Array("]\n".utf8)
    }
}
