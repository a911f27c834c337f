#if canImport(Glibc)
import Glibc
#endif

/// Whether a host, as a person or a peer wrote it, is this machine's loopback: an IPv4 literal in
/// 127.0.0.0/8, the IPv6 literal ::1 (brackets allowed), or `localhost`. A *name* that merely
/// begins with "127." is not: it resolves wherever its DNS says.
public enum LoopbackHost {
    public static func contains(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, bare, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, bare, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { bytes in bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1 }
        }
        return false
    }
}
