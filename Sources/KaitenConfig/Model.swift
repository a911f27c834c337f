import KaitenProtocol

/// How a folder syncs, as in syncthing's `<folder type="…">`.
public enum FolderType: String, Sendable, CaseIterable, Codable {
    case sendreceive, sendonly, receiveonly, receiveencrypted

    /// Parses syncthing's spellings, including the legacy `readwrite` and `readonly`.
    public init?(configValue: String) {
        switch configValue {
        case "readwrite": self = .sendreceive
        case "readonly": self = .sendonly
        default: self.init(rawValue: configValue)
        }
    }
}

/// How a peer wants messages compressed, as in `<device compression="…">`.
public enum Compression: String, Sendable, CaseIterable, Codable {
    case metadata, never, always

    /// Parses syncthing's spellings, including the legacy `true` and `false`.
    public init?(configValue: String) {
        switch configValue {
        case "true": self = .metadata
        case "false": self = .never
        default: self.init(rawValue: configValue)
        }
    }
}

/// A `<device>` of config.xml: a peer (or this device itself).
public struct DeviceConfiguration: Sendable, Equatable {
    public var id: DeviceID
    public var name: String
    /// `dynamic` or `tcp://host:port` entries, in order.
    public var addresses: [String]
    public var compression: Compression
    public var isIntroducer: Bool
    public var isPaused: Bool
    /// The certificate name syncthing checks (`certName` attribute); empty means `syncthing`.
    public var certName: String
    /// Connections wanted to this device (`<numConnections>`, syncthing 1.25+); 0: the default.
    public var numConnections: Int
    /// `<untrusted>true</untrusted>`: syncthing shares only encrypted folders with it. Kaiten
    /// cannot encrypt yet, so it shares no folder with such a device.
    public var isUntrusted = false

    public init(
        id: DeviceID, name: String = "", addresses: [String] = ["dynamic"], compression: Compression = .metadata,
        isIntroducer: Bool = false, isPaused: Bool = false, certName: String = "", numConnections: Int = 0
    ) {
        self.numConnections = numConnections
        self.id = id
        self.name = name
        self.addresses = addresses
        self.compression = compression
        self.isIntroducer = isIntroducer
        self.isPaused = isPaused
        self.certName = certName
    }
}

/// A `<folder>` of config.xml.
public struct FolderConfiguration: Sendable, Equatable {
    public var id: String
    public var label: String
    public var path: String
    public var type: FolderType
    /// The devices the folder is shared with (this device included, as syncthing keeps it).
    /// Devices meant to see it encrypted are not among them (``encryptedDevices``,
    /// ``untrustedDevices``): code that knows nothing of encryption shares nothing with them.
    public var devices: [DeviceID]
    /// Devices the folder is shared with encrypted (untrusted devices): the password on the
    /// folder's device entry, `<encryptionPassword>`, as syncthing keeps it. They get only
    /// ciphertext, through the peer connection's translation (``devices`` does not list them).
    public var encryptedDevices: [DeviceID: EncryptionPassword] = [:]
    /// Devices marked `<untrusted>` that config.xml shares the folder with without a password:
    /// syncthing refuses these ("device is untrusted, but configured to receive plain data"),
    /// and so does Kaiten: the folder is not shared with them at all.
    public var untrustedDevices: [DeviceID] = []

    /// Whether the folder is exchanged with `device`, in plain text or encrypted.
    public func isShared(with device: DeviceID) -> Bool {
        devices.contains(device) || encryptedDevices[device] != nil
    }
    public var rescanIntervalS: Int
    public var ignorePerms: Bool
    /// The versioning type; empty means no versioning.
    public var versioningType: String
    /// The versioning's `<param key val>` entries (`command` for external, `cleanoutDays`, …).
    public var versioningParams: [String: String] = [:]
    /// Where versions go (`<fsPath>`); empty means `.stversions` inside the folder.
    public var versioningPath = ""
    /// How many conflict copies syncthing keeps; 0 deletes conflicts, -1 keeps all.
    public var maxConflicts: Int
    public var markerName: String
    public var isPaused: Bool
    /// Files written get the owner and group of their directory (needs privileges, as in syncthing).
    public var copyOwnershipFromParent = false
    /// `<minDiskFree unit="%">1</minDiskFree>`: the free space a pull must leave.
    public var minDiskFree = MinDiskFree(value: 1, unit: "%")

    public init(
        id: String, label: String = "", path: String, type: FolderType = .sendreceive, devices: [DeviceID] = [],
        rescanIntervalS: Int = 3600, ignorePerms: Bool = false, versioningType: String = "",
        maxConflicts: Int = 10, markerName: String = ".stfolder", isPaused: Bool = false
    ) {
        self.id = id
        self.label = label
        self.path = path
        self.type = type
        self.devices = devices
        self.rescanIntervalS = rescanIntervalS
        self.ignorePerms = ignorePerms
        self.versioningType = versioningType
        self.maxConflicts = maxConflicts
        self.markerName = markerName
        self.isPaused = isPaused
    }
}

/// The parts of `<options>` Kaiten uses.
public struct OptionsConfiguration: Sendable, Equatable {
    /// `<listenAddress>` entries; `default` means `tcp://0.0.0.0:22000` (plus QUIC and relays,
    /// which Kaiten does not use).
    public var listenAddresses: [String]
    public var globalAnnounceEnabled: Bool
    public var localAnnounceEnabled: Bool
    public var relaysEnabled: Bool
    public var natEnabled: Bool
    public var urAccepted: Int
    public var reconnectionIntervalS: Int
    /// `<globalAnnounceServer>` entries: `default`, `default-v4`, `default-v6` or URLs.
    public var globalAnnounceServers: [String] = ["default"]
    public var localAnnouncePort = 21027
    public var localAnnounceMulticastAddress = "[ff12::8384]:21027"
    /// Whether LAN addresses are announced to global discovery too (syncthing's default).
    public var announceLANAddresses = true

    /// The relay listen addresses (`relay://…` and pools, `dynamic+https://…`), with `default`
    /// expanded as syncthing expands it (its pool, relays.syncthing.net).
    public var relayListenAddresses: [String] {
        listenAddresses.flatMap { $0 == "default" ? ["dynamic+https://relays.syncthing.net/endpoint"] : [$0] }
            .filter { $0.hasPrefix("relay://") || $0.hasPrefix("dynamic+http://") || $0.hasPrefix("dynamic+https://") }
    }

    /// The TCP listen addresses Kaiten would bind, with `default` expanded.
    public var tcpListenAddresses: [String] {
        listenAddresses.flatMap { $0 == "default" ? ["tcp://0.0.0.0:22000"] : [$0] }
            .filter { $0.hasPrefix("tcp://") || $0.hasPrefix("tcp4://") || $0.hasPrefix("tcp6://") }
    }
}

/// `<gui>`: where the REST API listens and who may use it, as syncthing reads it.
public struct GUIConfiguration: Sendable, Equatable {
    public var isEnabled: Bool
    public var address: String
    public var apiKey: String
    /// `tls="true"`: HTTPS with the home's https-cert.pem/https-key.pem.
    public var useTLS = false
    /// Basic auth: the user and the bcrypt hash of the password (both empty: none).
    public var user = ""
    public var password = ""
    /// Answers requests whatever their Host header says (a proxy in front).
    public var insecureSkipHostcheck = false
    /// `/metrics` without credentials.
    public var metricsWithoutAuth = false
    /// A request without credentials is answered 401 with a basic-auth challenge (the browser
    /// asks for the password), not 403: syncthing 1.x always, 2.x when this is set.
    public var sendBasicAuthPrompt = false
    /// How long a "stay logged in" session lasts.
    public var sessionCookieDurationS = 604_800

    public init(isEnabled: Bool, address: String, apiKey: String) {
        self.isEnabled = isEnabled
        self.address = address
        self.apiKey = apiKey
    }

    /// `address` as a host and a port to bind: `127.0.0.1:8384`, `[::1]:8384`, `http://…`
    /// (as syncthing also accepts); nil for anything else (a Unix socket is not served).
    public static func hostAndPort(_ address: String) -> (host: String, port: Int)? {
        var text = address
        for scheme in ["http://", "https://"] where text.hasPrefix(scheme) { text = String(text.dropFirst(scheme.count)) }
        if text.hasSuffix("/") { text.removeLast() }
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") {
            host = String(host.dropFirst().dropLast())
        } else if host.contains(":") {
            return nil
        }
        guard !host.isEmpty, !host.contains("/") else { return nil }
        return (host, port)
    }
}

/// syncthing's minDiskFree: a share of the file system (`%`) or an amount (`kB`, `MB`, `GB`,
/// `TB`, powers of 1000 as syncthing reads them; `KiB`… powers of 1024).
public struct MinDiskFree: Sendable, Equatable {
    public var value: Double
    public var unit: String

    public init(value: Double, unit: String) {
        self.value = value
        self.unit = unit
    }

    /// The bytes to keep free on a file system of `total` bytes.
    public func bytes(ofTotal total: Int64) -> Int64 {
        let factors: [String: Double] = [
            "": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
            "kib": 1024, "mib": 1_048_576, "gib": 1_073_741_824, "tib": 1_099_511_627_776,
        ]
        if unit == "%" { return Int64(Double(total) * max(0, min(value, 100)) / 100) }
        return Int64(max(0, value) * (factors[unit.lowercased()] ?? 1))
    }

    public var description: String { unit == "%" ? "\(value.formatted())%" : "\(value.formatted()) \(unit)" }
}

extension Double {
    fileprivate func formatted() -> String { self == rounded() ? String(Int(self)) : String(self) }
}

/// A folder's encryption password for one untrusted device. Never shown: its description
/// is a placeholder, so a log line, a plan or an error that prints it leaks nothing.
public struct EncryptionPassword: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The password as config.xml stores it.
    public let text: String

    public init(_ text: String) { self.text = text }

    public var description: String { "(password)" }
    public var debugDescription: String { "(password)" }
}
