import Foundation
import KaitenApp

/// The service's log on stderr: one line per event with a timestamp, or NDJSON.
public struct ServiceLog: Sendable {
    public let json: Bool

    public init(json: Bool) { self.json = json }

    public func write(_ event: ServiceEvent) {
        let line: String
        if json {
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            line = (try? String(decoding: encoder.encode(event), as: UTF8.self)) ?? "{}"
        } else {
            let stamp = ISO8601DateFormatter().string(from: event.time)
            let subject = [event.action, event.folder.map { f in event.path.map { "\(f)/\($0)" } ?? f }].compactMap { $0 }.joined(separator: " ")
            line = "\(stamp) \(event.kind)\(subject.isEmpty ? "" : " " + subject): \(event.message)"
        }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
