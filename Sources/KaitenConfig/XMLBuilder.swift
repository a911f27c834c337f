import Foundation
import KaitenProtocol

#if canImport(FoundationXML)
import FoundationXML
#endif

/// Builds config.xml elements laid out the way syncthing writes them (4-space indent, one child
/// per line, attributes in syncthing's order), and inserts or removes them with their whitespace
/// so the file stays as tidy as syncthing would leave it.
enum XMLBuilder {
    /// A child in a built element: a text leaf, or a nested element.
    enum Child {
        case leaf(String, String, attributes: [(String, String)] = [])
        case element(XMLElement)
    }

    static func indent(_ depth: Int) -> String { "\n" + String(repeating: "    ", count: depth) }

    static func element(
        _ name: String, attributes: [(String, String)], children: [Child], depth: Int
    ) -> XMLElement {
        let element = XMLElement(name: name)
        for (key, value) in attributes {
            let attribute = XMLNode.attribute(withName: key, stringValue: value) as! XMLNode
            element.addAttribute(attribute)
        }
        guard !children.isEmpty else { return element }
        for child in children {
            element.addChild(XMLNode.text(withStringValue: indent(depth + 1)) as! XMLNode)
            switch child {
            case .leaf(let childName, let value, let childAttributes):
                let leaf = XMLElement(name: childName, stringValue: value)
                for (key, value) in childAttributes {
                    leaf.addAttribute(XMLNode.attribute(withName: key, stringValue: value) as! XMLNode)
                }
                element.addChild(leaf)
            case .element(let nested):
                element.addChild(nested)
            }
        }
        element.addChild(XMLNode.text(withStringValue: indent(depth)) as! XMLNode)
        return element
    }

    static func device(_ device: DeviceConfiguration, depth: Int) -> XMLElement {
        var attributes: [(String, String)] = [
            ("id", device.id.description), ("name", device.name), ("compression", device.compression.rawValue),
            ("introducer", String(device.isIntroducer)), ("skipIntroductionRemovals", "false"), ("introducedBy", ""),
        ]
        if !device.certName.isEmpty { attributes.append(("certName", device.certName)) }
        var children: [Child] = device.addresses.map { .leaf("address", $0) }
        children += [
            .leaf("paused", String(device.isPaused)), .leaf("autoAcceptFolders", "false"),
            .leaf("maxSendKbps", "0"), .leaf("maxRecvKbps", "0"), .leaf("maxRequestKiB", "0"),
            .leaf("untrusted", "false"), .leaf("remoteGUIPort", "0"),
        ]
        return element("device", attributes: attributes, children: children, depth: depth)
    }

    static func folderDevice(_ id: DeviceID, password: EncryptionPassword? = nil, depth: Int) -> XMLElement {
        element(
            "device", attributes: [("id", id.description), ("introducedBy", "")],
            children: [.leaf("encryptionPassword", password?.text ?? "")], depth: depth)
    }

    /// The folder's `<device>` entries: the plain ones and the encrypted ones with their
    /// passwords, in device ID order.
    static func folderDevices(_ folder: FolderConfiguration, depth: Int) -> [Child] {
        let all = Set(folder.devices).union(folder.encryptedDevices.keys).sorted()
        return all.map { .element(folderDevice($0, password: folder.encryptedDevices[$0], depth: depth)) }
    }

    static func folder(_ folder: FolderConfiguration, depth: Int) -> XMLElement {
        let attributes: [(String, String)] = [
            ("id", folder.id), ("label", folder.label), ("path", folder.path), ("type", folder.type.rawValue),
            ("rescanIntervalS", String(folder.rescanIntervalS)), ("fsWatcherEnabled", "true"),
            ("fsWatcherDelayS", "10"), ("ignorePerms", String(folder.ignorePerms)), ("autoNormalize", "true"),
        ]
        var children: [Child] = [.leaf("filesystemType", "basic")]
        children += folderDevices(folder, depth: depth + 1)
        children.append(.leaf("minDiskFree", "1", attributes: [("unit", "%")]))
        var versioningAttributes: [(String, String)] = []
        if !folder.versioningType.isEmpty { versioningAttributes.append(("type", folder.versioningType)) }
        children.append(
            .element(
                element(
                    "versioning", attributes: versioningAttributes,
                    children: [.leaf("cleanupIntervalS", "3600"), .leaf("fsPath", ""), .leaf("fsType", "basic")],
                    depth: depth + 1)))
        children += [
            .leaf("copiers", "0"), .leaf("pullerMaxPendingKiB", "0"), .leaf("hashers", "0"),
            .leaf("order", "random"), .leaf("ignoreDelete", "false"), .leaf("scanProgressIntervalS", "0"),
            .leaf("pullerPauseS", "0"), .leaf("maxConflicts", String(folder.maxConflicts)),
            .leaf("disableSparseFiles", "false"), .leaf("disableTempIndexes", "false"),
            .leaf("paused", String(folder.isPaused)), .leaf("weakHashThresholdPct", "25"),
            .leaf("markerName", folder.markerName), .leaf("copyOwnershipFromParent", "false"),
            .leaf("modTimeWindowS", "0"), .leaf("maxConcurrentWrites", "2"), .leaf("disableFsync", "false"),
            .leaf("blockPullOrder", "standard"), .leaf("copyRangeMethod", "standard"),
            .leaf("caseSensitiveFS", "false"), .leaf("junctionsAsDirs", "false"),
        ]
        return element("folder", attributes: attributes, children: children, depth: depth)
    }

    /// A copy of `template` laid out at `depth`, its leaves set by `leaves` (by element name;
    /// a name absent from the template is not added) and its attributes by `attributes`.
    /// Newer syncthing versions (config 37 and later, 2.x's 52) keep a `<defaults>` section
    /// that spells out every field a new folder or device gets in that version; building from it
    /// writes exactly what that version expects, fields Kaiten has never heard of included.
    static func fromTemplate(
        _ template: XMLElement, depth: Int, attributes: [(String, String)], leaves: [String: String] = [:],
        replacing repeated: String? = nil, with replacements: [Child] = []
    ) -> XMLElement {
        var attributeList: [(String, String)] = (template.attributes ?? []).compactMap { node in
            guard let name = node.name else { return nil }
            return (name, node.stringValue ?? "")
        }
        // An attribute the template lacks (a device's name) goes right after the one given
        // before it, so the order is syncthing's.
        var previous: String?
        for (key, value) in attributes {
            if let index = attributeList.firstIndex(where: { $0.0 == key }) {
                attributeList[index].1 = value
            } else {
                let after = previous.flatMap { name in attributeList.firstIndex { $0.0 == name } }
                attributeList.insert((key, value), at: after.map { $0 + 1 } ?? 0)
            }
            previous = key
        }
        var children: [Child] = []
        var replaced = false
        for case let child as XMLElement in template.children ?? [] {
            guard let name = child.name else { continue }
            if name == repeated {
                if !replaced { children += replacements }
                replaced = true
                continue
            }
            let childAttributes: [(String, String)] = (child.attributes ?? []).compactMap { node in
                node.name.map { ($0, node.stringValue ?? "") }
            }
            if child.children?.contains(where: { $0.kind == .element }) == true {
                children.append(.element(fromTemplate(child, depth: depth + 1, attributes: [])))
            } else {
                children.append(.leaf(name, leaves[name] ?? child.stringValue ?? "", attributes: childAttributes))
            }
        }
        if !replaced { children = replacements + children }
        return element(template.name ?? "", attributes: attributeList, children: children, depth: depth)
    }

    /// Inserts `element` right after `anchor` (or as the first element child when nil), with a
    /// line break and indentation in front of it.
    static func insert(_ element: XMLElement, into parent: XMLElement, after anchor: XMLElement?, depth: Int) {
        var children = parent.children ?? []
        let whitespace = XMLNode.text(withStringValue: indent(depth)) as! XMLNode
        if let anchor, let position = children.firstIndex(where: { $0 === anchor }) {
            children.insert(contentsOf: [whitespace, element], at: position + 1)
            replaceChildren(of: parent, with: children)
        } else {
            let firstElement = children.first { $0.kind == .element } as? XMLElement
            insert(element, into: parent, before: firstElement, depth: depth)
        }
    }

    /// Inserts `element` right before `anchor` (or as the last element child when nil).
    static func insert(_ element: XMLElement, into parent: XMLElement, before anchor: XMLElement?, depth: Int) {
        var children = parent.children ?? []
        let whitespace = XMLNode.text(withStringValue: indent(depth)) as! XMLNode
        if let anchor, let position = children.firstIndex(where: { $0 === anchor }) {
            // [.. ws anchor ..] becomes [.. ws element ws' anchor ..]: the anchor's own indentation
            // now indents the new element.
            children.insert(contentsOf: [element, whitespace], at: position)
            replaceChildren(of: parent, with: children)
        } else if let lastElement = children.last(where: { $0.kind == .element }) as? XMLElement {
            insert(element, into: parent, after: lastElement, depth: depth)
        } else {
            let closing = XMLNode.text(withStringValue: indent(depth - 1)) as! XMLNode
            replaceChildren(of: parent, with: [whitespace, element, closing])
        }
    }

    // insertChild(_:at:) misplaces nodes in swift-corelibs-foundation; rebuilding the list is exact.
    private static func replaceChildren(of parent: XMLElement, with children: [XMLNode]) {
        for child in children { child.detach() }
        parent.setChildren(children)
    }

    /// Removes an element together with the whitespace that indented it.
    static func remove(_ element: XMLElement) {
        if let previous = element.previousSibling, previous.kind == .text,
            previous.stringValue?.allSatisfy(\.isWhitespace) == true
        {
            previous.detach()
        }
        element.detach()
    }
}
