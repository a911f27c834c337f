import Foundation
import KaitenApp
import Synchronization

/// The service's log on stderr: one line per event with a timestamp, or NDJSON.
public struct ServiceLog: Sendable {
    public let json: Bool

    public init(json: Bool) { self.json = json }

    /// The formatter and the encoder, made once; the timestamp kept for its second. A formatter
    /// made per line was a sixth of the service's CPU in an apply of 5,000 small files, which
    /// logs a line per file.
    private struct Writers {
        let formatter = ISO8601DateFormatter()
        let encoder: JSONEncoder = {
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return encoder
        }()
        var second = Int.min
        var stamp = ""
    }
    private static let writers = Mutex(Writers())

    public func write(_ event: ServiceEvent) {
        let line = Self.writers.withLock { writers -> String in
            if json { return (try? String(decoding: writers.encoder.encode(event), as: UTF8.self)) ?? "{}" }
            let second = Int(event.time.timeIntervalSince1970.rounded(.down))
            if second != writers.second {
                writers.second = second
                writers.stamp = writers.formatter.string(from: Date(timeIntervalSince1970: TimeInterval(second)))
            }
            let subject = [event.action, event.folder.map { f in event.path.map { "\(f)/\($0)" } ?? f }].compactMap { $0 }.joined(separator: " ")
            return "\(writers.stamp) \(event.kind)\(subject.isEmpty ? "" : " " + subject): \(event.message)"
        }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
