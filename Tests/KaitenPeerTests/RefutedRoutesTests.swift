import KaitenConfig
import KaitenProtocol
import Synchronization
import Testing

@testable import KaitenPeer

/// A one-shot dial that finds a LAN sender is not the device keeps listening for the real one
/// (issue 42, item 3): the routes heard after the refutation, and only new LAN ones.
@Suite(.timeLimit(.minutes(1))) struct RefutedRoutesTests {
    /// A book that hears the impostor first and the real device on the next ask.
    final class LateBook: PeerAddressBook {
        let asked = Mutex(0)
        let refuted = Mutex<[String]>([])
        static let impostor = PeerRoute(address: PeerAddress("tcp://192.0.2.66:22000")!, source: .lan)
        static let real = PeerRoute(address: PeerAddress("tcp://192.0.2.7:22000")!, source: .lan)
        static let configured = PeerRoute(address: PeerAddress("tcp://192.0.2.9:22000")!, source: .configured)

        func routes(for device: DeviceConfiguration) async -> [PeerRoute] {
            let n = asked.withLock { $0 += 1; return $0 }
            return n == 1 ? [Self.configured, Self.impostor] : [Self.configured, Self.impostor, Self.real]
        }
        func whyNoRoute(for device: DeviceConfiguration) -> String { "none" }
        func mayRoute(_ device: DeviceConfiguration) -> Bool { true }
        func refute(_ device: DeviceID, host: String) { refuted.withLock { $0.append(host) } }
    }

    @Test func afterAnImpostorTheRoutesHeardSinceAreDialled() async throws {
        let book = LateBook()
        let device = DeviceConfiguration(id: try DeviceID(bytes: Array(repeating: 7, count: 32)), name: "a")
        let first = await book.routes(for: device)
        let none = await book.routes(afterRefuting: [], tried: first, device: device)
        #expect(none.isEmpty, "nothing refuted: nothing more to wait for")
        let more = await book.routes(afterRefuting: [LateBook.impostor.address], tried: first, device: device)
        #expect(more == [LateBook.real])
    }
}
