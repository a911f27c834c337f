import KaitenConfig
import KaitenDiscovery
import KaitenPeer
import KaitenProtocol
import KaitenService
import KaitenSync

/// A configured device as `peer ls --json` prints it; the last three while a service runs.
public struct PeerEntry: Encodable, Sendable {
    public let device_id: String
    public let name: String
    public let addresses: [String]
    public let compression: String
    public let introducer: Bool
    public let paused: Bool
    public let is_self: Bool
    public let folders: [String]
    public let connected: Bool?
    public let address: String?
    public let reached_via: String?
}

/// The result of checking one peer (`peer check --json` prints these).
public typealias PeerCheckResult = PeerCheck.Result

extension App {
    /// Adds a peer to config.xml (its addresses `dynamic` when none is given).
    public func addPeer(_ deviceID: String, name: String, addresses: [String], compression: String) throws -> DeviceID {
        let edit = ConfigEdit(try open())
        let id = try DeviceID(deviceID)
        guard Compression(configValue: compression) != nil else { throw ArgumentError("--compression must be metadata, never or always") }
        try edit.addDevice(id, name: name, addresses: addresses, compression: compression)
        try edit.commit()
        return id
    }

    /// Changes a peer's name, addresses or compression (nil: unchanged); returns its label.
    public func editPeer(_ peer: String, name: String?, addresses: [String]?, compression: String?) throws -> String {
        let opened = try open()
        let id = try opened.config.resolveDevice(peer)
        guard id != opened.identity.deviceID else {
            throw ConfigError(.invalidValue, file: opened.config.path, "\(id) is this device itself; see `kaiten init` for its name")
        }
        let compressionValue = try compression.map { text in
            guard let value = Compression(configValue: text) else { throw ArgumentError("--compression must be metadata, never or always") }
            return value
        }
        try Self.checkAddresses(addresses ?? [], config: opened.config)
        try opened.config.editDevice(id, name: name, addresses: addresses, compression: compressionValue)
        try opened.config.write()
        return Self.label(id, in: opened.config)
    }

    /// Removes a peer from config.xml and from every folder shared with it, with what it takes
    /// along (its part of the index logs); returns its label.
    public func removePeer(_ peer: String) throws -> String {
        let edit = ConfigEdit(try open())
        let id = try edit.config.resolveDevice(peer)
        let label = Self.label(id, in: edit.config)
        try edit.removeDevice(id)
        try edit.commit()
        return label
    }

    /// The configured devices, this one included; with a running service, whether and how
    /// each is connected. `live` says whether a service answered.
    public func peers() throws -> (entries: [PeerEntry], live: Bool) {
        let opened = try open()
        let folders = opened.config.folders
        let service = ServiceRecord.running(opened.home)
        let entries = opened.config.devices.map { device in
            let live = service?.peers.first { $0.id == device.id.description }
            return PeerEntry(
                device_id: device.id.description, name: device.name, addresses: device.addresses,
                compression: device.compression.rawValue, introducer: device.isIntroducer, paused: device.isPaused,
                is_self: device.id == opened.identity.deviceID, folders: folders.filter { $0.devices.contains(device.id) }.map(\.id),
                connected: live?.connected, address: live?.address, reached_via: live?.via)
        }
        return (entries, service != nil)
    }

    /// Dials each configured peer (or only `peer`), completes the handshake and reports what
    /// each side shares.
    public func checkPeers(only peer: String?, timeout: Double) async throws -> [PeerCheckResult] {
        let opened = try open()
        let only = try peer.map { text throws(ConfigError) in try opened.config.resolveDevice(text) }
        return try await Discovery.using(home: opened, logger: logger) { addresses in
            try await PeerCheck.run(home: opened, only: only, timeout: timeout, addresses: addresses, logger: logger)
        }
    }

    static func checkAddresses(_ addresses: [String], config: ConfigFile) throws {
        for address in addresses where address != "dynamic" {
            if address.hasPrefix("relay://") {
                guard PeerAddress(address) != nil else {
                    throw ArgumentError("--address \"\(address)\": want relay://HOST:PORT/?id=RELAY-DEVICE-ID")
                }
                continue
            }
            do {
                try KaitenHome.validateListenAddress(address, file: config.path)
            } catch {
                throw ArgumentError(
                    "--address \"\(address)\": want tcp://HOST:PORT, relay://HOST:PORT/?id=RELAY-ID or dynamic, e.g. tcp://nas.local:22000")
            }
        }
    }

    /// A peer as a remark names it: "name (SHORT-ID)", or the short ID alone.
    public static func label(_ id: DeviceID, in config: ConfigFile) -> String {
        DeviceID.labelWithID(id.description, name: config.device(id: id)?.name)
    }
}
