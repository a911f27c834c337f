import Foundation
import NIOCore
import Testing

@testable import KaitenProtocol

/// The Response fast path writes exactly what protobuf's own encoding writes.
@Suite(.timeLimit(.minutes(5)))
struct ResponseEncodingTests {
    @Test(arguments: [
        (0, 0, 0), (1, 0, 0), (300, 5, 0), (Int(Int32.max), 131_072, 0), (-1, 4, 0), (7, 0, 2), (9, 1, 3),
    ])
    func fastPathEqualsProtobuf(id: Int, size: Int, code: Int) throws {
        var response = BEPResponse()
        response.id = Int32(id)
        response.data = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        response.code = BEPErrorCode(rawValue: code) ?? .generic
        var fast = ByteBuffer()
        try FrameEncoder.encode(.response(response), into: &fast)

        var header = BEPHeader()
        header.type = .response
        let headerBytes: [UInt8] = try header.serializedBytes()
        let body: [UInt8] = try response.serializedBytes()
        var expected = ByteBuffer()
        expected.writeInteger(UInt16(headerBytes.count))
        expected.writeBytes(headerBytes)
        expected.writeInteger(UInt32(body.count))
        expected.writeBytes(body)
        #expect(fast == expected)

        // And it decodes back to the same message.
        let frames = try FrameDecoderTests.decodeAll(fast.getBytes(at: 0, length: fast.readableBytes) ?? [], expectHello: false)
        guard frames.count == 1, case .message(.response(let decoded), _) = frames[0] else {
            Issue.record("not one response: \(frames)")
            return
        }
        #expect(decoded == response)
    }

    /// A frame made by a block server (the data written into it in place) is the same bytes as
    /// the message encoded; a fill that fails makes no frame.
    @Test(arguments: [(1, 1), (300, 131_072), (Int(Int32.max), 4), (-5, 16)])
    func aFrameMadeInPlaceEqualsTheEncodedResponse(id: Int, size: Int) throws {
        var request = BEPRequest()
        request.id = Int32(id)
        let data = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })
        let frame = try #require(
            ResponseFrame.make(answering: request, count: size, allocator: ByteBufferAllocator()) { raw in
                data.copyBytes(to: raw)
                return true
            })
        var response = BEPResponse()
        response.id = Int32(id)
        response.data = data
        var expected = ByteBuffer()
        try FrameEncoder.encode(.response(response), into: &expected)
        #expect(frame.buffer == expected)
        #expect(frame.id == Int32(id))
        #expect(frame.withData(count: size) { Data($0) } == data)
        #expect(ResponseFrame.make(answering: request, count: size, allocator: ByteBufferAllocator()) { _ in false } == nil)
    }
}
