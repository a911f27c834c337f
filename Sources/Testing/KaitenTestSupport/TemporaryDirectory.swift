import Foundation

/// A fresh directory under the system temp dir, removed by ``remove()``.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(prefix: String = "kaiten-test") throws {
        let template = (NSTemporaryDirectory() as NSString).appendingPathComponent("\(prefix)-XXXXXX")
        var bytes = Array(template.utf8CString)
        guard let result = mkdtemp(&bytes) else { throw POSIXError(.EIO) }
        path = String(cString: result)
    }

    public func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Free TCP ports on 127.0.0.1, found by binding port 0 and reading what the kernel chose.
/// Ports for programs under test that cannot report a port they bound themselves (syncthing).
///
/// Binding port 0 and closing it hands out a port from the kernel's ephemeral range, which the
/// kernel may give to the next bind(0) or outgoing connection — of another suite running at the
/// same time — before the program under test binds it. So ports come from below the ephemeral
/// range (20000–32767, which the kernel never picks by itself), at random, checked free by a
/// bind, and never twice from this process.
public enum FreePort {
    private static let handedOut = NSLock()
    nonisolated(unsafe) private static var used: Set<Int> = []

    public static func next() throws -> Int {
        for _ in 0..<500 {
            let port = Int.random(in: 20000..<32768)
            let fresh = handedOut.withLock { used.insert(port).inserted }
            guard fresh, isFree(port) else { continue }
            return port
        }
        throw POSIXError(.EADDRINUSE)
    }

    private static func isFree(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = LoopbackSocket.address(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}
