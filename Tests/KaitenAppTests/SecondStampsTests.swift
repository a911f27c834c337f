import Foundation
import KaitenApp
import Testing

/// The events' timestamps: whole seconds in ISO 8601, the same text a formatter gives, a new
/// text when the second moves.
@Suite struct SecondStampsTests {
    @Test func aSecondsTextIsTheFormattersAndMovesWithTheSecond() {
        var stamps = SecondStamps()
        #expect(stamps.text(at: 1_795_000_000) == ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: 1_795_000_000)))
        #expect(stamps.text(at: 1_795_000_000) == "2026-11-18T11:06:40Z")
        #expect(stamps.text(at: 1_795_000_001) == "2026-11-18T11:06:41Z")
        #expect(stamps.text(of: Date(timeIntervalSince1970: 1_795_000_001.999)) == "2026-11-18T11:06:41Z")
        #expect(stamps.text(of: Date(timeIntervalSince1970: 1_795_000_002.001)) == "2026-11-18T11:06:42Z")
        #expect(stamps.text(at: 1_795_000_000) == "2026-11-18T11:06:40Z", "going back a second kept the later text")
    }
}
