import Foundation
import KaitenConfig
import KaitenPeer
import KaitenProtocol
import Logging
import Synchronization

/// Where to reach peers when config.xml turns discovery on: a peer's `tcp://` addresses as
/// written, and for a peer whose address is `dynamic` what local discovery heard on the LAN
/// (first: it is the shorter way) and what the global discovery servers know — the way
/// syncthing resolves `dynamic`. It also announces this device: on the LAN always (a verb that
/// does not listen announces no address, which still makes the LAN peers announce
/// themselves), to the global servers only from a process that listens (`run`, `serve`).
public final class Discovery: PeerAddressBook {
    public let local: LocalDiscovery?
    public let global: GlobalDiscovery?
    private let started = ContinuousClock.now
    /// How long after the start a lookup waits for a LAN peer to answer: peers announce
    /// themselves at once when they hear a new device, so a moment is enough.
    private let patience: Duration
    private let listening = Mutex<[String]>([])

    /// Starts what config.xml turns on (nothing at all when discovery is off).
    /// - Parameter listens: whether this process listens for peers (`run`, `serve`): then its
    ///   addresses, given by ``setListenAddresses(_:)`` once the listeners are up, are
    ///   announced on the LAN and to the global servers; otherwise it announces no address.
    public static func start(
        home: KaitenHome, listens: Bool, logger: Logger, patience: Duration = .seconds(3),
        warn: @escaping @Sendable (String) -> Void
    ) async -> Discovery {
        let options = home.config.options
        let me = home.identity.deviceID
        var local: LocalDiscovery?
        if options.localAnnounceEnabled {
            do {
                local = try await LocalDiscovery.start(
                    me: me, port: options.localAnnouncePort, multicast: options.localAnnounceMulticastAddress, addresses: [], logger: logger,
                    warn: warn)
            } catch {
                warn("local discovery: cannot open a UDP socket (\(error)); LAN peers are not found")
            }
        }
        var global: GlobalDiscovery?
        if options.globalAnnounceEnabled {
            let (servers, bad) = DiscoveryServer.servers(from: options.globalAnnounceServers)
            for problem in bad { warn("global discovery: globalAnnounceServer \(problem) in \(home.config.path); skipped") }
            if !servers.isEmpty { global = GlobalDiscovery(servers: servers, identity: home.identity, logger: logger, warn: warn) }
        }
        return Discovery(
            local: local, global: global, patience: patience, listens: listens,
            relaysEnabled: options.relaysEnabled)
    }

    /// Runs `body` with what a one-shot verb dials by: discovery, started for the verb and
    /// stopped after it, when a peer needs it and config.xml turns it on; config.xml's
    /// addresses otherwise.
    public static func using<T>(
        home: KaitenHome, logger: Logger, _ body: (PeerAddressBook) async throws -> T
    ) async throws -> T {
        let me = home.identity.deviceID
        guard isNeeded(for: home.config.devices.filter { $0.id != me }, options: home.config.options) else {
            return try await body(ConfiguredAddresses(relaysEnabled: home.config.options.relaysEnabled))
        }
        let discovery = await start(home: home, listens: false, logger: logger, warn: { logger.warning("\($0)") })
        do {
            let result = try await body(discovery)
            await discovery.close()
            return result
        } catch {
            await discovery.close()
            throw error
        }
    }

    private let listens: Bool
    private let announcing = Mutex(false)

    /// Whether `relay://` addresses are dialled (config.xml's relaysEnabled).
    public let relaysEnabled: Bool

    init(
        local: LocalDiscovery?, global: GlobalDiscovery?, patience: Duration, listens: Bool, relaysEnabled: Bool
    ) {
        self.relaysEnabled = relaysEnabled
        self.listens = listens
        self.local = local
        self.global = global
        self.patience = patience
    }

    /// Whether any peer of `devices` needs discovery to be found, and discovery is on: a
    /// one-shot verb starts it only then.
    public static func isNeeded(for devices: [DeviceConfiguration], options: OptionsConfiguration) -> Bool {
        (options.localAnnounceEnabled || options.globalAnnounceEnabled) && devices.contains { $0.addresses.contains("dynamic") }
    }

    public var isEnabled: Bool { local != nil || global != nil }

    public func routes(for device: DeviceConfiguration) async -> [PeerRoute] {
        var routes = ConfiguredAddresses.configured(device, relaysEnabled: relaysEnabled)
        guard device.addresses.contains("dynamic") else { return routes }
        async let lan = local?.addresses(of: device.id, waitingUntil: started + patience) ?? []
        async let looked = global?.lookup(device.id) ?? []
        for (texts, source) in [(await lan, AddressSource.lan), (await looked, .global)] {
            for text in texts {
                guard let address = PeerAddress(text), relaysEnabled || !address.isRelay, !routes.contains(where: { $0.address == address })
                else { continue }
                routes.append(PeerRoute(address: address, source: source))
            }
        }
        return routes
    }

    public func confirm(_ device: DeviceID, host: String) {
        local?.confirm(device, host: host, address: nil)
    }

    public func refute(_ device: DeviceID, host: String) {
        local?.refute(device, host: host)
    }

    public func mayRoute(_ device: DeviceConfiguration) -> Bool {
        !ConfiguredAddresses.configured(device, relaysEnabled: relaysEnabled).isEmpty || (isEnabled && device.addresses.contains("dynamic"))
    }

    public func whyNoRoute(for device: DeviceConfiguration) -> String {
        guard device.addresses.contains("dynamic") else { return ConfiguredAddresses(relaysEnabled: relaysEnabled).whyNoRoute(for: device) }
        var tried: [String] = []
        if let local { tried.append(local.isListening ? "not heard on the LAN (local discovery)" : "local discovery cannot listen here") }
        if let global { tried.append("not known to \(global.servers.filter(\.looksUp).map(\.url).joined(separator: ", "))") }
        if tried.isEmpty { return ConfiguredAddresses(relaysEnabled: relaysEnabled).whyNoRoute(for: device) }
        return "its address is `dynamic`: " + tried.joined(separator: "; ") + "; is the peer on and announcing?"
    }

    /// This device's listeners are up at `addresses`: announced from now on (loopback ones
    /// are not: no peer can dial them, as syncthing 2.x leaves them out too).
    public func setListenAddresses(_ addresses: [String]) {
        guard listens else { return }
        let worth = GlobalDiscovery.announceable(addresses)
        listening.withLock { $0 = worth }
        local?.setAddresses(worth)
        let first = announcing.withLock { started in
            defer { started = true }
            return !started
        }
        if first { global?.startAnnouncing(addresses: { [weak self] in self?.listening.withLock { $0 } ?? [] }) }
    }

    public func close() async {
        global?.close()
        await local?.close()
    }
}
