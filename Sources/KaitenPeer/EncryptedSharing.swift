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
    /// sides. `sealed` holds the folders this device shares with the peer encrypted; `held`
    /// the folders this device holds as the untrusted device, with the token it stores.
    public static func refusal(
        _ clusterConfig: BEPClusterConfig, me: DeviceID, peer: DeviceID, folders: Set<String>,
        sealed: [String: UntrustedExchange] = [:], held: [String: [UInt8]?] = [:]
    ) -> String? {
        for folder in clusterConfig.folders where folders.contains(folder.id) {
            // Every entry counts: a folder listed twice, or a device twice in one folder, must not
            // hide a token behind an entry without one.
            let forMe = tokens(me, in: folder)
            let theirs = tokens(peer, in: folder)
            if let stored = held[folder.id] {
                let given = Set((forMe + theirs).filter { !$0.isEmpty })
                if forMe.contains(where: { !$0.isEmpty }) && theirs.contains(where: { !$0.isEmpty }) {
                    return "remote has encrypted data and encrypts that data for us - this is impossible: folder \"\(folder.id)\" "
                        + "is held here as an untrusted device, and the peer holds it so too"
                }
                if given.isEmpty {
                    return "remote expects to exchange plain data, but is configured to be encrypted: folder \"\(folder.id)\" is "
                        + "held here as an untrusted device (receive encrypted); on the peer, share it with this device untrusted, "
                        + "with the folder's password"
                }
                if given.count > 1 || (stored.map { !given.contains(Data($0)) } ?? false) {
                    return "different encryption passwords used: the peer seals folder \"\(folder.id)\" with another password "
                        + "than the trusted devices this device holds it for"
                }
                continue
            }
            if forMe.contains(where: { !$0.isEmpty }) {
                return "remote expects to exchange encrypted data, but is configured for plain data: the peer shares folder "
                    + "\"\(folder.id)\" with this device as an untrusted one; hold it here as ciphertext "
                    + "(`kaiten folder add \(folder.id) PATH --type receiveencrypted --share \(peer.shortDescription)`), or share it trusted there"
            }
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

    /// The password tokens a trusted peer's ClusterConfig gives for folders this device holds
    /// as the untrusted device and has no token for yet: stored, they let this device list
    /// the folder (syncthing's untrusted device does the same with the first one it gets).
    /// Call once ``refusal(_:me:peer:folders:sealed:held:)`` found nothing to refuse.
    public static func tokensToStore(
        _ clusterConfig: BEPClusterConfig, me: DeviceID, peer: DeviceID, held: [String: [UInt8]?]
    ) -> [String: [UInt8]] {
        var found: [String: [UInt8]] = [:]
        for folder in clusterConfig.folders {
            guard let stored = held[folder.id], stored == nil else { continue }
            if let token = (tokens(me, in: folder) + tokens(peer, in: folder)).first(where: { !$0.isEmpty }) {
                found[folder.id] = Array(token)
            }
        }
        return found
    }

    private static func tokens(_ device: DeviceID, in folder: BEPFolder) -> [Data] {
        folder.devices.filter { $0.id.elementsEqual(device.bytes) }.map(\.encryptionPasswordToken)
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

extension SealedFolders {
    /// The folders of `folders` this device holds as the untrusted device and shares with
    /// `peer`, each with the token stored in its folder marker (nil: none yet).
    public static func held(for peer: DeviceID, in folders: [FolderConfiguration]) throws -> [String: [UInt8]?] {
        var held: [String: [UInt8]?] = [:]
        for folder in folders where folder.type == .receiveencrypted && folder.devices.contains(peer) {
            let stored = try StoredPasswordToken.read(folderPath: folder.path)
            if let stored, stored.folderID != folder.id {
                throw EncryptionError.malformed(
                    "\(folder.path)/\(StoredPasswordToken.relativePath) names folder \"\(stored.folderID)\", not \"\(folder.id)\"")
            }
            held[folder.id] = .some(stored?.token)
        }
        return held
    }
}
