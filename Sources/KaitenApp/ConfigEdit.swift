import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenSync

/// One change of config.xml made of several edits — a verb's, or a whole configuration the
/// REST API was sent — checked as loading checks it and written once, crash-safely, with what
/// removed peers and folders take along (their part of the index records).
final class ConfigEdit {
    let home: KaitenHome
    var config: ConfigFile { home.config }
    private var createdDirectories: [String] = []
    private var forgottenPeers: [(device: DeviceID, folders: [String])] = []
    private var removedFolders: [String] = []

    init(_ home: KaitenHome) { self.home = home }

    var me: DeviceID { home.identity.deviceID }

    /// Adds a folder (its directory and marker made when missing), shared with `shares`;
    /// returns its absolute path and whether the directory was made.
    func addFolder(_ id: String, path: String, label: String?, type: String, shares: [DeviceID]) throws -> (path: String, created: Bool) {
        guard !id.isEmpty else { throw ArgumentError("a folder needs an ID") }
        let folderType = try Self.folderType(type)
        guard !path.isEmpty else { throw ArgumentError("folder \"\(id)\" needs a path") }
        let absolutePath = Home(path: path).path
        var devices = [me]
        for device in shares where device != me && !devices.contains(device) { devices.append(device) }
        var folder = FolderConfiguration(id: id, label: label ?? id, path: absolutePath, type: folderType, devices: devices)
        // Ciphertext has no permissions to keep (syncthing forces ignorePerms there too).
        if folderType == .receiveencrypted { folder.ignorePerms = true }
        try config.addFolder(folder)
        let created = try FolderDirectory.prepare(path: absolutePath, markerName: folder.markerName)
        if created { createdDirectories.append(absolutePath) }
        return (absolutePath, created)
    }

    /// Sets a folder's fields from syncthing's JSON object: the keys whose values differ. Its
    /// ID and path stay; a peer it is no longer shared with takes its part of the index along.
    func patchFolder(_ id: String, with object: [String: Any]) throws {
        guard let existing = config.folder(id: id) else { throw ConfigError(.unknownFolder, file: config.path, "folder \"\(id)\" is not configured") }
        if let path = object["path"] as? String, Home(path: path).path != existing.path {
            throw ArgumentError("folder \"\(id)\": a folder's path does not change; remove the folder and add it at \(path)")
        }
        if let type = object["type"] as? String, type != existing.type.rawValue {
            let changed = try Self.folderType(type)
            // Ciphertext and plain data do not turn into each other: as syncthing refuses it.
            if changed == .receiveencrypted || existing.type == .receiveencrypted {
                throw ArgumentError(
                    "folder \"\(id)\": its type cannot change to or from receiveencrypted (what it holds is ciphertext on one "
                        + "side and plain data on the other): remove the folder and add it again")
            }
        }
        try config.patchFolder(id: id, with: object)
        guard let now = config.folder(id: id) else { return }
        if !now.devices.contains(me) { throw ArgumentError("folder \"\(id)\": this device must stay among its devices") }
        for device in now.devices where config.device(id: device) == nil {
            throw ConfigError(.unknownDevice, file: config.path, "folder \"\(id)\": device \(device) is not configured")
        }
        for device in existing.devices where !now.devices.contains(device) { forgottenPeers.append((device, [id])) }
    }

    func removeFolder(_ id: String) throws {
        _ = try config.folders(named: [id])
        try config.removeFolder(id: id)
        removedFolders.append(id)
    }

    /// Adds a peer (its addresses `dynamic` when none is given).
    func addDevice(_ id: DeviceID, name: String, addresses: [String], compression: String) throws {
        guard id != me else { throw ConfigError(.invalidValue, file: config.path, "\(id) is this device itself") }
        guard let compressionValue = Compression(configValue: compression) else {
            throw ArgumentError("compression \"\(compression)\": metadata, never or always")
        }
        try App.checkAddresses(addresses, config: config)
        try config.addDevice(DeviceConfiguration(id: id, name: name, addresses: addresses.isEmpty ? ["dynamic"] : addresses, compression: compressionValue))
    }

    /// Sets a device's fields from syncthing's JSON object (this device's own entry too).
    func patchDevice(_ id: DeviceID, with object: [String: Any]) throws {
        if let compression = object["compression"] as? String, Compression(configValue: compression) == nil {
            throw ArgumentError("compression \"\(compression)\": metadata, never or always")
        }
        if let addresses = object["addresses"] as? [String] { try App.checkAddresses(addresses, config: config) }
        if id == me, object["paused"] as? Bool == true { throw ArgumentError("this device itself is not paused") }
        try config.patchDevice(id: id, with: object)
    }

    /// Removes a peer from config.xml and from every folder shared with it.
    func removeDevice(_ id: DeviceID) throws {
        guard id != me else { throw ConfigError(.invalidValue, file: config.path, "\(id) is this device itself; it cannot be removed") }
        let shared = config.folders.filter { $0.devices.contains(id) }.map(\.id)
        try config.removeDevice(id)
        forgottenPeers.append((id, shared))
    }

    /// Sets `<gui>` or `<options>` from syncthing's JSON object. A GUI password given in
    /// clear is stored as syncthing stores it: a bcrypt hash.
    func patchSection(_ section: String, with object: [String: Any]) throws {
        var object = object
        if section == "gui", let password = object["password"] as? String, !password.isEmpty, !PasswordHash.isHash(password) {
            object["password"] = try PasswordHash.make(password)
        }
        try config.patchSection(section, with: object)
    }

    /// Checks the edited file as loading checks it, then writes it once; each removed peer's
    /// and folder's index records are dropped after the write (nothing is dropped if it fails).
    func commit() throws {
        do {
            _ = try ConfigFile.parse(data: Data(config.serialized().utf8), path: config.path)
            var change: () throws -> Void = { [config] in try config.write() }
            for (device, folders) in forgottenPeers {
                let inner = change
                change = { [home] in try Membership.forgetPeer(device, folders: folders, home: home, change: inner) }
            }
            for folder in removedFolders {
                let inner = change
                change = { [home] in try Membership.forgetFolder(folder, home: home, change: inner) }
            }
            try change()
        } catch {
            for path in createdDirectories { try? FileManager.default.removeItem(atPath: path) }
            throw error
        }
    }

    static func folderType(_ type: String) throws -> FolderType {
        guard let folderType = FolderType(configValue: type) else {
            throw ArgumentError("type \(type): not a folder type (sendreceive, sendonly, receiveonly or receiveencrypted)")
        }
        return folderType
    }
}
