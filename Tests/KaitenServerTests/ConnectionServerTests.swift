import Foundation
import KaitenServer
import KaitenTestSupport
import KaitenTestThreads
import NIOCore
import NIOPosix
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Clients connecting while the server closes: every connection the kernel accepted is served
/// and closed, none is dropped unserved (which traps the process in swift-nio's async `bind`:
/// `kaiten run` went down so when a `cat` connected as it started).
@Suite(.ownThread) struct ConnectionServerTests {
    @Test(.timeLimit(.minutes(2))) func connectionsArrivingAsTheServerClosesAreAllServed() async throws {
        let served = Served()
        for round in 0..<150 {
            let server = try await Self.readingUntilClosed(counting: served)
            let port = try #require(server.port)
            // A burst of clients; the server closes while the kernel is still handing them over.
            let clients = (0..<(round % 8 + 1)).map { _ in LoopbackSocket.connect(port: port) }
            server.close()
            for fd in clients where fd >= 0 { Glibc.close(fd) }
            await server.run()
            #expect(server.serving == 0, "round \(round): run() returned with connections still being served")
        }
        #expect(served.count > 0, "no connection was accepted at all: the test did not test")
    }

    /// A server on 127.0.0.1 whose connections read until the client closes; `served` counts
    /// those whose serving ended.
    static func readingUntilClosed(counting served: Served) async throws -> ConnectionServer {
        try await ConnectionServer.bind(
            ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton), to: .host("127.0.0.1", port: 0),
            wrap: { channel in try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) },
            serve: { connection in
                try? await connection.executeThenClose { inbound, _ in
                    for try await _ in inbound {}
                }
                served.add()
            })
    }

    @Test(.timeLimit(.minutes(1))) func runWaitsForTheConnectionsOpen() async throws {
        let release = Served()
        let server = try await Self.readingUntilClosed(counting: release)
        let fd = LoopbackSocket.connect(port: try #require(server.port))
        #expect(fd >= 0)
        let deadline = ContinuousClock.now + .seconds(10)
        while server.serving == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(server.serving == 1)
        server.close()
        let running = Task { await server.run() }
        try await Task.sleep(for: .milliseconds(200))
        #expect(release.count == 0, "the open connection was cut when the listener closed")
        Glibc.close(fd)
        await running.value
        #expect(release.count == 1)
        #expect(server.serving == 0)
    }
}

final class Served: Sendable {
    private let value = Mutex(0)
    func add() { value.withLock { $0 += 1 } }
    var count: Int { value.withLock { $0 } }
}
