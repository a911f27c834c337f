import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenSync

/// A configured folder as `folder ls --json` prints it.
public struct FolderEntry: Encodable, Sendable {
    public let id: String
    public let label: String
    public let path: String
    public let type: String
    public let devices: [String]
    /// Shared with these encrypted (untrusted devices); their passwords are never listed.
    public let encrypted_devices: [String]
    public let rescan_interval_s: Int
    public let ignore_perms: Bool
    public let versioning: String
    public let max_conflicts: Int
    public let marker_name: String
    public let paused: Bool
}

/// The change a folder verb made, for the front-end to say.
public enum FolderChange: Sendable {
    case added(path: String, created: Bool)
    case shared(with: String)
    /// Shared with an untrusted device: it gets ciphertext only.
    case sharedEncrypted(with: String)
    case notShared(with: String)
    case unshared(from: String)
    case removed(path: String, selectionKept: String?)
}

extension App {
    /// Adds a folder (its directory and marker made when missing), shared with `shares`.
    public func addFolder(_ id: String, path: String, label: String?, type: String, shares: [String]) throws -> FolderChange {
        let edit = ConfigEdit(try open())
        guard let folderType = FolderType(configValue: type) else {
            throw ArgumentError("--type \(type): not a folder type (sendreceive, sendonly, receiveonly or receiveencrypted)")
        }
        let devices = try shares.map { try edit.config.resolveDevice($0) }
        let (absolutePath, created) = try edit.addFolder(id, path: path, label: label, type: folderType.rawValue, shares: devices)
        try edit.commit()
        return .added(path: absolutePath, created: created)
    }

    /// Shares a folder with a peer: in plain text, or with `password` encrypted (the peer is
    /// untrusted and gets ciphertext only; the password is kept in config.xml only).
    public func shareFolder(_ id: String, with peer: String, password: String? = nil) throws -> FolderChange {
        let opened = try open()
        let device = try opened.config.resolveDevice(peer)
        if password != nil, opened.config.folder(id: id)?.type == .receiveencrypted {
            throw ArgumentError(
                "folder \(id) is held here as an untrusted device (receiveencrypted): it holds ciphertext and no password, "
                    + "so it cannot be shared encrypted; share it plainly with the trusted devices that seal it")
        }
        try opened.config.shareFolder(id: id, with: device, password: password.map(EncryptionPassword.init))
        try opened.config.write()
        let label = Self.label(device, in: opened.config)
        return password == nil ? .shared(with: label) : .sharedEncrypted(with: label)
    }

    /// Stops sharing a folder with a peer; its part of the folder's index is dropped.
    public func unshareFolder(_ id: String, from peer: String) throws -> FolderChange {
        let opened = try open()
        let device = try opened.config.resolveDevice(peer)
        let folder = try opened.config.folders(named: [id])[0]
        guard folder.isShared(with: device) else { return .notShared(with: Self.label(device, in: opened.config)) }
        try Membership.forgetPeer(device, folders: [id], home: opened) {
            try opened.config.unshareFolder(id: id, from: device)
            try opened.config.write()
        }
        return .unshared(from: Self.label(device, in: opened.config))
    }

    /// Removes a folder from config.xml with its index; its files and selection file stay.
    public func removeFolder(_ id: String) throws -> FolderChange {
        let edit = ConfigEdit(try open())
        let folder = try edit.config.folders(named: [id])[0]
        try edit.removeFolder(id)
        try edit.commit()
        let selection = edit.home.home.selectionPath(folderID: id)
        return .removed(path: folder.path, selectionKept: FileManager.default.fileExists(atPath: selection) ? selection : nil)
    }

    /// The configured folders, and the names of the devices they are shared with (by ID, this
    /// device left out).
    public func folderList() throws -> (entries: [FolderEntry], peerNames: [String: String], me: String) {
        let opened = try open()
        let entries = opened.config.folders.map {
            FolderEntry(
                id: $0.id, label: $0.label, path: $0.path, type: $0.type.rawValue, devices: $0.devices.map(\.description),
                encrypted_devices: $0.encryptedDevices.keys.sorted().map(\.description), rescan_interval_s: $0.rescanIntervalS, ignore_perms: $0.ignorePerms, versioning: $0.versioningType,
                max_conflicts: $0.maxConflicts, marker_name: $0.markerName, paused: $0.isPaused)
        }
        let names = Dictionary(
            opened.config.devices.map { ($0.id.description, DeviceID.label($0.id.description, name: $0.name)) },
            uniquingKeysWith: { a, _ in a })
        return (entries, names, opened.identity.deviceID.description)
    }
}
