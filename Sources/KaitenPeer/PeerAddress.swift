import Foundation
import KaitenProtocol

/// An address to dial a peer at: `tcp://HOST:PORT` (also `tcp4://`, `tcp6://`), or a relay the
/// peer is joined to, `relay://HOST:PORT/?id=RELAY-ID` (syncthing's relay URI; the other
/// options it may carry are the relay's own business).
public struct PeerAddress: Sendable, Equatable, Hashable, CustomStringConvertible {
    public let host: String
    public let port: Int
    /// For a `relay://` address: how the relay is verified and joined.
    public let relay: Relay?

    public struct Relay: Sendable, Equatable, Hashable {
        /// The relay's device ID when the URI pins it (`?id=`); any certificate otherwise.
        public var id: DeviceID?
        /// The relay's token (syncthing 2.x relays may ask for one), empty for none.
        public var token: String
    }

    public var isRelay: Bool { relay != nil }

    /// Parses `tcp://`, `tcp4://`, `tcp6://` and `relay://` addresses; `nil` for `dynamic`, QUIC
    /// and anything malformed (a relay URI whose `id=` is not a device ID included).
    public init?(_ text: String) {
        guard let url = URL(string: text), let scheme = url.scheme, ["tcp", "tcp4", "tcp6", "relay"].contains(scheme),
            let host = url.host, !host.isEmpty, let port = url.port, (1...65535).contains(port)
        else { return nil }
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        self.port = port
        if scheme == "relay" {
            let items = URLComponents(string: text)?.queryItems ?? []
            var id: DeviceID?
            if let text = items.first(where: { $0.name == "id" })?.value, !text.isEmpty {
                guard let parsed = try? DeviceID(text) else { return nil }
                id = parsed
            }
            relay = Relay(id: id, token: items.first(where: { $0.name == "token" })?.value ?? "")
        } else {
            relay = nil
        }
    }

    /// A listen address: a `tcp://` one as ``init(_:)`` reads it, and port 0 (the kernel picks a
    /// free port) too. Relays are joined, not listened on: nil for them.
    public static func listening(_ text: String) -> PeerAddress? {
        if let address = PeerAddress(text) { return address.isRelay ? nil : address }
        guard let url = URL(string: text), ["tcp", "tcp4", "tcp6"].contains(url.scheme ?? ""), let host = url.host, !host.isEmpty,
            url.port == 0
        else { return nil }
        return PeerAddress(host: host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host, port: 0)
    }

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
        self.relay = nil
    }

    public var description: String {
        let hostPort = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        guard let relay else { return "tcp://\(hostPort)" }
        return "relay://\(hostPort)" + (relay.id.map { "/?id=\($0)" } ?? "")
    }
}
