import Foundation
import KaitenProtocol

/// What a peer says, in the order it said it.
public enum PeerEvent: Sendable {
    /// A ClusterConfig: the first one right after the Hello, and again whenever the peer's
    /// configuration changes.
    case clusterConfig(BEPClusterConfig)
    /// An index batch for one folder. `isFullIndex` marks an `Index` message: everything this
    /// peer announced earlier for the folder is void. Otherwise an `IndexUpdate`, to merge.
    case index(folder: String, files: [BEPFileInfo], isFullIndex: Bool)
    /// The connection ended; nothing follows.
    case closed(PeerCloseReason)
}

/// Counters about one connection, readable from any thread.
public struct PeerStats: Sendable, Equatable {
    public var framesReceived = 0
    public var compressedFramesReceived = 0
    public var indexFilesReceived = 0
    public var requestsSent = 0
    public var requestBytesSent = 0
    public var requestsAnswered = 0
    public var pingsSent = 0
    public var maxOutstandingRequestBytes = 0
    /// The reason in the last Close the peer sent (also its answer to ours).
    public var peerCloseReason: String?
}

/// Timing and flow-control settings of a connection.
public struct PeerSettings: Sendable {
    /// Send a Ping when nothing was written for this long (BEP wants one at least every 90 s).
    public var pingAfterWriteSilence: TimeAmountSeconds = 60
    /// How often the keepalive timer looks.
    public var keepaliveCheckInterval: TimeAmountSeconds = 15
    /// Drop the peer when nothing was read for this long (syncthing's ReceiveTimeout).
    public var readTimeout: TimeAmountSeconds = 300
    /// The TLS handshake plus Hello exchange must finish within this (syncthing: 10 s + 20 s).
    public var helloTimeout: TimeAmountSeconds = 30
    /// After sending our Close, how long to wait for the peer to hang up before hanging up
    /// ourselves (a stopping service does not wait on a peer that reads nothing). A one-shot
    /// verb's session waits longer: ``PeerConnection/close(reason:hangUpAfter:)``.
    public var closeGrace: TimeAmountSeconds = 1
    /// At most this many bytes of block requests outstanding (syncthing stalls above 32 MiB).
    public var maxOutstandingRequestBytes = 32 << 20
    /// Bytes of a peer's requests answered at once (syncthing's per-device default: 32 MiB).
    public var maxServingBytes = 32 << 20
    /// Stop reading from the peer while this many index batches wait for the consumer.
    public var maxUndeliveredIndexBatches = 8
    /// Limits of the frame decoder.
    public var limits = BEPLimits.default

    public init() {}

    /// Syncthing's settings with another read timeout; the keepalive check runs often enough to see it.
    public init(readTimeout: TimeAmountSeconds) {
        self.readTimeout = readTimeout
        keepaliveCheckInterval = min(keepaliveCheckInterval, readTimeout / 3)
    }
}

/// Seconds, as a plain number so settings stay free of NIO types.
public typealias TimeAmountSeconds = Double
