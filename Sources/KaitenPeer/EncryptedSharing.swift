import Foundation
import KaitenConfig
import KaitenEncryption
import KaitenProtocol

/// What a peer's ClusterConfig says of encryption, and whether Kaiten can take it.
///
/// Syncthing marks a folder shared with an untrusted device by an encryption password token
/// on a device entry (docs.syncthing.net/specs/untrusted): on the untrusted device's own entry
/// when it sends its ClusterConfig (the token it stores, proof of the password its data is
/// sealed with), on its entry in the ClusterConfig a trusted device sends it. Kaiten shares a
/// folder encrypted with an untrusted device when config.xml gives that device a password
/// (``SealedFolders``), and takes a ClusterConfig only when both sides agree on what is
/// encrypted and with which password, as syncthing checks it (its words are used).
public enum EncryptedSharing {
    /// Why the peer's ClusterConfig cannot be taken, naming the folder; nil when every folder
    /// this device exchanges with the peer (`folders`) is encrypted the same way on both
    /// sides. `sealed` holds the folders this device shares with the peer encrypted.
    public static func refusal(
        _ clusterConfig: BEPClusterConfig, me: DeviceID, peer: DeviceID, folders: Set<String>,
        sealed: [String: UntrustedExchange] = [:]
    ) -> String? {
        // Every entry counts: a folder listed twice, or a device twice in one folder, must not
        // hide a token behind an entry without one.
        func tokens(_ device: DeviceID, in folder: BEPFolder) -> [Data] {
            folder.devices.filter { $0.id.elementsEqual(device.bytes) }.map(\.encryptionPasswordToken)
        }
        for folder in clusterConfig.folders where folders.contains(folder.id) {
            if tokens(me, in: folder).contains(where: { !$0.isEmpty }) {
                return "shares folder \"\(folder.id)\" encrypted (it marks this device untrusted); Kaiten does not hold "
                    + "folders as an untrusted device yet: share it with this device as a trusted one, or not at all"
            }
            let theirs = tokens(peer, in: folder)
            if let exchange = sealed[folder.id] {
                let expected = Data(exchange.key.passwordToken)
                if theirs.isEmpty || theirs.contains(where: \.isEmpty) {
                    return "remote expects to exchange plain data, but is configured to be encrypted: folder \"\(folder.id)\" is "
                        + "shared with it encrypted here; on the peer, add the folder as \"receive encrypted\""
                }
                if theirs.contains(where: { $0 != expected }) {
                    return "different encryption passwords used: the peer holds folder \"\(folder.id)\" sealed with another password"
                }
            } else if theirs.contains(where: { !$0.isEmpty }) {
                return "holds folder \"\(folder.id)\" as an untrusted device (receive-encrypted), and it is shared with it in "
                    + "plain text here: Kaiten never sends it plain data; share it encrypted "
                    + "(`kaiten folder share \(folder.id) \(peer.shortDescription) --untrusted --password-file FILE`)"
            }
        }
        return nil
    }
}

extension SealedFolders {
    /// The folders of `folders` shared with `peer` encrypted, each with its key (derived from
    /// the password config.xml keeps: scrypt, once per process).
    public static func exchanges(for peer: DeviceID, in folders: [FolderConfiguration]) throws -> [String: UntrustedExchange] {
        var exchanges: [String: UntrustedExchange] = [:]
        for folder in folders {
            guard let password = folder.encryptedDevices[peer] else { continue }
            exchanges[folder.id] = UntrustedExchange(key: try FolderKey(folderID: folder.id, password: password.text))
        }
        return exchanges
    }
}
