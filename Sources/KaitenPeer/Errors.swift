import KaitenErrors
import KaitenProtocol

/// Why talking to a peer failed. `description` names the peer (short device ID or address).
public struct PeerError: KaitenError {
    public enum Code: Sendable, Equatable {
        case unreachable
        case tlsRefused
        case unexpectedDevice
        case unknownDevice
        case helloTimeout
        case protocolError
        case closedByPeer
        /// The peer closed the connection after the handshake without sending its ClusterConfig:
        /// it does not know this device, or it still counts an earlier connection as alive.
        case closedBeforeClusterConfig
        case closed
        case requestFailed
        case hashMismatch
        case timeout
        case invalidAddress
        /// The peer wants a folder exchanged encrypted (``EncryptedSharing``).
        case encryptedFolder
    }

    public let code: Code
    /// Who: a short device ID, or an address when the device is not known yet.
    public let peer: String
    public let reason: String

    public init(_ code: Code, peer: String, _ reason: String) {
        self.code = code
        self.peer = peer
        self.reason = reason
    }

    public var location: String? { "peer \(peer)" }
    public var message: String { reason }
}

/// How a connection ended.
public enum PeerCloseReason: Sendable, Equatable, CustomStringConvertible {
    /// The peer sent a Close message with this reason.
    case byPeer(String)
    /// We closed it, with this reason (sent to the peer in a Close).
    case byUs(String)
    /// The peer's bytes broke the protocol; the connection was dropped.
    case protocolError(String)
    /// The TCP/TLS connection ended without a Close.
    case disconnected(String)

    public var description: String {
        switch self {
        case .byPeer(let r): return "closed by peer: \(r)"
        case .byUs(let r): return "closed: \(r)"
        case .protocolError(let r): return "protocol error: \(r)"
        case .disconnected(let r): return r.isEmpty ? "disconnected" : "disconnected: \(r)"
        }
    }
}
