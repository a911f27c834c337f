/// Why a byte stream is not valid BEP. Any of these closes the connection.
public enum FrameError: Error, Equatable, Sendable, CustomStringConvertible {
    case oldHelloMagic(UInt32)
    case unknownHelloMagic(UInt32)
    case helloTooLong(Int)
    case malformedHello
    case negativeHeaderLength(Int)
    case malformedHeader
    case messageTooLong(Int)
    case negativeMessageLength(Int)
    case compressedBodyTooShort
    case decompressedTooLong(Int)
    case badLZ4(LZ4Error)
    case malformedMessage(type: Int, reason: String)
    case truncated(bytesLeft: Int)

    public var description: String {
        switch self {
        case .oldHelloMagic(let m):
            return "the peer speaks an old protocol version (hello magic 0x\(String(m, radix: 16)))"
        case .unknownHelloMagic(let m): return "unknown hello magic 0x\(String(m, radix: 16)) (not BEP v1, or newer)"
        case .helloTooLong(let n): return "hello of \(n) bytes is over the 32767-byte limit"
        case .malformedHello: return "malformed Hello message"
        case .negativeHeaderLength(let n): return "negative header length \(n)"
        case .malformedHeader: return "malformed message header"
        case .messageTooLong(let n): return "message of \(n) bytes is over the 500,000,000-byte limit"
        case .negativeMessageLength(let n): return "negative message length \(n)"
        case .compressedBodyTooShort: return "LZ4 body shorter than its 4-byte length prefix"
        case .decompressedTooLong(let n): return "LZ4 body claims \(n) bytes uncompressed, over Kaiten's limit"
        case .badLZ4(let e): return "bad LZ4 body: \(e)"
        case .malformedMessage(let type, let reason): return "malformed message of type \(type): \(reason)"
        case .truncated(let n): return "connection ended in the middle of a message (\(n) bytes left over)"
        }
    }
}
