import Foundation

/// ISO 8601 timestamps of whole seconds (`2026-11-26T09:20:00Z`, the events' `time`), the
/// formatter made once and the last second's text kept: event streams stamp thousands of events
/// a second, and making or running a formatter for each cost more than the work they report.
public struct SecondStamps {
    private let formatter = ISO8601DateFormatter()
    private var second = Int.min
    private var text = ""

    public init() {}

    /// The timestamp of `second` (seconds since 1970).
    public mutating func text(at second: Int) -> String {
        if second != self.second {
            self.second = second
            text = formatter.string(from: Date(timeIntervalSince1970: TimeInterval(second)))
        }
        return text
    }

    /// The timestamp of the second `date` falls in.
    public mutating func text(of date: Date) -> String {
        text(at: Int(date.timeIntervalSince1970.rounded(.down)))
    }
}
