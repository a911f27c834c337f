import KaitenProtocol
import NIOCore

/// A message of syncthing's relay protocol (`lib/relay/protocol`): a 12-byte header (magic
/// 0x9E79BC40, type, length) and an XDR body, in which every number takes 4 bytes and a byte
/// string is its length, the bytes and zero padding to a multiple of 4.
public enum RelayMessage: Sendable, Equatable {
    case ping
    case pong
    /// Join the relay, to be invited to sessions (1.x sends no token; 2.x may).
    case joinRelayRequest(token: String)
    case joinSessionRequest(key: [UInt8])
    case response(code: Int32, message: String)
    case connectRequest(device: [UInt8])
    case sessionInvitation(SessionInvitation)
    case relayFull

    public static let magic: UInt32 = 0x9E79_BC40
    /// The longest body the relay accepts or sends.
    public static let maximumLength = 1024

    public struct SessionInvitation: Sendable, Equatable {
        public var from: [UInt8]
        public var key: [UInt8]
        /// The session address: 4 or 16 bytes, or empty (then the relay's own address).
        public var address: [UInt8]
        public var port: UInt16
        /// Whether this side plays the TLS server on the session.
        public var serverSocket: Bool
    }

    var type: Int32 {
        switch self {
        case .ping: return 0
        case .pong: return 1
        case .joinRelayRequest: return 2
        case .joinSessionRequest: return 3
        case .response: return 4
        case .connectRequest: return 5
        case .sessionInvitation: return 6
        case .relayFull: return 7
        }
    }

    public func encode(into buffer: inout ByteBuffer) {
        var body = ByteBuffer()
        switch self {
        case .ping, .pong, .relayFull: break
        case .joinRelayRequest(let token):
            // An empty token is an empty body, which every relay version accepts.
            if !token.isEmpty { Self.putOpaque(Array(token.utf8), into: &body) }
        case .joinSessionRequest(let key): Self.putOpaque(key, into: &body)
        case .response(let code, let message):
            body.writeInteger(code)
            Self.putOpaque(Array(message.utf8), into: &body)
        case .connectRequest(let device): Self.putOpaque(device, into: &body)
        case .sessionInvitation(let invitation):
            Self.putOpaque(invitation.from, into: &body)
            Self.putOpaque(invitation.key, into: &body)
            Self.putOpaque(invitation.address, into: &body)
            body.writeInteger(UInt32(invitation.port))
            body.writeInteger(UInt32(invitation.serverSocket ? 1 : 0))
        }
        buffer.writeInteger(Self.magic)
        buffer.writeInteger(type)
        buffer.writeInteger(Int32(body.readableBytes))
        buffer.writeBuffer(&body)
    }

    public enum DecodeError: Error, Equatable, CustomStringConvertible {
        case wrongMagic(UInt32)
        case badLength(Int32)
        case unknownType(Int32)
        case malformed(String)

        public var description: String {
            switch self {
            case .wrongMagic(let magic): return "not the relay protocol (magic \(String(magic, radix: 16)))"
            case .badLength(let length): return "a relay message of \(length) bytes (at most \(RelayMessage.maximumLength))"
            case .unknownType(let type): return "an unknown relay message type \(type)"
            case .malformed(let what): return "a malformed relay message (\(what))"
            }
        }
    }

    /// One whole message from the front of `buffer`, or nil when more bytes are needed.
    public static func decode(from buffer: inout ByteBuffer) throws(DecodeError) -> RelayMessage? {
        guard buffer.readableBytes >= 12,
            let magic = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self),
            let type = buffer.getInteger(at: buffer.readerIndex + 4, as: Int32.self),
            let length = buffer.getInteger(at: buffer.readerIndex + 8, as: Int32.self)
        else { return nil }
        guard magic == Self.magic else { throw .wrongMagic(magic) }
        guard length >= 0, length <= maximumLength else { throw .badLength(length) }
        guard buffer.readableBytes >= 12 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 12)
        var body = buffer.readSlice(length: Int(length))!
        let message: RelayMessage
        switch type {
        case 0: message = .ping
        case 1: message = .pong
        case 2: message = .joinRelayRequest(token: body.readableBytes == 0 ? "" : String(decoding: try opaque(&body, max: 256), as: UTF8.self))
        case 3: message = .joinSessionRequest(key: try opaque(&body, max: 32))
        case 4:
            guard let code = body.readInteger(as: Int32.self) else { throw .malformed("response without a code") }
            message = .response(code: code, message: String(decoding: try opaque(&body, max: 1024), as: UTF8.self))
        case 5: message = .connectRequest(device: try opaque(&body, max: 32))
        case 6:
            let from = try opaque(&body, max: 32)
            let key = try opaque(&body, max: 32)
            let address = try opaque(&body, max: 32)
            guard let port = body.readInteger(as: UInt32.self), let server = body.readInteger(as: UInt32.self), port <= 65535 else {
                throw .malformed("invitation without port or role")
            }
            message = .sessionInvitation(
                SessionInvitation(from: from, key: key, address: address, port: UInt16(port), serverSocket: server != 0))
        case 7: message = .relayFull
        default: throw .unknownType(type)
        }
        return message
    }

    private static func putOpaque(_ bytes: [UInt8], into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt32(bytes.count))
        buffer.writeBytes(bytes)
        let padding = (4 - bytes.count % 4) % 4
        buffer.writeRepeatingByte(0, count: padding)
    }

    private static func opaque(_ buffer: inout ByteBuffer, max: Int) throws(DecodeError) -> [UInt8] {
        guard let length = buffer.readInteger(as: UInt32.self) else { throw .malformed("a field cut short") }
        guard length <= max else { throw .malformed("a field of \(length) bytes, at most \(max) allowed") }
        guard let bytes = buffer.readBytes(length: Int(length)) else { throw .malformed("a field cut short") }
        let padding = (4 - Int(length) % 4) % 4
        guard buffer.readableBytes >= padding else { throw .malformed("padding cut short") }
        buffer.moveReaderIndex(forwardBy: padding)
        return bytes
    }
}

/// Relay messages off the wire, one after another (a relay protocol connection).
struct RelayMessageDecoder: ByteToMessageDecoder {
    typealias InboundOut = RelayMessage

    /// After this many messages, bytes are left alone: a session connection turns into a raw
    /// pipe after the relay's one answer, and whatever follows (the peer's TLS) must reach the
    /// handlers installed next, untouched.
    var remaining: Int?

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        if remaining == 0 { return .needMoreData }
        guard let message = try RelayMessage.decode(from: &buffer) else { return .needMoreData }
        if let left = remaining { remaining = left - 1 }
        context.fireChannelRead(wrapInboundOut(message))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        if remaining == 0 {
            // Being removed: what came after the answer goes on to the handlers behind.
            if buffer.readableBytes > 0, let rest = buffer.readSlice(length: buffer.readableBytes) {
                context.fireChannelRead(NIOAny(rest))
            }
            return .needMoreData
        }
        return try decode(context: context, buffer: &buffer)
    }
}

struct RelayMessageEncoder: MessageToByteEncoder {
    typealias OutboundIn = RelayMessage

    func encode(data: RelayMessage, out: inout ByteBuffer) throws {
        data.encode(into: &out)
    }
}
