import Foundation
import KaitenConfig
import KaitenEncryption
import KaitenFiles
import KaitenPeer
import KaitenProtocol

/// Folders this device holds as the untrusted device (`receiveencrypted`): ciphertext only,
/// never the password. What it learns of them is the password token the first trusted device
/// sends, kept in the folder marker as syncthing's untrusted device keeps it (so that
/// `syncthing decrypt` and `kaiten decrypt` find the folder ID there too).
enum HeldFolders {
    /// Stores the token the peer's ClusterConfig gives for each folder held as ciphertext that
    /// has none yet, and notes it on the connection; returns the folders stored. The
    /// ClusterConfig must have passed ``EncryptedSharing/refusal(_:me:peer:folders:sealed:held:)``.
    static func storeTokens(
        from clusterConfig: BEPClusterConfig, connection: PeerConnection, peer: DeviceID, home: KaitenHome
    ) throws -> [String] {
        let found = EncryptedSharing.tokensToStore(clusterConfig, me: home.identity.deviceID, peer: peer, held: connection.sealed.held)
        for (id, token) in found.sorted(by: { $0.key < $1.key }) {
            guard let folder = home.config.folder(id: id) else { continue }
            let path = folder.path + "/" + StoredPasswordToken.relativePath
            try AtomicFile.write(StoredPasswordToken(folderID: folder.id, token: token).encoded(), to: path)
            connection.sealed.stored(token: token, for: id)
        }
        return found.keys.sorted()
    }
}
