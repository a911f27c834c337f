import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy on 127.0.0.1 that a test can cut (every connection through it is reset at once,
/// as a dropped NAT mapping or a cable pulled does) or stall (nothing passes either way and
/// nothing is closed, as a congested or half-dead path does). Threads and blocking sockets.
public final class TCPProxy: @unchecked Sendable {
    public let port: Int
    private let listener: Int32
    private let targetPort: Int
    private let open = Mutex<[Int32]>([])
    private let stopped = Atomic<Bool>(false)
    private let stalled = Atomic<Bool>(false)

    /// Listens on a free loopback port and forwards each connection to 127.0.0.1:`targetPort`.
    public init(to targetPort: Int) throws {
        self.targetPort = targetPort
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else { throw HarnessError("proxy: cannot listen: \(String(cString: strerror(errno)))") }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        port = Int(UInt16(bigEndian: actual.sin_port))
        listener = fd
        Thread { [self] in acceptLoop() }.start()
    }

    public var address: String { "tcp://127.0.0.1:\(port)" }

    static func loopback(port: Int) -> sockaddr_in { LoopbackSocket.address(port: port) }

    private func acceptLoop() {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: targetPort)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(client)
                close(upstream)
                continue
            }
            open.withLock { $0 += [client, upstream] }
            let pair = Pair(client, upstream)
            Thread { [self] in
                pump(from: client, to: upstream)
                done(pair)
            }.start()
            Thread { [self] in
                pump(from: upstream, to: client)
                done(pair)
            }.start()
        }
    }

    /// Both sockets of one connection, closed when both directions are done (never earlier: a
    /// number closed too soon may be reused by the next connection).
    final class Pair: @unchecked Sendable {
        let sockets: [Int32]
        let remaining = Atomic<Int>(2)
        init(_ a: Int32, _ b: Int32) { sockets = [a, b] }
    }

    private func done(_ pair: Pair) {
        guard pair.remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        open.withLock { $0.removeAll { pair.sockets.contains($0) } }
        for fd in pair.sockets { close(fd) }
    }

    private func pump(from source: Int32, to destination: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            // Stalled: nothing is read, so the sender's writes fill the kernel's buffers and block.
            while stalled.load(ordering: .relaxed) && !stopped.load(ordering: .relaxed) { usleep(20_000) }
            let n = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            var written = 0
            while written < n {
                let w = buffer[written..<n].withUnsafeBytes { send(destination, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard w > 0 else { return }
                written += w
            }
        }
        shutdown(destination, Int32(SHUT_WR))
    }

    /// Cuts every connection through the proxy: both ends see the TCP stream end with no TLS
    /// close and no BEP Close, then a reset. New connections still pass.
    public func cut() {
        let sockets = open.withLock { $0 }
        for fd in sockets {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            shutdown(fd, Int32(SHUT_RDWR))
        }
    }

    /// Stops forwarding in both directions on every connection, old and new, until ``resume()``:
    /// the connections stay open and silent.
    public func stall() {
        stalled.store(true, ordering: .relaxed)
    }

    public func resume() {
        stalled.store(false, ordering: .relaxed)
    }

    public func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        cut()
    }
}
