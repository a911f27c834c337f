import KaitenConfig
import KaitenProtocol

/// How Kaiten learnt an address of a peer.
public enum AddressSource: String, Sendable, Codable, CaseIterable {
    /// A `tcp://` address written in config.xml.
    case configured = "static"
    /// Announced by the peer on this LAN (local discovery).
    case lan
    /// Looked up on a global discovery server.
    case global
}

/// An address to dial a peer at, and where it came from (`kaiten peer ls` shows it).
public struct PeerRoute: Sendable, Equatable, CustomStringConvertible {
    public var address: PeerAddress
    public var source: AddressSource

    public init(address: PeerAddress, source: AddressSource) {
        self.address = address
        self.source = source
    }

    /// How the peer is reached, for people: `relay` for a relay address, else where it came from.
    public var how: String { address.isRelay ? "relay" : source.rawValue }

    public var description: String { "\(address) (\(how))" }
}

/// Where to reach peers. The dialling code asks it for each peer it dials; what stands behind
/// it (config.xml only, or discovery as well) is the caller's choice, so that this target needs
/// no discovery and discovery can use this target's addresses.
public protocol PeerAddressBook: Sendable {
    /// The addresses to try for `device`, best first. Empty: nowhere known to dial.
    func routes(for device: DeviceConfiguration) async -> [PeerRoute]
    /// Why `device` has no address, in words (for `peer check` and the redial log).
    func whyNoRoute(for device: DeviceConfiguration) -> String
    /// Whether `device` may ever get an address from this book (a service redials only those).
    func mayRoute(_ device: DeviceConfiguration) -> Bool
    /// A connection with `device` at `host` passed the TLS check: what the book heard from
    /// there is the device's own (kept over others' claims).
    func confirm(_ device: DeviceID, host: String)
    /// A dial to `host`, found by this book for `device`, met another device or no TLS.
    func refute(_ device: DeviceID, host: String)
}

extension PeerAddressBook {
    public func confirm(_ device: DeviceID, host: String) {}
    public func refute(_ device: DeviceID, host: String) {}
}

/// config.xml's addresses only (`tcp://`, and `relay://` when relays are enabled): what
/// Kaiten dials with discovery off.
public struct ConfiguredAddresses: PeerAddressBook {
    public let relaysEnabled: Bool

    public init(relaysEnabled: Bool = false) {
        self.relaysEnabled = relaysEnabled
    }

    public func routes(for device: DeviceConfiguration) async -> [PeerRoute] {
        Self.configured(device, relaysEnabled: relaysEnabled)
    }

    public static func configured(_ device: DeviceConfiguration, relaysEnabled: Bool) -> [PeerRoute] {
        device.addresses.compactMap(PeerAddress.init).filter { relaysEnabled || !$0.isRelay }
            .map { PeerRoute(address: $0, source: .configured) }
    }

    public func mayRoute(_ device: DeviceConfiguration) -> Bool {
        !Self.configured(device, relaysEnabled: relaysEnabled).isEmpty
    }

    public func whyNoRoute(for device: DeviceConfiguration) -> String {
        if device.addresses.contains("dynamic") {
            return "its address is `dynamic` and discovery is off in config.xml; turn it on "
                + "(`kaiten init --discovery on` for a new home, or localAnnounceEnabled/globalAnnounceEnabled) "
                + "or give a tcp:// address (`kaiten peer add ID --address tcp://HOST:22000`)"
        }
        return "no tcp:// address configured (\(device.addresses.joined(separator: ", ")))"
    }
}

extension PeerAddressBook {
    /// After a round of dials in which a LAN sender turned out not to be the device (an
    /// impostor, or a stale claim), the routes heard since from other senders, within the
    /// book's patience; empty when none is new. So that an impostor announcing often enough
    /// cannot hide the real device from a dial that would otherwise stop at the first sender.
    public func routes(afterRefuting refuted: Set<PeerAddress>, tried: [PeerRoute], device: DeviceConfiguration) async -> [PeerRoute] {
        guard !refuted.isEmpty else { return [] }
        let triedAddresses = Set(tried.map(\.address))
        return await routes(for: device).filter { $0.source == .lan && !triedAddresses.contains($0.address) && !refuted.contains($0.address) }
    }
}
