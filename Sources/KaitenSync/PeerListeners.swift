import KaitenConfig
import KaitenDiscovery
import KaitenPeer
import KaitenProtocol
import Logging

/// The ways in for peers that dial this device, as config.xml's listen addresses say: a TCP
/// listener per `tcp://` address (port 0 picks a free one), a relay joined per `relay://` one
/// (with relaysEnabled, as syncthing). Only peers `isAllowed` names get past TLS; the rest are
/// refused and said. An address that cannot be bound (a syncthing on the same machine has it)
/// is said and skipped: the others still listen.
enum PeerListeners {
    /// Opens them all; returns them with the addresses peers reach them at (a port chosen by
    /// the system filled in).
    static func open(
        home: KaitenHome, settings: PeerSettings, logger: Logger, isAllowed: @escaping @Sendable (DeviceID) -> Bool,
        accept: @escaping @Sendable (PeerConnection) async -> Void, warn: @escaping @Sendable (String) -> Void
    ) async -> (listeners: [PeerEntrance], addresses: [String]) {
        let me = home.identity.deviceID
        let hello = KaitenVersion.hello(deviceName: home.config.device(id: me)?.name ?? "")
        var listeners: [PeerEntrance] = []
        var addresses: [String] = []
        for text in home.config.options.tcpListenAddresses {
            guard let address = PeerAddress.listening(text) else { continue }
            do {
                let listener = try await PeerListener.bind(
                    to: address, identity: home.identity, hello: hello, settings: settings, logger: logger, isAllowed: isAllowed,
                    onRejected: { id, remote in
                        warn("refused a connection from \(id?.description ?? "a device without a certificate") at \(remote): not a configured peer")
                    },
                    onConnection: accept)
                listeners.append(listener)
                addresses.append("tcp://\(address.host.contains(":") ? "[\(address.host)]" : address.host):\(listener.localPort)")
            } catch {
                warn("cannot listen for peers at \(text): \(error); peers cannot dial this device")
            }
        }
        // A relay:// listen address: joined, and announced as written, so that peers that
        // cannot dial this device reach it through the relay (with relaysEnabled, as syncthing).
        for text in home.config.options.relayListenAddresses where home.config.options.relaysEnabled {
            // A pool (`default` has syncthing's): the relay that answers soonest.
            let relay: PeerAddress
            if text.hasPrefix("dynamic+") {
                guard let chosen = await RelayPool.choose(text, logger: logger, warn: warn) else { continue }
                relay = chosen
            } else {
                guard let parsed = PeerAddress(text), parsed.isRelay else {
                    warn("listen address \(text) is not a relay URI (relay://HOST:PORT/?id=RELAY-ID); skipped")
                    continue
                }
                relay = parsed
            }
            listeners.append(
                RelayListener.start(
                    relay: relay, identity: home.identity, hello: hello, settings: settings, logger: logger, isAllowed: isAllowed,
                    onRejected: { id, remote in
                        warn("refused a connection from \(id?.description ?? "a device") \(remote): not a configured peer")
                    },
                    onConnection: accept, warn: warn))
            addresses.append(text.hasPrefix("dynamic+") ? relay.description : text)
        }
        let unused = home.config.options.listenAddresses.filter { $0.hasPrefix("relay://") }
        if !home.config.options.relaysEnabled && !unused.isEmpty {
            warn("listen addresses \(unused.joined(separator: ", ")) are not used: relaysEnabled is false in config.xml")
        }
        return (listeners, addresses)
    }
}
