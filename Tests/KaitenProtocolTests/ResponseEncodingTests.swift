import Foundation
import NIOCore
import Testing

@testable import KaitenProtocol

/// The Response fast path writes exactly what protobuf's own encoding writes.
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
}
