import Foundation
import KaitenTestSupport
import KaitenTestThreads
import NIOCore
import NIOEmbedded
import Testing

@testable import KaitenService

/// The control socket's framing against what a hostile or broken client sends (issue 42,
/// item 7): random bytes, truncated and oversized frames, unknown kinds. Every outcome is a
/// frame read whole or the connection refused; nothing is buffered past the limit.
@Suite(.ownThread, .timeLimit(.minutes(1)))
struct ControlFrameFuzzTests {
    /// Feeds `bytes` in chunks; the frames read, or the error that ends the connection.
    static func decode(_ bytes: [UInt8], chunk: Int) throws -> [ControlFrame] {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(ControlFrameDecoder()))
        defer { _ = try? channel.finish() }
        var frames: [ControlFrame] = []
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + chunk)
            try channel.writeInbound(channel.allocator.buffer(bytes: bytes[offset..<end]))
            while let frame = try channel.readInbound(as: ControlFrame.self) { frames.append(frame) }
            offset = end
        }
        return frames
    }

    @Test func wellFormedFramesArriveWholeWhateverTheChunks() throws {
        let payloads = [Data("{\"verb\":\"plan\"}".utf8), Data(repeating: 7, count: 70_000), Data()]
        var stream: [UInt8] = []
        for (i, payload) in payloads.enumerated() { stream += ControlSocket.frame(i == 1 ? .data : .json, payload) }
        for chunk in [1, 3, 4096, stream.count] {
            let frames = try Self.decode(stream, chunk: chunk)
            #expect(frames.map(\.payload.readableBytes) == payloads.map(\.count), "chunk \(chunk)")
            #expect(frames.map(\.kind) == [.json, .data, .json])
        }
    }

    @Test func anOversizedLengthOrAnUnknownKindEndsTheConnectionAtOnce() {
        // 4 GiB announced: refused from the header alone, nothing waited for.
        #expect(throws: (any Error).self) { try Self.decode([0xFF, 0xFF, 0xFF, 0xFF, 0x4A], chunk: 5) }
        let over = UInt32(ControlSocket.maximumPayload + 1).bigEndian
        #expect(throws: (any Error).self) { try Self.decode(withUnsafeBytes(of: over) { Array($0) } + [0x4A], chunk: 5) }
        #expect(throws: (any Error).self) { try Self.decode([0, 0, 0, 1, 0x99, 0x7B], chunk: 6) }
    }

    @Test func randomAndMutatedStreamsNeverCrashOrHang() throws {
        var random = SplitMix64.forTest("randomAndMutatedStreamsNeverCrashOrHang")
        let valid = Array(ControlSocket.frame(.json, Data("{\"verb\":\"apply\",\"max_delete\":\"50%\"}".utf8)))
        var outcomes = (frames: 0, refused: 0)
        for round in 0..<3000 {
            var bytes: [UInt8]
            switch round % 3 {
            case 0: bytes = (0..<Int(random.next() % 64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            case 1: bytes = Array(valid.prefix(Int(random.next() % UInt64(valid.count))))
            default:
                bytes = valid + valid
                for _ in 0..<(1 + random.next() % 3) {
                    bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
                }
            }
            do {
                let frames = try Self.decode(bytes, chunk: 1 + Int(random.next() % 16))
                outcomes.frames += frames.count
                #expect(frames.allSatisfy { $0.payload.readableBytes <= ControlSocket.maximumPayload })
            } catch {
                outcomes.refused += 1
            }
        }
        #expect(outcomes.frames > 500 && outcomes.refused > 500, "\(outcomes)")
    }
}
