import Foundation
import KaitenProtocol

#if canImport(FoundationXML)
import FoundationXML
#endif

/// syncthing's JSON objects written back into config.xml (`PUT`/`PATCH /rest/config/folders/ID`
/// and `/rest/config/devices/ID`): each key of the object that syncthing's schema has goes where
/// ``syncthingJSON()`` reads it from; keys it does not have are ignored, as syncthing's decoder
/// ignores them. Only the element edited changes; the rest of the file is kept as it was.
extension ConfigFile {
    /// Sets the keys of `object` on the folder `id`, then checks the folder as loading would.
    public func patchFolder(id: String, with object: [String: Any]) throws(ConfigError) {
        guard let element = root.elements(forName: "folder").first(where: { Self.attribute($0, "id") == id }) else {
            throw ConfigError(.unknownFolder, file: path, "folder \"\(id)\" is not configured")
        }
        if let given = object["id"] as? String, given != id {
            throw ConfigError(.invalidValue, file: path, "the object's id \"\(given)\" is not the folder's, \"\(id)\"")
        }
        try SyncthingConfigEditor(file: path).set(object, on: element, as: SyncthingConfigSchema.shared.folder, attributes: .folder, depth: 2)
        do { _ = try Self.folder(from: element) } catch { throw error.located(file: path, line: nil) }
    }

    /// Sets the keys of `object` on the device `id`, then checks the device as loading would.
    public func patchDevice(id: DeviceID, with object: [String: Any]) throws(ConfigError) {
        guard let element = root.elements(forName: "device").first(where: { Self.deviceID(of: $0) == id }) else {
            throw ConfigError(.unknownDevice, file: path, "device \(id) is not configured")
        }
        if let given = object["deviceID"] as? String, (try? DeviceID(given)) != id {
            throw ConfigError(.invalidValue, file: path, "the object's deviceID \"\(given)\" is not the device's, \(id)")
        }
        var object = object
        object["deviceID"] = nil
        try SyncthingConfigEditor(file: path).set(object, on: element, as: SyncthingConfigSchema.shared.device, attributes: .device, depth: 2)
        do { _ = try Self.device(from: element) } catch { throw error.located(file: path, line: nil) }
    }
}

extension ConfigFile {
    /// Sets the keys of `object` on `<gui>` or `<options>` (`section`: "gui", "options").
    public func patchSection(_ section: String, with object: [String: Any]) throws(ConfigError) {
        let schema = SyncthingConfigSchema.shared
        let shape: [String: Any]
        switch section {
        case "gui": shape = schema.gui
        case "options": shape = schema.options
        default: throw ConfigError(.invalidValue, file: path, "\(section) is not set through Kaiten's REST API")
        }
        let element = root.elements(forName: section).first ?? {
            let made = XMLElement(name: section)
            XMLBuilder.insert(made, into: root, before: nil, depth: 1)
            return made
        }()
        try SyncthingConfigEditor(file: path).set(object, on: element, as: shape, attributes: section == "gui" ? .gui : .none, depth: 2)
    }
}

/// Writes JSON values into config.xml elements, typed by ``SyncthingConfigSchema``.
struct SyncthingConfigEditor {
    let file: String

    /// The keys syncthing writes as XML attributes (the others are child elements).
    struct Attributes {
        let names: Set<String>
        static let folder = Attributes(names: [
            "id", "label", "path", "type", "rescanIntervalS", "fsWatcherEnabled", "fsWatcherDelayS", "fsWatcherTimeoutS", "ignorePerms",
            "autoNormalize",
        ])
        static let device = Attributes(names: ["id", "name", "compression", "introducer", "skipIntroductionRemovals", "introducedBy"])
        static let folderDevice = Attributes(names: ["id", "introducedBy"])
        static let versioning = Attributes(names: ["type"])
        static let gui = Attributes(names: ["enabled", "tls", "debugging", "sendBasicAuthPrompt"])
        static let diskFree = Attributes(names: ["unit"])
        static let none = Attributes(names: [])

        static func of(_ key: String) -> Attributes {
            switch key {
            case "devices": return .folderDevice
            case "versioning": return .versioning
            case "minDiskFree", "minHomeDiskFree": return .diskFree
            default: return .none
            }
        }
    }

    func set(_ object: [String: Any], on element: XMLElement, as schema: [String: Any], attributes: Attributes, depth: Int) throws(ConfigError) {
        // A key whose value is what the element says already is left as it is: a whole object
        // sent back (GET, change one key, PUT) changes that key only, and a config of one
        // generation does not gain the other generation's keys.
        let current = SyncthingConfigSchema.shared.render(element, as: schema)
        for key in object.keys.sorted() {
            guard let shape = schema[key], let value = object[key] else { continue }
            if let now = current[key], Self.sameJSON(now, value) { continue }
            let name = SyncthingConfigSchema.xmlNames[key] ?? key
            if key == "params" {
                guard let params = value as? [String: Any] else { throw invalid(key, "an object of strings") }
                for old in element.elements(forName: "param") { XMLBuilder.remove(old) }
                for (k, v) in params.sorted(by: { $0.key < $1.key }) {
                    let param = XMLElement(name: "param")
                    param.addAttribute(XMLNode.attribute(withName: "key", stringValue: k) as! XMLNode)
                    param.addAttribute(XMLNode.attribute(withName: "val", stringValue: "\(v)") as! XMLNode)
                    XMLBuilder.insert(param, into: element, before: nil, depth: depth)
                }
                continue
            }
            switch shape {
            case let list as [Any]:
                guard let items = value as? [Any] else { throw invalid(key, "a list") }
                let old = element.elements(forName: name)
                let anchor = old.last.flatMap { last -> XMLElement? in
                    let children = element.children ?? []
                    guard let i = children.firstIndex(where: { $0 === last }) else { return nil }
                    return children[(i + 1)...].first { $0.kind == .element } as? XMLElement
                }
                for child in old { XMLBuilder.remove(child) }
                for item in items {
                    let child = XMLElement(name: name)
                    if let itemSchema = list.first as? [String: Any] {
                        guard let itemObject = item as? [String: Any] else { throw invalid(key, "a list of objects") }
                        try set(itemObject, on: child, as: itemSchema, attributes: Attributes.of(key), depth: depth + 1)
                    } else {
                        child.stringValue = try text(item, like: list.first ?? "string", key: key)
                    }
                    XMLBuilder.insert(child, into: element, before: anchor, depth: depth)
                }
            case let nested as [String: Any]:
                guard let nestedObject = value as? [String: Any] else { throw invalid(key, "an object") }
                let child = element.elements(forName: name).first ?? {
                    let made = XMLElement(name: name)
                    XMLBuilder.insert(made, into: element, before: nil, depth: depth)
                    return made
                }()
                try set(nestedObject, on: child, as: nested, attributes: Attributes.of(key), depth: depth + 1)
            default:
                let string = try text(value, like: shape, key: key)
                let bare = name.hasPrefix("@") ? String(name.dropFirst()) : name
                if name.hasPrefix("@") || element.attribute(forName: bare) != nil || attributes.names.contains(bare) {
                    if let attribute = element.attribute(forName: bare) {
                        attribute.stringValue = string
                    } else {
                        element.addAttribute(XMLNode.attribute(withName: bare, stringValue: string) as! XMLNode)
                    }
                } else if key == "value", element.elements(forName: "value").isEmpty {
                    // minDiskFree's number is the element's own text.
                    element.stringValue = string
                } else if let child = element.elements(forName: bare).first {
                    child.stringValue = string
                } else {
                    XMLBuilder.insert(XMLElement(name: bare, stringValue: string), into: element, before: nil, depth: depth)
                }
            }
        }
    }

    /// A JSON value as config.xml spells it, if it has the type the schema gives the key.
    func text(_ value: Any, like shape: Any, key: String) throws(ConfigError) -> String {
        switch shape as? String {
        case "bool":
            guard let number = value as? NSNumber, Self.isBoolean(number) else { throw invalid(key, "true or false") }
            return number.boolValue ? "true" : "false"
        case "int":
            guard let number = value as? NSNumber, !Self.isBoolean(number) else { throw invalid(key, "a number") }
            let double = number.doubleValue
            return double == double.rounded() && abs(double) < 1e15 ? String(Int64(double)) : String(double)
        default:
            guard let string = value as? String else { throw invalid(key, "a string") }
            return string
        }
    }

    static func sameJSON(_ a: Any, _ b: Any) -> Bool {
        func text(_ value: Any) -> String? {
            (try? JSONSerialization.data(withJSONObject: [value], options: [.sortedKeys])).map { String(decoding: $0, as: UTF8.self) }
        }
        guard let x = text(a), let y = text(b) else { return false }
        return x == y
    }

    /// JSONSerialization gives `true` and `1` both as NSNumber; a boolean's type is `c`.
    static func isBoolean(_ number: NSNumber) -> Bool { String(cString: number.objCType) == "c" }

    func invalid(_ key: String, _ wanted: String) -> ConfigError {
        ConfigError(.invalidValue, file: file, "\"\(key)\" must be \(wanted)")
    }
}
