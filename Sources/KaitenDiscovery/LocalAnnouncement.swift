import Foundation
import KaitenProtocol
import SwiftProtobuf

/// One local discovery packet (protocol v4, bep-brief §9): the magic, then an `Announce`.
/// Pure: no sockets; ``LocalDiscovery`` sends and receives them.
public struct LocalAnnouncement: Sendable, Equatable {
    /// The magic of v4 packets (the same as BEP's Hello).
    public static let magic: UInt32 = 0x2EA7_D90B
    /// The magic of v0.13 packets: a device too old to talk to.
    public static let oldMagic: UInt32 = 0x7D79_BC40
    /// The largest packet read (syncthing's receive buffer).
    public static let maximumSize = 65536

    public var device: DeviceID
    public var addresses: [String]
    /// Random per start of the sender: a changed one means it restarted.
    public var instanceID: Int64

    public init(device: DeviceID, addresses: [String], instanceID: Int64) {
        self.device = device
        self.addresses = addresses
        self.instanceID = instanceID
    }

    /// Why a packet was not taken: said in the log once per sender, never a crash.
    public enum Problem: Error, Equatable, CustomStringConvertible {
        case tooShort
        case oldVersion
        case wrongMagic(UInt32)
        case undecodable(String)
        case badDeviceID

        public var description: String {
            switch self {
            case .tooShort: return "a packet shorter than the magic"
            case .oldVersion: return "a v0.13 local discovery packet (that device is too old to connect to)"
            case .wrongMagic(let magic): return "not a local discovery packet (magic \(String(magic, radix: 16)))"
            case .undecodable(let why): return "an announcement that does not decode (\(why))"
            case .badDeviceID: return "an announcement whose device ID is not 32 bytes"
            }
        }
    }

    public func encoded() -> [UInt8] {
        var message = Discovery_Announce()
        message.id = Data(device.bytes)
        message.addresses = addresses
        message.instanceID = instanceID
        // Serializing a message with only these three plain fields cannot fail.
        let body = (try? message.serializedBytes() as [UInt8]) ?? []
        return [
            UInt8(Self.magic >> 24), UInt8(Self.magic >> 16 & 0xFF), UInt8(Self.magic >> 8 & 0xFF), UInt8(Self.magic & 0xFF),
        ] + body
    }

    public static func decode(_ packet: [UInt8]) throws(Problem) -> LocalAnnouncement {
        guard packet.count >= 4 else { throw .tooShort }
        let magic = packet.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard magic == Self.magic else { throw magic == Self.oldMagic ? .oldVersion : .wrongMagic(magic) }
        let message: Discovery_Announce
        do {
            message = try Discovery_Announce(serializedBytes: Array(packet.dropFirst(4)))
        } catch {
            throw .undecodable("\(error)")
        }
        guard let device = try? DeviceID(bytes: Array(message.id)) else { throw .badDeviceID }
        return LocalAnnouncement(device: device, addresses: message.addresses, instanceID: message.instanceID)
    }

    /// The addresses as a receiver may dial them, as syncthing's receiver makes them: an empty
    /// or unspecified host is the packet's source host (a `tcp4` address heard from an IPv6
    /// source, or `tcp6` from IPv4, is dropped); what does not parse is dropped; the rest is
    /// kept as announced.
    public func dialable(source: String) -> [String] {
        addresses.compactMap { Self.resolve($0, source: source) }
    }

    static func resolve(_ text: String, source: String) -> String? {
        guard let split = AddressText(text) else { return nil }
        guard split.hostIsUnspecified else { return text }
        let sourceIsIPv6 = source.contains(":")
        if split.scheme == "tcp4" && sourceIsIPv6 { return nil }
        if split.scheme == "tcp6" && !sourceIsIPv6 { return nil }
        return split.replacingHost(with: source)
    }
}

/// A `scheme://host:port/rest` address taken apart without Foundation's URL (which does not
/// accept every form syncthing sends, such as an empty host).
struct AddressText: Equatable {
    var scheme: String
    var host: String
    var port: Int
    var rest: String

    init?(_ text: String) {
        guard let schemeEnd = text.range(of: "://") else { return nil }
        scheme = String(text[..<schemeEnd.lowerBound]).lowercased()
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "+" }) else { return nil }
        let afterScheme = text[schemeEnd.upperBound...]
        let authorityEnd = afterScheme.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? afterScheme.endIndex
        let authority = afterScheme[..<authorityEnd]
        rest = String(afterScheme[authorityEnd...])
        let hostPart: Substring
        let portPart: Substring
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            guard after.hasPrefix(":") else { return nil }
            portPart = after.dropFirst()
        } else {
            guard let colon = authority.lastIndex(of: ":") else { return nil }
            hostPart = authority[..<colon]
            portPart = authority[authority.index(after: colon)...]
            if hostPart.contains(":") { return nil }
        }
        guard let port = Int(portPart), (0...65535).contains(port) else { return nil }
        host = String(hostPart)
        self.port = port
    }

    var hostIsUnspecified: Bool { host.isEmpty || host == "0.0.0.0" || host == "::" || host == "0:0:0:0:0:0:0:0" }

    var isLoopback: Bool { LoopbackHost.contains(host) }

    func replacingHost(with newHost: String) -> String {
        let bracketed = newHost.contains(":") ? "[\(newHost)]" : newHost
        return "\(scheme)://\(bracketed):\(port)\(rest)"
    }
}
