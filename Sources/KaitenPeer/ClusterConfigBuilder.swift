import Foundation
import KaitenConfig
import KaitenEncryption
import KaitenProtocol

/// What we already hold of a peer's index for one folder: sent back in our ClusterConfig so
/// the peer sends only what is newer (a delta index, bep-brief §4.3).
public struct RemoteIndexState: Sendable, Equatable {
    public var indexID: UInt64
    public var maxSequence: Int64

    public init(indexID: UInt64, maxSequence: Int64) {
        self.indexID = indexID
        self.maxSequence = maxSequence
    }
}

/// Builds the ClusterConfig Kaiten sends to one peer.
public enum ClusterConfigBuilder {
    /// Every folder shared with `peer` in config.xml, each listing both devices: us with our
    /// index ID and max sequence, the peer with what we hold of its index (zero when nothing).
    /// A folder shared with it encrypted is listed only when `sealed` has its key (the
    /// connection then encrypts it), with the password token on the peer's entry, as syncthing
    /// tells an untrusted device which password its data is sealed with. A folder this device
    /// holds as the untrusted device (`held`) is listed only once it stores a token, with that
    /// token on this device's entry (the trusted peer checks it), as syncthing's untrusted
    /// device does: before, the peer could not tell which password the data is sealed with.
    public static func make(
        folders: [FolderConfiguration], devices: [DeviceConfiguration], me: DeviceID, peer: DeviceID,
        localIndexIDs: [String: UInt64], localMaxSequence: [String: Int64] = [:],
        remote: [String: RemoteIndexState] = [:], sealed: [String: UntrustedExchange] = [:], held: [String: [UInt8]?] = [:]
    ) -> BEPClusterConfig {
        var clusterConfig = BEPClusterConfig()
        let names = Dictionary(devices.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        for folder in folders where folder.devices.contains(peer) || (folder.encryptedDevices[peer] != nil && sealed[folder.id] != nil) {
            let heldToken = folder.type == .receiveencrypted ? held[folder.id] ?? nil : nil
            if folder.type == .receiveencrypted && heldToken == nil { continue }
            var wire = BEPFolder()
            wire.id = folder.id
            wire.label = folder.label
            // Field 3 is 1.19.2's bool read_only and 2.x's FolderType: only send-only (1) reads
            // the same to both, so receive-only is announced as send-receive, as before.
            wire.type = folder.type == .sendonly ? .sendOnly : .sendReceive
            wire.ignorePermissions = folder.ignorePerms || folder.type == .receiveencrypted
            wire.paused = folder.isPaused
            // Kaiten does not consume DownloadProgress messages.
            wire.disableTempIndexes = true

            var mine = BEPDevice()
            mine.id = .init(me.bytes)
            mine.name = names[me]?.name ?? ""
            mine.addresses = names[me]?.addresses ?? []
            mine.indexID = localIndexIDs[folder.id] ?? 0
            mine.maxSequence = localMaxSequence[folder.id] ?? 0
            if let heldToken { mine.encryptionPasswordToken = Data(heldToken) }

            var theirs = BEPDevice()
            theirs.id = .init(peer.bytes)
            theirs.name = names[peer]?.name ?? ""
            theirs.addresses = names[peer]?.addresses ?? []
            theirs.compression = BEPCompression(names[peer]?.compression ?? .metadata)
            if let state = remote[folder.id] {
                theirs.indexID = state.indexID
                theirs.maxSequence = state.maxSequence
            }
            if folder.encryptedDevices[peer] != nil, let exchange = sealed[folder.id] {
                theirs.encryptionPasswordToken = Data(exchange.key.passwordToken)
            }
            wire.devices = [mine, theirs].sorted { $0.id.lexicographicallyPrecedes($1.id) }
            clusterConfig.folders.append(wire)
        }
        return clusterConfig
    }
}

extension BEPCompression {
    init(_ compression: Compression) {
        switch compression {
        case .metadata: self = .metadata
        case .never: self = .never
        case .always: self = .always
        }
    }
}

extension BEPClusterConfig {
    /// What this ClusterConfig says about `device` in `folder`, if the folder lists it.
    public func device(_ device: DeviceID, in folder: String) -> BEPDevice? {
        folders.first { $0.id == folder }?.devices.first { $0.id.elementsEqual(device.bytes) }
    }
}
