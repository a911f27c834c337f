import KaitenConfig
import KaitenProtocol

/// How `init` makes the device's key: Ed25519 as syncthing 2.x does, ECDSA P-384 as 1.x.
public typealias KeyType = Identity.KeyType

extension App {
    /// Makes the home: a new device identity and a Syncthing-compatible config.xml. Never
    /// overwrites one that exists.
    public func initialize(
        name: String?, listenAddress: String, keyType: KeyType, guiAddress: String = "127.0.0.1:8384", discovery: Bool, relays: Bool
    ) throws -> (deviceID: DeviceID, home: String) {
        let created = try KaitenHome.initialize(
            home, name: name, listenAddress: listenAddress, keyType: keyType, guiAddress: guiAddress, discovery: discovery, relays: relays)
        return (created.deviceID, created.home.path)
    }

    /// This device's ID, from cert.pem, as `syncthing serve --device-id` derives it.
    public func deviceID() throws -> DeviceID { try open().identity.deviceID }
}
