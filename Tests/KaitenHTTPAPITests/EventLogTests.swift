import Foundation
import KaitenTestThreads
import Testing

@testable import KaitenHTTPAPI

/// The event stream's long poll: `since` never replays nor skips, a poll waits for the next
/// event and no longer than its timeout, and the waiting polls are bounded.
@Suite(.ownThread, .timeLimit(.minutes(2)))
struct EventLogTests {
    @Test func sinceAnswersWhatCameAfterItInOrderAndNothingTwice() async {
        let log = EventLog()
        for i in 1...5 { log.append(i % 2 == 0 ? "ItemFinished" : "StateChanged", ["n": i]) }
        let all = await log.events(since: 0, types: nil, limit: nil, timeout: .zero)
        #expect(all.map(\.id) == [1, 2, 3, 4, 5])
        #expect(await log.events(since: 3, types: nil, limit: nil, timeout: .zero).map(\.id) == [4, 5])
        #expect(await log.events(since: 0, types: ["ItemFinished"], limit: nil, timeout: .zero).map(\.id) == [2, 4])
        // limit: the latest N.
        #expect(await log.events(since: 0, types: nil, limit: 2, timeout: .zero).map(\.id) == [4, 5])
        // Nothing newer: nothing, once the timeout passed.
        #expect(await log.events(since: 5, types: nil, limit: nil, timeout: .milliseconds(50)).isEmpty)
    }

    /// The latest `capacity` are kept, exactly, however many came before: at every count across
    /// several compactions, `since: 0` answers the last `capacity`, in order.
    @Test func theLatestCapacityAreKeptExactlyAcrossManyEvents() async {
        let log = EventLog(capacity: 10)
        for i in 1...57 {
            log.append("ItemFinished", ["n": i])
            let kept = await log.events(since: 0, types: nil, limit: nil, timeout: .zero).map(\.id)
            #expect(kept == Array(max(1, i - 9)...i), "after \(i)")
        }
        #expect(await log.events(since: 50, types: nil, limit: nil, timeout: .zero).map(\.id) == Array(51...57))
        #expect(await log.events(since: 0, types: nil, limit: 3, timeout: .zero).map(\.id) == [55, 56, 57])
    }

    @Test func theDiskEventsGoOnlyWhereAskedFor() async {
        let log = EventLog()
        log.append("RemoteChangeDetected", ["path": "a"])
        log.append("ItemFinished", ["item": "a"])
        #expect(await log.events(since: 0, types: nil, limit: nil, timeout: .zero).map(\.type) == ["ItemFinished"])
        #expect(await log.events(since: 0, types: EventLog.diskTypes, limit: nil, timeout: .zero).map(\.type) == ["RemoteChangeDetected"])
    }

    @Test func aPollWaitsForTheNextEventAndReturnsWithIt() async throws {
        let log = EventLog()
        log.append("Starting", [:] as [String: Any])
        let started = ContinuousClock.now
        async let waited = log.events(since: 1, types: nil, limit: nil, timeout: .seconds(60))
        try await Task.sleep(for: .milliseconds(200))
        log.append("DeviceConnected", ["id": "X"])
        let events = await waited
        #expect(events.map(\.type) == ["DeviceConnected"] && events.first?.id == 2)
        #expect(ContinuousClock.now - started < .seconds(30))
    }

    @Test func eventsThatMatchNotWakeAPollThatWaitsOnUntilOneDoes() async throws {
        let log = EventLog()
        async let waited = log.events(since: 0, types: ["ItemFinished"], limit: nil, timeout: .seconds(60))
        try await Task.sleep(for: .milliseconds(100))
        log.append("StateChanged", [:] as [String: Any])
        try await Task.sleep(for: .milliseconds(100))
        log.append("ItemFinished", [:] as [String: Any])
        #expect(await waited.map(\.id) == [2])
    }

    @Test func oneMorePollThanTheBoundIsAnsweredAtOnceAndTheOthersStillWake() async throws {
        let log = EventLog(maximumWaiting: 100)
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<100 { group.addTask { await log.events(since: 0, types: nil, limit: nil, timeout: .seconds(60)).count } }
            // Until all 100 wait, the extra one may still find room: wait for them.
            let deadline = ContinuousClock.now + .seconds(30)
            while log.waitingCount < 100 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            #expect(log.waitingCount == 100)
            let started = ContinuousClock.now
            #expect(await log.events(since: 0, types: nil, limit: nil, timeout: .seconds(60)).isEmpty)
            #expect(ContinuousClock.now - started < .seconds(5))
            log.append("ItemFinished", [:] as [String: Any])
            var woken = 0
            for try await count in group { woken += count }
            #expect(woken == 100)
        }
    }

    @Test func theJSONIsSyncthingsEnvelope() throws {
        let log = EventLog()
        log.append("DeviceConnected", ["id": "X", "addr": "127.0.0.1:1"])
        let json = try #require(try JSONSerialization.jsonObject(with: Data(EventLog.json(log.matching(since: 0, types: nil, limit: nil).0))) as? [[String: Any]])
        #expect(json.count == 1 && Set(json[0].keys) == ["id", "globalID", "time", "type", "data"])
        #expect((json[0]["data"] as? [String: String]) == ["id": "X", "addr": "127.0.0.1:1"] && json[0]["id"] as? Int == 1)
        #expect(try JSONSerialization.jsonObject(with: Data(EventLog.json([]))) as? [Any] != nil)
    }
}

/// The events' JSON, written directly for flat objects.
@Suite struct FlatJSONTests {
    @Test func aFlatObjectIsWrittenWithSortedKeysAndEscapedStrings() throws {
        let object: [String: Any] = ["b": "a \"q\" \\ / é\n\u{1}", "a": 3, "c": true, "d": NSNull(), "e": 2.5, "f": 100.0, "g": Int64(7)]
        let text = try #require(FlatJSON.object(object))
        #expect(text == #"{"a":3,"b":"a \"q\" \\ / é\n\u0001","c":true,"d":null,"e":2.5,"f":100,"g":7}"#)
        // What JSONSerialization reads back is what went in.
        let back = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(back["b"] as? String == "a \"q\" \\ / é\n\u{1}")
    }

    @Test func anObjectThatIsNotFlatIsLeftToJSONSerialization() {
        #expect(FlatJSON.object(["a": ["nested": 1]]) == nil)
        #expect(FlatJSON.object(["a": [1, 2]]) == nil)
        // An NSNumber would pass for a Bool and an Int alike.
        #expect(FlatJSON.object(["a": NSNumber(value: 1)]) == nil)
        #expect(FlatJSON.object(["a": NSNumber(value: true)]) == nil)
    }
}
