import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Plain sockets on 127.0.0.1, for tests that play a client or check a port by hand.
public enum LoopbackSocket {
    /// 127.0.0.1:`port` as a socket address.
    public static func address(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// A blocking TCP connection to 127.0.0.1:`port`: its descriptor, or -1 with `errno` set.
    public static func connect(port: Int) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -1 }
        var address = address(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            let saved = errno
            close(fd)
            errno = saved
            return -1
        }
        return fd
    }
}
