import Testing

@testable import KaitenTransfer

/// The block server's buffer pool: a buffer given back is the next one taken of its size, and
/// what the pool keeps stays under its bound.
struct BlockBuffersTests {
    @Test func aBufferGivenBackIsTheNextTakenOfItsSize() throws {
        let pool = BlockBuffers(maxKeptBytes: 1 << 20)
        let first = try #require(pool.take(128 << 10))
        pool.give(first, 128 << 10)
        let other = try #require(pool.take(256 << 10))
        #expect(other != first, "a buffer of another size is not handed out for this one")
        let again = try #require(pool.take(128 << 10))
        #expect(again == first)
        pool.give(again, 128 << 10)
        pool.give(other, 256 << 10)
    }

    @Test func whatIsKeptStaysUnderTheBound() throws {
        let pool = BlockBuffers(maxKeptBytes: 256 << 10)
        let buffers = (0..<3).compactMap { _ in pool.take(128 << 10) }
        #expect(buffers.count == 3)
        for buffer in buffers { pool.give(buffer, 128 << 10) }
        // Two fit under 256 KiB; the third was freed. Taking three gives back the two kept,
        // most recent first, then a new allocation (malloc may well reuse the freed address).
        let taken = (0..<3).compactMap { _ in pool.take(128 << 10) }
        #expect(Array(taken.prefix(2)) == [buffers[1], buffers[0]])
        #expect(taken.count == 3)
        for buffer in taken { pool.give(buffer, 128 << 10) }
    }
}
