import NIOCore
import SwiftProtobuf

/// What Kaiten writes on a BEP connection.
public enum BEPOutbound: Sendable {
    case hello(BEPHello)
    case message(BEPMessage)
    /// A Response already encoded: written as it is (``FrameWriter``).
    case frame(ResponseFrame)
}

/// Encodes Hello and messages into BEP frames (layout on ``FrameDecoder``).
///
/// Kaiten sends everything uncompressed, which every peer accepts (bep-brief §2.3); with
/// `compressMetadata` it LZ4-compresses non-Response messages of at least 128 bytes when that
/// saves at least 1/32, as syncthing does under `compression="metadata"`.
public struct FrameEncoder: MessageToByteEncoder {
    public typealias OutboundIn = BEPOutbound

    public var compressMetadata: Bool

    public init(compressMetadata: Bool = false) {
        self.compressMetadata = compressMetadata
    }

    public func encode(data: BEPOutbound, out: inout ByteBuffer) throws {
        switch data {
        case .hello(let hello):
            let body: [UInt8] = try hello.serializedBytes()
            out.writeInteger(FrameDecoder.helloMagic)
            out.writeInteger(UInt16(body.count))
            out.writeBytes(body)
        case .message(let message):
            try Self.encode(message, compressMetadata: compressMetadata, into: &out)
        case .frame(let frame):
            out.writeImmutableBuffer(frame.buffer)
        }
    }

    /// Appends one message frame to `out`.
    public static func encode(_ message: BEPMessage, compressMetadata: Bool = false, into out: inout ByteBuffer) throws {
        if case .response(let response) = message {
            try encodeResponse(response, into: &out)
            return
        }
        var body = try message.serializedBody()
        var header = BEPHeader()
        header.type = message.type
        if compressMetadata, body.count >= 128 {
            let compressed = LZ4.compress(body)
            if compressed.count + 4 <= body.count - body.count / 32 {
                header.compression = .lz4
                let n = UInt32(body.count)
                body = [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + compressed
            }
        }
        let headerBytes: [UInt8] = try header.serializedBytes()
        out.writeInteger(UInt16(headerBytes.count))
        out.writeBytes(headerBytes)
        out.writeInteger(UInt32(body.count))
        out.writeBytes(body)
    }

    /// A Response's frame header (type RESPONSE, never compressed), encoded once.
    static let responseHeader: [UInt8] = {
        var header = BEPHeader()
        header.type = .response
        return (try? header.serializedBytes()) ?? [0x08, 0x04]
    }()

    /// A Response, the bulk of what a serving device writes, encoded straight into `out`: the
    /// block's bytes are copied once (protobuf's own encoding would copy them into a zeroed
    /// buffer first, then into the frame). The same bytes as the generic path (a test checks):
    /// `id` (1, varint), `data` (2, length-delimited), `code` (3, varint, left out when 0).
    static func encodeResponse(_ response: BEPResponse, into out: inout ByteBuffer) throws {
        let code = UInt64(bitPattern: Int64(response.code.rawValue))
        writeResponsePrefix(id: response.id, dataCount: response.data.count, codeLength: code == 0 ? 0 : 1 + varintSize(code), into: &out)
        out.writeBytes(response.data)
        if code != 0 {
            out.writeInteger(UInt8(0x18))
            writeVarint(code, into: &out)
        }
    }

    /// A Response frame up to its data's bytes: the frame header, the body's length, the `id`
    /// field and the `data` field's tag and length (no data field when `dataCount` is 0).
    /// `codeLength`: the bytes of the `code` field that will follow the data.
    static func writeResponsePrefix(id: Int32, dataCount: Int, codeLength: Int, into out: inout ByteBuffer) {
        let headerBytes = responseHeader
        // int32 fields are sign-extended to 64 bits on the wire, as protobuf does.
        let wireID = UInt64(bitPattern: Int64(id))
        var bodyLength = codeLength
        if wireID != 0 { bodyLength += 1 + varintSize(wireID) }
        if dataCount != 0 { bodyLength += 1 + varintSize(UInt64(dataCount)) + dataCount }
        out.reserveCapacity(minimumWritableBytes: 2 + headerBytes.count + 4 + bodyLength)
        out.writeInteger(UInt16(headerBytes.count))
        out.writeBytes(headerBytes)
        out.writeInteger(UInt32(bodyLength))
        if wireID != 0 {
            out.writeInteger(UInt8(0x08))
            writeVarint(wireID, into: &out)
        }
        if dataCount != 0 {
            out.writeInteger(UInt8(0x12))
            writeVarint(UInt64(dataCount), into: &out)
        }
    }

    static func varintSize(_ value: UInt64) -> Int {
        var n = 1
        var v = value >> 7
        while v != 0 {
            n += 1
            v >>= 7
        }
        return n
    }

    static func writeVarint(_ value: UInt64, into out: inout ByteBuffer) {
        var v = value
        while v >= 0x80 {
            out.writeInteger(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.writeInteger(UInt8(v))
    }
}
