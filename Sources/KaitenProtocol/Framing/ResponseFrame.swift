import NIOCore

/// A Response to a block Request, already encoded as its whole frame.
///
/// Made by a block server on the thread that reads the block: the bytes go from the disk
/// straight into the frame and are hashed there, so that between the file and TLS they are
/// copied once (by the read) and stay on the core that read them, instead of being read into
/// a buffer on one core and copied into a frame on the event loop's.
public struct ResponseFrame: Sendable {
    /// The frame's bytes, from its header length on.
    public let buffer: ByteBuffer
    /// The Request it answers.
    public let id: Int32
    /// How many bytes of data it carries (the end of ``buffer``).
    public let count: Int

    /// The frame of a Response to `request` carrying `count` bytes of data, which `fill` writes
    /// into the memory it is given (all `count` bytes); nil when `fill` returns false.
    public static func make(
        answering request: BEPRequest, count: Int, allocator: ByteBufferAllocator,
        fill: (UnsafeMutableRawBufferPointer) -> Bool
    ) -> ResponseFrame? {
        var buffer = allocator.buffer(capacity: count + 32)
        FrameEncoder.writeResponsePrefix(id: request.id, dataCount: count, codeLength: 0, into: &buffer)
        var filled = false
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
            filled = fill(UnsafeMutableRawBufferPointer(rebasing: raw.prefix(count)))
            return filled ? count : 0
        }
        return filled ? ResponseFrame(buffer: buffer, id: request.id, count: count) : nil
    }

    /// The data the frame carries (its last `count` bytes), for checking what was read.
    public func withData<T>(count: Int, _ body: (UnsafeRawBufferPointer) -> T) -> T {
        buffer.withUnsafeReadableBytes { raw in body(UnsafeRawBufferPointer(rebasing: raw.suffix(count))) }
    }
}

/// The answer to a peer's block Request: a Response message, or its frame already encoded.
public enum BEPReply: Sendable {
    case response(BEPResponse)
    case frame(ResponseFrame)
}
