import Foundation
import KaitenPeer
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenDiscovery

/// Seeded fuzzing of what a discovery server and a relay pool answer (issue 42, item 7): JSON
/// of any shape, nesting and size up to the body limit is read or refused with an error, and
/// what is read is bounded and well formed. A failure prints its seed (KAITEN_TEST_SEED replays it).
@Suite(.ownThread, .timeLimit(.minutes(2))) struct DiscoveryFuzzTests {
    /// A random JSON value, biased towards the shapes the readers look for.
    static func value(_ random: inout SplitMix64, depth: Int = 0) -> String {
        let addresses = [
            "tcp://192.0.2.1:22000", "relay://192.0.2.2:22067/?id=MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD",
            "quic://[2001:db8::1]:22000", "tcp://:0", "tcp://host", "relay://x:99999/", "dynamic+https://x/y", "tcp://0.0.0.0:1",
            String(repeating: "a", count: 3000), "tcp://" + String(repeating: "b", count: 2100) + ":1", "\\u0000", "relay://[::1]:1/?id=",
        ]
        switch random.next() % (depth > 4 ? 5 : 9) {
        case 0: return "\"\(addresses[Int(random.next() % UInt64(addresses.count))])\""
        case 1: return String(Int64(bitPattern: random.next()))
        case 2: return ["null", "true", "false", "1e400", "-0", "\"\"", "0.5"][Int(random.next() % 7)]
        case 3: return "\"" + String(repeating: "x", count: Int(random.next() % 40)) + "\""
        case 4: return "\"relay://192.0.2.\(random.next() % 256):\(random.next() % 70000)/\""
        case 5, 6:
            let keys = ["addresses", "relays", "url", "seen", "x", ""]
            let count = Int(random.next() % 5)
            let members = (0..<count).map { _ in "\"\(keys[Int(random.next() % UInt64(keys.count))])\":\(value(&random, depth: depth + 1))" }
            return "{" + members.joined(separator: ",") + "}"
        default:
            // Now and then a long flat list (past the address cap); otherwise a short one, nested.
            if depth == 0, random.next() % 10 == 0 {
                return "[" + (0..<(60 + Int(random.next() % 140))).map { _ in "\"tcp://192.0.2.1:\(1 + random.next() % 65535)\"" }.joined(separator: ",") + "]"
            }
            return "[" + (0..<Int(random.next() % 6)).map { _ in value(&random, depth: depth + 1) }.joined(separator: ",") + "]"
        }
    }

    @Test func lookupAnswersOfAnyShape() {
        var random = SplitMix64.forTest("lookupAnswersOfAnyShape")
        var read = 0
        for round in 0..<5_000 {
            var text = round % 2 == 0 ? "{\"addresses\":\(Self.value(&random))}" : Self.value(&random)
            if random.next() % 8 == 0 { text = String(text.prefix(Int(random.next() % UInt64(text.count + 1)))) }
            let body = Array(text.utf8.prefix(DiscoveryHTTP.maximumBody))
            guard let addresses = try? GlobalDiscovery.addresses(inLookupAnswer: body) else { continue }
            read += 1
            #expect(addresses.count <= GlobalDiscovery.maximumAddresses)
            for address in addresses {
                #expect(address.utf8.count <= GlobalDiscovery.maximumAddressLength)
                #expect(AddressText(address) != nil, "\(address)")
            }
        }
        #expect(read > 300, "\(read) answers read")
    }

    @Test func relayPoolAnswersOfAnyShape() {
        var random = SplitMix64.forTest("relayPoolAnswersOfAnyShape")
        var found = 0
        for round in 0..<5_000 {
            let text: String
            if round % 2 == 0 {
                let entries = (0..<Int(random.next() % 8)).map { _ in random.next() % 2 == 0 ? "{\"url\":\(Self.value(&random))}" : Self.value(&random) }
                text = "{\"relays\":[" + entries.joined(separator: ",") + "]}"
            } else {
                text = Self.value(&random)
            }
            guard let relays = try? RelayPool.relays(inPoolAnswer: Array(text.utf8.prefix(DiscoveryHTTP.maximumBody))) else { continue }
            found += relays.count
            for relay in relays {
                #expect(relay.isRelay && relay.port > 0 && relay.port <= 65535 && !relay.host.isEmpty, "\(relay)")
            }
        }
        #expect(found > 250, "\(found) relays read")
    }

    /// Nesting as deep as the body limit allows is an error or a value, never a stack overflow.
    @Test(arguments: ["[", "{\"addresses\":[", "{\"relays\":[{\"url\":"] as [String])
    func deepNestingIsBounded(_ opening: String) {
        let limit = DiscoveryHTTP.maximumBody
        let body = Array(String(repeating: opening, count: limit / opening.utf8.count).utf8.prefix(limit))
        #expect(throws: (any Error).self) { try GlobalDiscovery.addresses(inLookupAnswer: body) }
        #expect(throws: (any Error).self) { try RelayPool.relays(inPoolAnswer: body) }
        let closed = Array((String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)).utf8)
        #expect(throws: (any Error).self) { try GlobalDiscovery.addresses(inLookupAnswer: closed) }
    }
}
