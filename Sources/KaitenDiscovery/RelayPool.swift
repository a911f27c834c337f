import Foundation
import KaitenPeer
import Logging
import NIOCore
import NIOPosix

/// A relay pool (`dynamic+https://relays.syncthing.net/endpoint`, part of syncthing's
/// `default` listen address): the endpoint lists relays as `{"relays": [{"url": "relay://…"}]}`;
/// the one answering a TCP connect soonest is joined, as syncthing picks the closest
/// (`lib/relay/client/dynamic.go`).
public enum RelayPool {
    /// At most this many relays are measured.
    static let measured = 16

    /// The relay to join from the pool at `endpoint`, or nil (said through `warn`).
    public static func choose(
        _ endpoint: String, logger: Logger, warn: @Sendable (String) -> Void,
        group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async -> PeerAddress? {
        guard let server = DiscoveryServer(poolURL: endpoint) else {
            warn("listen address \(endpoint) is not a relay pool URL; skipped")
            return nil
        }
        let candidates: [PeerAddress]
        do {
            let response = try await DiscoveryHTTP.request(server, method: .GET, identity: nil, timeout: .seconds(10))
            guard response.status == 200 else { throw DiscoveryHTTP.Failure(description: "HTTP \(response.status)") }
            candidates = try relays(inPoolAnswer: response.body)
        } catch {
            warn("relay pool \(endpoint): \(error); no relay joined")
            return nil
        }
        var best: (PeerAddress, Duration)?
        for relay in candidates.prefix(measured) {
            let started = ContinuousClock.now
            guard let channel = try? await ClientBootstrap(group: group).connectTimeout(.seconds(2)).connect(host: relay.host, port: relay.port).get()
            else { continue }
            let took = ContinuousClock.now - started
            try? await channel.close()
            if best == nil || took < best!.1 { best = (relay, took) }
        }
        if best == nil { warn("relay pool \(endpoint): none of its \(candidates.count) relays answers; no relay joined") }
        return best?.0
    }

    /// The relay URIs of a pool's answer; what is not one is skipped.
    static func relays(inPoolAnswer body: [UInt8]) throws -> [PeerAddress] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let list = object["relays"] as? [Any]
        else { throw DiscoveryHTTP.Failure(description: "the answer is not a relay list ({\"relays\": [...]})") }
        return list.compactMap { ($0 as? [String: Any])?["url"] as? String }.compactMap(PeerAddress.init).filter(\.isRelay)
    }
}
