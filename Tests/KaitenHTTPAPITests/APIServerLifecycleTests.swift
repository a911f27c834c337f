import Foundation
import KaitenConfig
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenHTTPAPI

#if canImport(Glibc)
import Glibc
#endif

/// A reload closes the REST API and opens the next configuration's: the close must not wait
/// for a long poll's timeout (up to an hour) nor for an idle client's keep-alive connection.
@Suite(.ownThread, .timeLimit(.minutes(2)))
struct APIServerLifecycleTests {
    static func send(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// Reads until the peer closes or `seconds` pass; what came.
    static func readAll(_ fd: Int32, seconds: Int) -> String {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            out += buffer[0..<n]
        }
        return String(decoding: out, as: UTF8.self)
    }

    @Test func aCloseEndsWaitingPollsAndIdleConnectionsAtOnce() async throws {
        let state = APIRouterTests.State(config: APIRouterTests.config)
        let gui = GUIConfiguration(isEnabled: true, address: "127.0.0.1:0", apiKey: "k")
        let server = APIServer(
            access: APIAccess(gui: gui, listensOnLoopback: true), router: APIRouter(state: state, version: APIVersion(version: "v0")), log: { _ in })
        let port = try await server.bind(host: "127.0.0.1", port: 0)
        let running = Task { await server.run() }

        let poll = LoopbackSocket.connect(port: port)
        let idle = LoopbackSocket.connect(port: port)
        defer {
            close(poll)
            close(idle)
        }
        #expect(poll >= 0 && idle >= 0)
        Self.send(poll, "GET /rest/events?since=0&timeout=600 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: k\r\n\r\n")
        // The idle one has had an answer and keeps its connection.
        Self.send(idle, "GET /rest/system/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: k\r\n\r\n")
        var pong: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !String(decoding: pong, as: UTF8.self).contains("}\n") {
            let n = read(idle, &buffer, buffer.count)
            guard n > 0 else { break }
            pong += buffer[0..<n]
        }
        #expect(String(decoding: pong, as: UTF8.self).contains("pong"))
        try await Task.sleep(for: .milliseconds(300))

        let started = ContinuousClock.now
        server.close()
        await running.value
        #expect(ContinuousClock.now - started < .seconds(10))
        // The poll answered with what it had (nothing), and both connections are closed.
        let answer = Self.readAll(poll, seconds: 10)
        #expect(answer.hasPrefix("HTTP/1.1 200") && answer.hasSuffix("[]\n") || answer.isEmpty, "\(answer)")
        #expect(Self.readAll(idle, seconds: 10).isEmpty)
        // Nothing listens any more.
        let after = LoopbackSocket.connect(port: port)
        #expect(after < 0)
        if after >= 0 { close(after) }
    }
}
