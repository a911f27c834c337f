import Foundation
import KaitenApp
import Synchronization

/// The service's log on stderr: one line per event with a timestamp, or NDJSON.
public struct ServiceLog: Sendable {
    public let json: Bool

    public init(json: Bool) { self.json = json }

    /// The timestamps and the encoder, made once: a formatter made per line was a sixth of the
    /// service's CPU in an apply of 5,000 small files, which logs a line per file.
    private struct Writers {
        var stamps = SecondStamps()
        let encoder: JSONEncoder = {
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return encoder
        }()
    }
    private static let writers = Mutex(Writers())

    public func write(_ event: ServiceEvent) {
        let line = Self.writers.withLock { writers -> String in
            if json { return (try? String(decoding: writers.encoder.encode(event), as: UTF8.self)) ?? "{}" }
            let stamp = writers.stamps.text(of: event.time)
            let subject = [event.action, event.folder.map { f in event.path.map { "\(f)/\($0)" } ?? f }].compactMap { $0 }.joined(separator: " ")
            return "\(stamp) \(event.kind)\(subject.isEmpty ? "" : " " + subject): \(event.message)"
        }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
