import Foundation
import KaitenProtocol
#if canImport(FoundationXML)
import FoundationXML
#endif

// MARK: - Editing

extension ConfigFile {
    /// Adds a peer.
    /// - Throws: ``ConfigError/Code/duplicateDeviceID`` if the device is already configured.
    public func addDevice(_ device: DeviceConfiguration) throws(ConfigError) {
        if self.device(id: device.id) != nil {
            throw ConfigError(.duplicateDeviceID, file: path, "device \(device.id) is already configured")
        }
        let element = template("device").map { deviceElement(device, from: $0) } ?? XMLBuilder.device(device, depth: 1)
        let anchor = root.elements(forName: "device").last ?? root.elements(forName: "folder").last
        XMLBuilder.insert(element, into: root, after: anchor, depth: 1)
    }

    /// Removes a peer, and its entry in every folder shared with it.
    /// - Throws: ``ConfigError/Code/unknownDevice`` if it is not configured.
    public func removeDevice(_ id: DeviceID) throws(ConfigError) {
        let matches = root.elements(forName: "device").filter { Self.deviceID(of: $0) == id }
        guard !matches.isEmpty else {
            throw ConfigError(.unknownDevice, file: path, "device \(id) is not configured")
        }
        for element in matches { XMLBuilder.remove(element) }
        for folder in root.elements(forName: "folder") {
            for element in folder.elements(forName: "device") where Self.deviceID(of: element) == id {
                XMLBuilder.remove(element)
            }
        }
    }

    /// Adds a folder, spelling out every field syncthing needs: fields left out of a
    /// hand-written `<folder>` become Go zero values in syncthing (`maxConflicts` 0 deletes
    /// conflicting files instead of keeping a copy).
    /// - Throws: ``ConfigError`` for a duplicate folder ID or a device that is not configured.
    public func addFolder(_ folder: FolderConfiguration) throws(ConfigError) {
        if self.folder(id: folder.id) != nil {
            throw ConfigError(.duplicateFolderID, file: path, "folder \"\(folder.id)\" is already configured")
        }
        for id in folder.devices where device(id: id) == nil {
            throw ConfigError(.unknownDevice, file: path, "device \(id) is not configured; add it with `kaiten peer add`")
        }
        // Two folders over one tree would each see the other's files as their own (syncthing
        // refuses such folders too).
        let new = Self.comparablePath(folder.path)
        for other in folders {
            let existing = Self.comparablePath(other.path)
            if new == existing || new.hasPrefix(existing + "/") || existing.hasPrefix(new + "/") {
                let how = new == existing ? "the same directory as" : new.hasPrefix(existing + "/") ? "inside" : "around"
                throw ConfigError(
                    .invalidValue, file: path,
                    "\(folder.path) is \(how) folder \"\(other.id)\" (\(other.path)); folders must not overlap")
            }
        }
        let element = template("folder").map { folderElement(folder, from: $0) } ?? XMLBuilder.folder(folder, depth: 1)
        let anchor = root.elements(forName: "folder").last
        if let anchor {
            XMLBuilder.insert(element, into: root, after: anchor, depth: 1)
        } else {
            XMLBuilder.insert(element, into: root, before: root.elements(forName: "device").first, depth: 1)
        }
    }

    /// The `<defaults>` entry a new element is built from, in configs newer than 1.19.2's:
    /// there the defaults list every field the writing version expects. Config 36 (and files
    /// without defaults) use Kaiten's own layout of 1.19.2's fields.
    func template(_ name: String) -> XMLElement? {
        guard version > Self.currentVersion else { return nil }
        return root.elements(forName: "defaults").first?.elements(forName: name).first
    }

    func deviceElement(_ device: DeviceConfiguration, from template: XMLElement) -> XMLElement {
        var attributes: [(String, String)] = [
            ("id", device.id.description), ("name", device.name), ("compression", device.compression.rawValue),
            ("introducer", String(device.isIntroducer)),
        ]
        if !device.certName.isEmpty { attributes.append(("certName", device.certName)) }
        return XMLBuilder.fromTemplate(
            template, depth: 1, attributes: attributes, leaves: ["paused": String(device.isPaused)],
            replacing: "address", with: device.addresses.map { .leaf("address", $0) })
    }

    func folderElement(_ folder: FolderConfiguration, from template: XMLElement) -> XMLElement {
        let attributes: [(String, String)] = [
            ("id", folder.id), ("label", folder.label), ("path", folder.path), ("type", folder.type.rawValue),
            ("rescanIntervalS", String(folder.rescanIntervalS)), ("fsWatcherEnabled", "true"),
            ("ignorePerms", String(folder.ignorePerms)),
        ]
        let devices = XMLBuilder.folderDevices(folder, depth: 2)
        return XMLBuilder.fromTemplate(
            template, depth: 1, attributes: attributes,
            leaves: ["maxConflicts": String(folder.maxConflicts), "paused": String(folder.isPaused), "markerName": folder.markerName],
            replacing: "device", with: devices)
    }

    /// Shares a folder with a configured device (no-op if already shared so): in plain text,
    /// or, with `password`, encrypted (the device is untrusted: it gets ciphertext only, the
    /// password stored on the folder's device entry as syncthing keeps it).
    /// - Throws: ``ConfigError`` for a device marked untrusted without a password, and for a
    ///   change between plain and encrypted sharing (never made silently: unshare first).
    public func shareFolder(id folderID: String, with deviceID: DeviceID, password: EncryptionPassword? = nil) throws(ConfigError) {
        guard let folder = root.elements(forName: "folder").first(where: { Self.attribute($0, "id") == folderID })
        else {
            throw ConfigError(.unknownFolder, file: path, "folder \"\(folderID)\" is not configured")
        }
        guard let peer = device(id: deviceID) else {
            throw ConfigError(
                .unknownDevice, file: path, "device \(deviceID) is not configured; add it with `kaiten peer add`")
        }
        if let password, password.text.isEmpty {
            throw ConfigError(.invalidValue, file: path, "the encryption password for folder \"\(folderID)\" is empty")
        }
        let existing = folder.elements(forName: "device")
        let entry = existing.first { Self.deviceID(of: $0) == deviceID }
        let stored = entry.flatMap { Self.childText($0, "encryptionPassword") }.flatMap { $0.isEmpty ? nil : EncryptionPassword($0) }
        if password == nil, peer.isUntrusted || stored != nil {
            throw ConfigError(
                .untrustedDevice, file: path,
                "device \(deviceID.shortDescription) is \(stored != nil ? "set to see folder \"\(folderID)\" encrypted" : "marked untrusted"): "
                    + "it never gets plain data; share the folder with it encrypted (`--untrusted --password-file FILE`)")
        }
        if let entry {
            if stored == password { return }
            throw ConfigError(
                .untrustedDevice, file: path,
                "folder \"\(folderID)\" is already shared with \(deviceID.shortDescription) "
                    + (stored == nil ? "in plain text" : "encrypted with another password")
                    + ": the device holds data in that form; `kaiten folder unshare` it first, then share it again")
        }
        let element = XMLBuilder.folderDevice(deviceID, password: password, depth: 2)
        if let last = existing.last {
            XMLBuilder.insert(element, into: folder, after: last, depth: 2)
        } else {
            XMLBuilder.insert(element, into: folder, before: folder.elements(forName: "minDiskFree").first, depth: 2)
        }
    }

    /// Stops sharing a folder with a device (no-op if it was not shared).
    public func unshareFolder(id folderID: String, from deviceID: DeviceID) throws(ConfigError) {
        guard let folder = root.elements(forName: "folder").first(where: { Self.attribute($0, "id") == folderID }) else {
            throw ConfigError(.unknownFolder, file: path, "folder \"\(folderID)\" is not configured")
        }
        for element in folder.elements(forName: "device") where Self.deviceID(of: element) == deviceID {
            XMLBuilder.remove(element)
        }
    }

    /// Removes a folder from the configuration (its files on disk are not touched).
    public func removeFolder(id folderID: String) throws(ConfigError) {
        let matches = root.elements(forName: "folder").filter { Self.attribute($0, "id") == folderID }
        guard !matches.isEmpty else { throw ConfigError(.unknownFolder, file: path, "folder \"\(folderID)\" is not configured") }
        for element in matches { XMLBuilder.remove(element) }
    }

    /// Changes a peer's name, addresses or compression; nil leaves a field as it is.
    public func editDevice(_ id: DeviceID, name: String? = nil, addresses: [String]? = nil, compression: Compression? = nil)
        throws(ConfigError)
    {
        guard let element = root.elements(forName: "device").first(where: { Self.deviceID(of: $0) == id }) else {
            throw ConfigError(.unknownDevice, file: path, "device \(id) is not configured")
        }
        if let name { element.attribute(forName: "name")?.stringValue = name }
        if let compression {
            if let attribute = element.attribute(forName: "compression") {
                attribute.stringValue = compression.rawValue
            } else {
                element.addAttribute(XMLNode.attribute(withName: "compression", stringValue: compression.rawValue) as! XMLNode)
            }
        }
        if let addresses {
            let old = element.elements(forName: "address")
            let children = element.children ?? []
            let anchor = old.last.flatMap { last in
                children.firstIndex { $0 === last }.flatMap { children[($0 + 1)...].first { $0.kind == .element } as? XMLElement }
            } ?? (children.first { $0.kind == .element } as? XMLElement)
            for address in old { XMLBuilder.remove(address) }
            for address in addresses {
                XMLBuilder.insert(XMLElement(name: "address", stringValue: address), into: element, before: anchor, depth: 2)
            }
        }
    }

    /// The device a user means by `text`: a device ID (any spelling), or the name of exactly one
    /// configured peer, or a unique prefix of a configured peer's ID (as `kaiten peer ls` shows
    /// seven characters).
    public func resolveDevice(_ text: String) throws(ConfigError) -> DeviceID {
        if let id = try? DeviceID(text) { return id }
        var matches = devices.filter { $0.name == text }
        if matches.isEmpty { matches = devices.filter { !$0.name.isEmpty && $0.name.lowercased() == text.lowercased() } }
        if matches.isEmpty, text.count >= 4 {
            let prefix = text.uppercased().replacingOccurrences(of: "-", with: "")
            matches = devices.filter { $0.id.description.replacingOccurrences(of: "-", with: "").hasPrefix(prefix) }
        }
        switch matches.count {
        case 1: return matches[0].id
        case 0:
            throw ConfigError(
                .unknownDevice, file: path,
                "no configured peer is named \"\(text)\" or has an ID starting with it; `kaiten peer ls` lists them")
        default:
            let names = matches.map { "\($0.id.shortDescription)\($0.name.isEmpty ? "" : " (\($0.name))")" }.joined(separator: ", ")
            throw ConfigError(.unknownDevice, file: path, "\"\(text)\" could be any of \(names); give the device ID")
        }
    }

    /// Replaces the `<listenAddress>` entries of `<options>`.
    public func setListenAddresses(_ addresses: [String]) {
        guard let options = root.elements(forName: "options").first else { return }
        let old = options.elements(forName: "listenAddress")
        let children = options.children ?? []
        var anchor: XMLElement?
        if let first = old.first, let position = children.firstIndex(where: { $0 === first }) {
            anchor = children[position...].first { ($0 as? XMLElement)?.name.map { $0 != "listenAddress" } ?? false }
                as? XMLElement
        } else {
            anchor = children.first { $0.kind == .element } as? XMLElement
        }
        for element in old { XMLBuilder.remove(element) }
        for address in addresses {
            XMLBuilder.insert(
                XMLElement(name: "listenAddress", stringValue: address), into: options, before: anchor, depth: 2)
        }
    }

    /// Sets the text of one `<options>` child, adding it at the end if absent.
    public func setOption(_ name: String, _ value: String) {
        guard let options = root.elements(forName: "options").first else { return }
        if let element = options.elements(forName: name).first {
            element.stringValue = value
        } else {
            XMLBuilder.insert(
                XMLElement(name: name, stringValue: value), into: options,
                after: options.children?.compactMap { $0 as? XMLElement }.last, depth: 2)
        }
    }

    /// Sets the GUI address and API key (used to run syncthing itself on a Kaiten home).
    public func setGUI(address: String, apiKey: String) {
        guard let gui = root.elements(forName: "gui").first else { return }
        gui.elements(forName: "address").first?.stringValue = address
        gui.elements(forName: "apikey").first?.stringValue = apiKey
    }
}
