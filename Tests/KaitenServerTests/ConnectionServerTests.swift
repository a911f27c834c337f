import Foundation
import KaitenServer
import KaitenTestThreads
import NIOCore
import NIOPosix
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
            let server = try await ConnectionServer.bind(
                ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton), to: .host("127.0.0.1", port: 0),
                wrap: { channel in try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) },
                serve: { connection in
                    try? await connection.executeThenClose { inbound, _ in
                        for try await _ in inbound {}
                    }
                    served.add()
                })
            let port = try #require(server.port)
            // A burst of clients; the server closes while the kernel is still handing them over.
            let clients = (0..<(round % 8 + 1)).map { _ in connectLoopback(port: port) }
            server.close()
            for fd in clients where fd >= 0 { Glibc.close(fd) }
            await server.run()
            #expect(server.serving == 0, "round \(round): run() returned with connections still being served")
        }
        #expect(served.count > 0, "no connection was accepted at all: the test did not test")
    }

    @Test(.timeLimit(.minutes(1))) func runWaitsForTheConnectionsOpen() async throws {
        let release = Served()
        let server = try await ConnectionServer.bind(
            ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton), to: .host("127.0.0.1", port: 0),
            wrap: { channel in try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) },
            serve: { connection in
                try? await connection.executeThenClose { inbound, _ in
                    for try await _ in inbound {}
                }
                release.add()
            })
        let fd = connectLoopback(port: try #require(server.port))
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

import Synchronization

/// A blocking TCP connect to 127.0.0.1:port; -1 if refused.
func connectLoopback(port: Int) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return -1 }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    if result != 0 {
        Glibc.close(fd)
        return -1
    }
    return fd
}
