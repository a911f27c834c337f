import Foundation
import NIOCore
import SwiftProtobuf

/// Decodes a BEP byte stream (after TLS) into frames, never trusting a length before checking it.
///
/// ```
/// once:   | magic 0x2EA7D90B (u32 BE) | length (u16 BE, ≤ 32767) | Hello (protobuf) |
/// then:   | headerLen (u16 BE, may be 0) | Header | msgLen (u32 BE, ≤ 500 MB) | body |
/// body:   protobuf, or when Header.compression = LZ4:
///         | uncompressed length (u32 BE) | one raw LZ4 block |
/// ```
///
/// The decoder is a ``NIOSingleStepByteToMessageDecoder``: it serves a channel pipeline and is
/// fed plain byte arrays in tests. It consumes a frame only once the whole frame is buffered,
/// so input may arrive in pieces of any size.
public struct FrameDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = BEPFrame

    public static let helloMagic: UInt32 = 0x2EA7_D90B
    /// Magic numbers of protocol versions before v1 (syncthing lib/protocol/hello.go).
    static let oldMagics: Set<UInt32> = [0x0001_0001, 0x0001_0000, 0x9F79_BC40]

    private var expectingHello: Bool
    public let limits: BEPLimits

    /// - Parameter expectHello: whether the stream starts with a Hello (true on a connection).
    public init(limits: BEPLimits = .default, expectHello: Bool = true) {
        self.limits = limits
        self.expectingHello = expectHello
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> BEPFrame? {
        if expectingHello {
            guard let frame = try decodeHello(&buffer) else { return nil }
            expectingHello = false
            return frame
        }
        return try decodeMessage(&buffer)
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> BEPFrame? {
        if let frame = try decode(buffer: &buffer) { return frame }
        if seenEOF && buffer.readableBytes > 0 { throw FrameError.truncated(bytesLeft: buffer.readableBytes) }
        return nil
    }

    private func decodeHello(_ buffer: inout ByteBuffer) throws -> BEPFrame? {
        let start = buffer.readerIndex
        guard let magic = buffer.getInteger(at: start, as: UInt32.self) else { return nil }
        guard magic == Self.helloMagic else {
            if Self.oldMagics.contains(magic) { throw FrameError.oldHelloMagic(magic) }
            throw FrameError.unknownHelloMagic(magic)
        }
        guard let length = buffer.getInteger(at: start + 4, as: UInt16.self) else { return nil }
        guard Int(length) <= limits.maxHelloLength else { throw FrameError.helloTooLong(Int(length)) }
        guard buffer.readableBytes >= 6 + Int(length) else { return nil }
        let body = buffer.getBytes(at: start + 6, length: Int(length)) ?? []
        buffer.moveReaderIndex(forwardBy: 6 + Int(length))
        do {
            return .hello(try BEPHello(serializedBytes: body))
        } catch {
            throw FrameError.malformedHello
        }
    }

    private func decodeMessage(_ buffer: inout ByteBuffer) throws -> BEPFrame? {
        let start = buffer.readerIndex
        guard let rawHeaderLength = buffer.getInteger(at: start, as: Int16.self) else { return nil }
        guard rawHeaderLength >= 0 else { throw FrameError.negativeHeaderLength(Int(rawHeaderLength)) }
        let headerLength = Int(rawHeaderLength)
        guard let rawMessageLength = buffer.getInteger(at: start + 2 + headerLength, as: Int32.self) else { return nil }
        guard rawMessageLength >= 0 else { throw FrameError.negativeMessageLength(Int(rawMessageLength)) }
        let messageLength = Int(rawMessageLength)
        guard messageLength <= limits.maxMessageLength else { throw FrameError.messageTooLong(messageLength) }
        let total = 2 + headerLength + 4 + messageLength
        guard buffer.readableBytes >= total else { return nil }

        let header: BEPHeader
        do {
            header = try BEPHeader(serializedBytes: buffer.getBytes(at: start + 2, length: headerLength) ?? [])
        } catch {
            throw FrameError.malformedHeader
        }
        let bodyStart = start + 2 + headerLength + 4
        defer { buffer.moveReaderIndex(forwardBy: total) }

        var body: [UInt8]
        let compressed: Bool
        switch header.compression {
        case .none:
            // Decoded straight from the receive buffer: a block's bytes are copied once, into
            // the message, not first into an array (a 1 GiB pull is 1 GiB less memcpy).
            do {
                // SwiftProtobuf copies every bytes and string field out of its input, so a
                // no-copy Data over the buffer never outlives this closure.
                let message = try buffer.withUnsafeReadableBytes { raw -> BEPMessage? in
                    let slice = UnsafeRawBufferPointer(rebasing: raw[(bodyStart - start)..<(bodyStart - start + messageLength)])
                    guard let base = slice.baseAddress else { return try BEPMessage.decode(type: header.type, body: [UInt8]()) }
                    let view = Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: base), count: slice.count, deallocator: .none)
                    return try BEPMessage.decode(type: header.type, body: view)
                }
                guard let message else { return .unknown(type: header.type.rawValue) }
                return .message(message, wasCompressed: false)
            } catch {
                throw FrameError.malformedMessage(type: header.type.rawValue, reason: "\(error)")
            }
        case .lz4:
            body = buffer.getBytes(at: bodyStart, length: messageLength) ?? []
            compressed = true
            guard body.count >= 4 else { throw FrameError.compressedBodyTooShort }
            let size = Int(UInt32(body[0]) << 24 | UInt32(body[1]) << 16 | UInt32(body[2]) << 8 | UInt32(body[3]))
            guard size <= limits.maxDecompressedLength else { throw FrameError.decompressedTooLong(size) }
            do {
                body = try LZ4.decompress(body[4...], expectedSize: size)
            } catch {
                throw FrameError.badLZ4(error)
            }
        case .UNRECOGNIZED(let n):
            throw FrameError.malformedMessage(type: header.type.rawValue, reason: "unknown compression \(n)")
        }

        do {
            guard let message = try BEPMessage.decode(type: header.type, body: body) else {
                return .unknown(type: header.type.rawValue)
            }
            return .message(message, wasCompressed: compressed)
        } catch {
            throw FrameError.malformedMessage(type: header.type.rawValue, reason: "\(error)")
        }
    }
}
