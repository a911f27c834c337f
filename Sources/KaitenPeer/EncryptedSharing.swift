import KaitenProtocol

/// What a peer's ClusterConfig says of encryption, and why Kaiten refuses it.
///
/// Syncthing marks a folder shared with an untrusted device by an encryption password token
/// on a device entry (docs.syncthing.net/specs/untrusted): on this device's entry when the
/// peer treats Kaiten as untrusted (it would send ciphertext), on the peer's own entry when
/// the peer is the untrusted one (a receive-encrypted folder, expecting ciphertext). Kaiten
/// neither encrypts nor decrypts yet: either way the folder cannot be exchanged without
/// storing ciphertext as plain files or sending plain text to a device meant to see none, so
/// the connection is refused, as syncthing refuses an encryption mismatch.
public enum EncryptedSharing {
    /// Why the peer's ClusterConfig cannot be taken, naming the folder; nil when no folder
    /// this device exchanges with the peer (`folders`) is encrypted on either side.
    public static func refusal(_ clusterConfig: BEPClusterConfig, me: DeviceID, peer: DeviceID, folders: Set<String>) -> String? {
        // Every entry counts: a folder listed twice, or a device twice in one folder, must not
        // hide a token behind an entry without one.
        func marked(_ device: DeviceID, in folder: BEPFolder) -> Bool {
            folder.devices.contains { $0.id.elementsEqual(device.bytes) && !$0.encryptionPasswordToken.isEmpty }
        }
        for folder in clusterConfig.folders where folders.contains(folder.id) {
            if marked(me, in: folder) {
                return "shares folder \"\(folder.id)\" encrypted (it marks this device untrusted); Kaiten cannot take in "
                    + "encrypted folders yet: share it with this device as a trusted one, or not at all"
            }
            if marked(peer, in: folder) {
                return "holds folder \"\(folder.id)\" as an untrusted device (receive-encrypted); Kaiten cannot encrypt yet "
                    + "and never sends it plain text: unshare the folder from that device here"
            }
        }
        return nil
    }
}
