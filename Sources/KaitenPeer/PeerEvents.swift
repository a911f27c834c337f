/// The events of one connection, as an async sequence that tells the connection when an index
/// batch has been taken, so that it can stop reading from the socket while the consumer is
/// behind (a full index arrives much faster than a log can fsync it batch by batch).
public struct PeerEvents: AsyncSequence, Sendable {
    public typealias Element = PeerEvent

    let stream: AsyncStream<PeerEvent>
    let consumedIndexBatch: @Sendable () -> Void

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<PeerEvent>.Iterator
        let consumedIndexBatch: @Sendable () -> Void

        public mutating func next() async -> PeerEvent? {
            let event = await base.next()
            if case .index = event { consumedIndexBatch() }
            return event
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator(), consumedIndexBatch: consumedIndexBatch)
    }
}
