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
public enum FreePort {
    public static func next() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
