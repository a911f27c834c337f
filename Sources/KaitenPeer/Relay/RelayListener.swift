import KaitenConfig
import KaitenProtocol
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Something that takes in peers' connections until closed: a TCP listener, or a relay this
/// device is joined to.
public protocol PeerEntrance: Sendable {
    func close() async
}

extension PeerListener: PeerEntrance {}

/// Stays joined to one relay (a `relay://` listen address) so that peers that cannot dial this
/// device directly reach it through the relay: every session invitation from a configured
/// peer is joined, this side the TLS server, and the connection handed on like an accepted
/// one. The relay's pings are answered; a lost or refused join is tried again with backoff
/// (5 s doubling to 5 min), each kind of failure said once.
public final class RelayListener: PeerEntrance {
    public let relay: PeerAddress
    private let task: Mutex<Task<Void, Never>?>

    /// A relay silent for this long is gone (it pings every minute).
    static let silence: TimeAmount = .seconds(150)

    private init(relay: PeerAddress) {
        self.relay = relay
        self.task = Mutex(nil)
    }

    public static func start(
        relay: PeerAddress, identity: Identity, hello: BEPHello, settings: PeerSettings = PeerSettings(), logger: Logger,
        group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        isAllowed: @escaping @Sendable (DeviceID) -> Bool,
        onRejected: @escaping @Sendable (DeviceID?, String) -> Void = { _, _ in },
        onConnection: @escaping @Sendable (PeerConnection) async -> Void,
        warn: @escaping @Sendable (String) -> Void
    ) -> RelayListener {
        let listener = RelayListener(relay: relay)
        let where_ = "relay \(relay.host):\(relay.port)"
        let task = Task {
            var delay = 5
            var said: String?
            while !Task.isCancelled {
                do {
                    let control = try await RelayProtocolConnection.open(to: relay, identity: identity, group: group, label: where_)
                    defer { control.close() }
                    try await control.send(.joinRelayRequest(token: relay.relay?.token ?? ""))
                    switch try await control.next(within: RelayClient.answerTimeout) {
                    case .response(0, _): break
                    case .response(let code, let message):
                        throw PeerError(.unreachable, peer: where_, "the relay refused to take this device (\(code) \(message))")
                    case .relayFull: throw PeerError(.unreachable, peer: where_, "the relay is full")
                    case let other: throw PeerError(.protocolError, peer: where_, "the relay answered the join with \(other)")
                    }
                    warn("joined \(where_)\(said == nil ? "" : " again"): peers can reach this device through it")
                    said = nil
                    delay = 5
                    while !Task.isCancelled {
                        switch try await control.next(within: silence) {
                        case .ping: try await control.send(.pong)
                        case .pong: break
                        case .sessionInvitation(let invitation):
                            guard invitation.serverSocket, let from = try? DeviceID(bytes: invitation.from) else { continue }
                            guard isAllowed(from) else {
                                onRejected(from, "through \(where_)")
                                continue
                            }
                            Task {
                                do {
                                    let connection = try await RelayClient.joinSession(
                                        invitation, relayHost: relay.host, expecting: { $0 == from && isAllowed($0) }, identity: identity,
                                        hello: hello, settings: settings, logger: logger, group: group,
                                        label: "\(from.shortDescription) via \(where_)")
                                    await onConnection(connection)
                                } catch {
                                    warn("\(from.shortDescription): a session through \(where_) failed: \(error)")
                                }
                            }
                        case .relayFull: throw PeerError(.unreachable, peer: where_, "the relay is full")
                        case let other: throw PeerError(.protocolError, peer: where_, "the relay sent \(other)")
                        }
                    }
                } catch {
                    let why = (error as? PeerError)?.reason ?? "\(error)"
                    if said != why { warn("\(where_): \(why); joining again with backoff (up to 5 min)") }
                    said = why
                }
                try? await Task.sleep(for: .seconds(delay))
                delay = min(300, delay * 2)
            }
        }
        listener.task.withLock { $0 = task }
        return listener
    }

    public func close() async {
        task.withLock { $0 }?.cancel()
    }
}
