import Foundation

/// A `tcp://HOST:PORT` address from config.xml.
public struct PeerAddress: Sendable, Equatable, CustomStringConvertible {
    public let host: String
    public let port: Int

    /// Parses `tcp://`, `tcp4://` and `tcp6://` addresses; `nil` for `dynamic`, QUIC, relays.
    public init?(_ text: String) {
        guard let url = URL(string: text), ["tcp", "tcp4", "tcp6"].contains(url.scheme ?? ""),
            let host = url.host, !host.isEmpty, let port = url.port, (1...65535).contains(port)
        else { return nil }
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        self.port = port
    }

    /// A listen address: as ``init(_:)``, and port 0 (the kernel picks a free port) too.
    public static func listening(_ text: String) -> PeerAddress? {
        if let address = PeerAddress(text) { return address }
        guard let url = URL(string: text), ["tcp", "tcp4", "tcp6"].contains(url.scheme ?? ""), let host = url.host, !host.isEmpty,
            url.port == 0
        else { return nil }
        return PeerAddress(host: host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host, port: 0)
    }

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public var description: String { host.contains(":") ? "tcp://[\(host)]:\(port)" : "tcp://\(host):\(port)" }
}
