import Foundation
import KaitenFiles
import KaitenProtocol

/// A home that has been set up: its configuration and identity, loaded and checked together.
public struct KaitenHome {
    public let home: Home
    public let config: ConfigFile
    public let identity: Identity

    /// Opens an existing home: reads config.xml, cert.pem and key.pem and checks that this
    /// device's ID appears in the config (syncthing adds it on first start, so a home copied
    /// from syncthing always has it).
    /// - Throws: ``ConfigError`` naming the file at fault.
    public static func open(_ home: Home) throws(ConfigError) -> KaitenHome {
        try open(home, configPath: home.configPath)
    }

    /// Opens a home with the configuration at `configPath` in place of config.xml (the one a
    /// running service runs on: ``Home/runningConfigPath``).
    public static func open(_ home: Home, configPath: String) throws(ConfigError) -> KaitenHome {
        try checkReadable(home)
        let config = try ConfigFile.load(path: configPath)
        let identity = try Identity.load(certificatePath: home.certificatePath, keyPath: home.keyPath)
        return KaitenHome(home: home, config: config, identity: identity)
    }

    /// Keeps this configuration as the one a long-running service runs on.
    public func recordRunningConfig() throws(ConfigError) {
        try ConfigError.writing { () throws(FileWriteError) in try AtomicFile.write(Array(config.serialized().utf8), to: home.runningConfigPath, mode: 0o600) }
    }

    /// The result of ``initialize(_:name:listenAddress:now:)``.
    public struct Created {
        public let deviceID: DeviceID
        public let home: Home
    }

    /// Creates a new home: directories, a new identity and a config.xml that syncthing 1.19.2
    /// loads. Never overwrites: when any of the three files exists, nothing is written.
    /// - Parameters:
    ///   - name: this device's name as peers see it; the host name when nil.
    ///   - listenAddress: where peers reach Kaiten, `tcp://HOST:PORT`.
    ///   - keyType: Ed25519 (as syncthing 2.x makes) or ECDSA P-384 (as 1.x).
    ///   - guiAddress: where `kaiten run` serves the REST API (`<gui>`), `host:port`.
    /// - Throws: ``ConfigError/Code/alreadyExists`` naming every file already present.
    public static func initialize(
        _ home: Home, name: String?, listenAddress: String = "tcp://0.0.0.0:22000", keyType: Identity.KeyType = .default,
        guiAddress: String = "127.0.0.1:8384", discovery: Bool = false, relays: Bool = false, now: Date = Date()
    ) throws(ConfigError) -> Created {
        try validateListenAddress(listenAddress, file: home.configPath)
        try validateGUIAddress(guiAddress, file: home.configPath)
        let existing = [home.configPath, home.certificatePath, home.keyPath].filter {
            FileManager.default.fileExists(atPath: $0)
        }
        guard existing.isEmpty else {
            throw ConfigError(
                .alreadyExists, file: existing[0],
                "already exists (\(existing.joined(separator: ", "))); `kaiten init` never overwrites an identity or config. Use another --home, or remove them yourself."
            )
        }
        for directory in [home.path, home.selectionsDirectory, home.indexDirectory, home.scanDirectory, home.stateDirectory] {
            do {
                try FileManager.default.createDirectory(
                    atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw ConfigError(.writeFailed, file: directory, "cannot create directory: \(error.localizedDescription)")
            }
        }
        let identity: Identity
        do { identity = try Identity.generate(keyType: keyType, now: now) } catch {
            throw ConfigError(.writeFailed, file: home.certificatePath, "cannot generate a certificate: \(error)")
        }
        let deviceName = name ?? ProcessInfo.processInfo.hostName
        let config = try ConfigFile.makeNew(
            path: home.configPath, myID: identity.deviceID, name: deviceName, listenAddress: listenAddress,
            apiKey: randomAPIKey(), guiAddress: guiAddress, discovery: discovery, relays: relays)
        try identity.write(certificatePath: home.certificatePath, keyPath: home.keyPath)
        do {
            try ConfigError.writing { () throws(FileWriteError) in try AtomicFile.write(Array(config.serialized().utf8), to: home.configPath, mode: 0o600, exclusive: true) }
        } catch {
            unlink(home.certificatePath)
            unlink(home.keyPath)
            throw error
        }
        return Created(deviceID: identity.deviceID, home: home)
    }

    /// Checks a `tcp://HOST:PORT` address (or `default`).
    public static func validateListenAddress(_ address: String, file: String) throws(ConfigError) {
        if address == "default" { return }
        guard let url = URL(string: address), ["tcp", "tcp4", "tcp6"].contains(url.scheme ?? ""),
            url.host != nil, let port = url.port, (0...65535).contains(port)
        else {
            throw ConfigError(
                .invalidValue, file: file, "invalid listen address \"\(address)\": want tcp://HOST:PORT, e.g. tcp://0.0.0.0:22000")
        }
    }

    /// A `<gui>` address Kaiten can listen on: `HOST:PORT` (`[::1]:PORT` for IPv6).
    public static func validateGUIAddress(_ address: String, file: String) throws(ConfigError) {
        guard GUIConfiguration.hostAndPort(address) != nil else {
            throw ConfigError(.invalidValue, file: file, "invalid GUI address \"\(address)\": want HOST:PORT, e.g. 127.0.0.1:8384")
        }
    }

    private static func checkReadable(_ home: Home) throws(ConfigError) {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: home.path, isDirectory: &isDirectory) else {
            throw ConfigError(.missingFile, file: home.path, "no Kaiten home here; run `kaiten init` (or pass --home DIR)")
        }
        guard isDirectory.boolValue else {
            throw ConfigError(.unreadable, file: home.path, "is not a directory")
        }
        guard FileManager.default.isReadableFile(atPath: home.path),
            FileManager.default.isExecutableFile(atPath: home.path)
        else {
            throw ConfigError(.unreadable, file: home.path, "cannot be read (permissions?)")
        }
    }

    private static func randomAPIKey() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<32).map { _ in alphabet.randomElement(using: &generator)! })
    }
}
