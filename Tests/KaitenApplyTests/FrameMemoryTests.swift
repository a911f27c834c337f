import NIOCore
import Testing

@testable import KaitenTransfer

/// The block server's frames: a sent frame's memory is the next frame's (its pages stay mapped:
/// fresh ones were faulted in and cleared for every block), never more than the limit is kept,
/// and a service gives it all back between rounds. Sizes no other test uses (4 MiB, 8 MiB
/// frames), as tests run side by side.
@Suite(.timeLimit(.minutes(5)), .serialized) struct FrameMemoryTests {
    static func address(of buffer: ByteBuffer) -> UInt {
        buffer.withVeryUnsafeBytes { UInt(bitPattern: $0.baseAddress) }
    }

    @Test func aSentFramesMemoryIsTheNextFrames() {
        var first = FrameMemory.allocator.buffer(capacity: (3 << 20) + 1)
        first.writeRepeatingByte(0xAB, count: 1000)
        let firstAddress = Self.address(of: first)
        let keptBefore = FrameMemory.keptBytes
        first = ByteBuffer()  // sent: its storage is freed
        #expect(FrameMemory.keptBytes >= keptBefore + (4 << 20))
        let second = FrameMemory.allocator.buffer(capacity: (3 << 20) + 1)
        #expect(Self.address(of: second) == firstAddress)
        #expect(second.capacity >= (3 << 20) + 1)
    }

    @Test func neverMoreThanTheLimitIsKeptAndAServiceGivesItBack() {
        // Three 8 MiB frames sent together: 16 MiB may be kept, not 24.
        var frames = (0..<3).map { _ in FrameMemory.allocator.buffer(capacity: (7 << 20) + 1) }
        for i in frames.indices { frames[i].writeInteger(UInt64(i)) }
        frames = []
        #expect(FrameMemory.keptBytes <= FrameMemory.keptLimit)
        FrameMemory.releaseKept()
        #expect(FrameMemory.keptBytes == 0)
        // A frame grown past its first size keeps its bytes.
        var growing = FrameMemory.allocator.buffer(capacity: 16)
        growing.writeString("block")
        growing.writeRepeatingByte(1, count: 300_000)
        #expect(growing.readString(length: 5) == "block")
        #expect(growing.readableBytes == 300_000)
    }
}
