import KaitenTestSupport
import KaitenTestThreads
import NIOCore
import Testing

@testable import KaitenPeer

/// Seeded fuzzing of the relay protocol's messages (issue 42, item 7), as a relay or a peer
/// posing as one may send them: every input is a message, a wait for more bytes, or a named
/// error; nothing is read past the announced length, and a message read re-encodes to itself.
/// A failure prints its seed (KAITEN_TEST_SEED replays it).
@Suite(.ownThread, .timeLimit(.minutes(2))) struct RelayMessageFuzzTests {
    static let samples: [RelayMessage] = [
        .ping, .pong, .relayFull, .joinRelayRequest(token: ""), .joinRelayRequest(token: "tok"),
        .joinSessionRequest(key: Array(repeating: 7, count: 32)), .response(code: 0, message: "success"),
        .response(code: 1, message: "not found"), .connectRequest(device: Array(repeating: 9, count: 32)),
        .sessionInvitation(.init(from: Array(repeating: 1, count: 32), key: Array(repeating: 2, count: 32), address: [127, 0, 0, 1], port: 22067, serverSocket: true)),
        .sessionInvitation(.init(from: Array(repeating: 1, count: 32), key: Array(repeating: 2, count: 32), address: [], port: 1, serverSocket: false)),
    ]

    static func encoded(_ message: RelayMessage) -> [UInt8] {
        var buffer = ByteBuffer()
        message.encode(into: &buffer)
        return buffer.readBytes(length: buffer.readableBytes)!
    }

    @Test func everyInputIsAMessageAWaitOrANamedError() {
        var random = SplitMix64.forTest("everyInputIsAMessageAWaitOrANamedError")
        var outcomes = (messages: 0, waits: 0, errors: 0)
        for round in 0..<30_000 {
            var bytes = Self.encoded(Self.samples[Int(random.next() % UInt64(Self.samples.count))])
            switch round % 4 {
            case 0:
                for _ in 0..<(1 + random.next() % 3) { bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next()) }
            case 1:
                // The body only, so that the magic, type and length stay and the fields are what is damaged.
                if bytes.count > 12 {
                    for _ in 0..<(1 + random.next() % 3) { bytes[12 + Int(random.next() % UInt64(bytes.count - 12))] = random.next() % 2 == 0 ? 0xFF : UInt8(truncatingIfNeeded: random.next()) }
                }
            case 2:
                bytes = Array(bytes.prefix(Int(random.next() % UInt64(bytes.count))))
            default:
                // A length field anywhere from negative to past the limit, with that many bytes or fewer.
                let length = Int32(truncatingIfNeeded: Int64(random.next() % 2100) - 50)
                bytes = Array(bytes.prefix(8)) + withUnsafeBytes(of: length.bigEndian, Array.init)
                bytes += (0..<Int(random.next() % 1200)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            }
            var buffer = ByteBuffer(bytes: bytes)
            do {
                guard let message = try RelayMessage.decode(from: &buffer) else {
                    outcomes.waits += 1
                    #expect(buffer.readerIndex == 0, "a wait consumes nothing")
                    continue
                }
                outcomes.messages += 1
                let consumed = buffer.readerIndex
                #expect(consumed >= 12 && consumed <= 12 + RelayMessage.maximumLength)
                // What was read says the same when written again (padding may differ).
                var again = ByteBuffer(bytes: Self.encoded(message))
                #expect(try RelayMessage.decode(from: &again) == message, "\(message)")
            } catch {
                outcomes.errors += 1
                #expect(!error.description.isEmpty)
            }
        }
        #expect(outcomes.messages > 3_000 && outcomes.waits > 3_000 && outcomes.errors > 3_000, "\(outcomes)")
    }
}
