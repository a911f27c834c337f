import Foundation
import KaitenApply
import KaitenReconcile
import KaitenTestThreads
import Testing

@testable import KaitenService

/// The event batches written directly read back, with JSONDecoder, as exactly the events sent:
/// every field, names needing escapes, the optional fields present and absent, and the kinds
/// left to JSONEncoder.
@Suite(.ownThread)
struct ControlEventJSONTests {
    static let names = [
        "plain.txt", "dir/with \"quotes\".txt", "back\\slash", "line\nbreak\ttab\r", "control\u{01}\u{1f}", "ünïcödé/日本語/🎞️.mov", "slash/a/b",
    ]

    static var events: [ApplyEvent] {
        var events: [ApplyEvent] = []
        for (i, name) in names.enumerated() {
            let action = Action(
                action: i % 2 == 0 ? .pull : .delete, path: name, size: Int64(i) * 4096 + 1, reason: "why \(name)", type: i % 3 == 0 ? .file : .directory,
                version: i == 0 ? [] : ["ABCDEFG:\(i)", "HIJKLMN:\(i * 7)"], peers: i == 1 ? [] : ["PEER-\(i)"],
                cause: i % 2 == 0 ? .selected : nil, mode: i == 2 ? 0o644 : nil)
            events.append(.done(folder: "folder \(name)", action: action, note: i % 2 == 0 ? nil : "note \(name)"))
            events.append(.progress(filesDone: i, filesTotal: 5000, bytesDone: Int64(i) << 40, bytesTotal: 1 << 41, current: name))
            events.append(.failed(folder: "f", action: action, reason: "failed \(name)"))
        }
        events.append(.start(actions: 3, pullBytes: 12))
        events.append(.sendHeld(folder: "f", path: "p", peers: ["A", "B"]))
        return events
    }

    static func canonical(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    @Test func aBatchReadsBackAsTheEventsSent() throws {
        let events = Self.events
        var reply = ControlReply(.event)
        reply.events = events
        let data = ControlSocket.encode(reply)
        let decoded = try JSONDecoder().decode(ControlReply.self, from: data)
        #expect(decoded.type == .event && decoded.event == nil)
        let back = try #require(decoded.events)
        #expect(back.count == events.count)
        for (sent, read) in zip(events, back) { #expect(try Self.canonical(read) == Self.canonical(sent)) }
        // The same document JSONEncoder makes of the reply, field for field.
        #expect(try Self.canonical(decoded) == Self.canonical(reply))
    }

    /// The direct writer names Action's fields one by one: a field added to Action must be
    /// added there too (this list is the writer's).
    @Test func theWriterKnowsEveryFieldOfAnAction() {
        let fields = Mirror(reflecting: Action(action: .pull, path: "p", reason: "r")).children.compactMap(\.label)
        #expect(Set(fields) == ["action", "path", "size", "reason", "type", "version", "peers", "cause", "mode"])
    }

    @Test func repliesOtherThanAnEventBatchAreJSONEncodersOwn() throws {
        var note = ControlReply(.note)
        note.message = "the service is applying a round of its own"
        var single = ControlReply(.event)
        single.event = Self.events[0]
        for reply in [note, single] {
            // JSONEncoder's key order is its own: compared as documents.
            let read = try JSONDecoder().decode(ControlReply.self, from: ControlSocket.encode(reply))
            #expect(try Self.canonical(read) == Self.canonical(reply))
            let object = try JSONSerialization.jsonObject(with: ControlSocket.encode(reply)) as? [String: Any]
            #expect(object?["events"] == nil, "only a batch is written directly")
        }
    }
}
