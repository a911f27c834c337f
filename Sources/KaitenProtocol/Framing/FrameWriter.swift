import NIOCore

/// The outbound end of a BEP pipeline: encodes Hello and messages with ``FrameEncoder`` and
/// passes a ``ResponseFrame`` on as it is. (NIO's `MessageToByteHandler` would copy a frame
/// into a buffer of its own: a block's bytes once more on the event loop.)
public final class FrameWriter: ChannelOutboundHandler {
    public typealias OutboundIn = BEPOutbound
    public typealias OutboundOut = ByteBuffer

    private let encoder: FrameEncoder

    public init(encoder: FrameEncoder = FrameEncoder()) {
        self.encoder = encoder
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .frame(let frame):
            context.write(wrapOutboundOut(frame.buffer), promise: promise)
        case let outbound:
            var buffer = context.channel.allocator.buffer(capacity: 256)
            do {
                try encoder.encode(data: outbound, out: &buffer)
            } catch {
                promise?.fail(error)
                context.fireErrorCaught(error)
                return
            }
            context.write(wrapOutboundOut(buffer), promise: promise)
        }
    }
}
