import NIOCore
import SwiftProtobuf

/// What Kaiten writes on a BEP connection.
public enum BEPOutbound: Sendable {
    case hello(BEPHello)
    case message(BEPMessage)
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
        }
    }

    /// Appends one message frame to `out`.
    public static func encode(_ message: BEPMessage, compressMetadata: Bool = false, into out: inout ByteBuffer) throws {
        var body = try message.serializedBody()
        var header = BEPHeader()
        header.type = message.type
        if compressMetadata, message.type != .response, body.count >= 128 {
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
}
