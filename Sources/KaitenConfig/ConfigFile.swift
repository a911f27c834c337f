import Foundation
import KaitenFiles
import KaitenProtocol

#if canImport(FoundationXML)
import FoundationXML
#endif

/// A Syncthing `config.xml` (version 36), read, edited and written back without loss.
///
/// The file is kept as an XML document with its whitespace; the typed views (``folders``,
/// ``devices``, ``options``, ``gui``) are read from it and the editing methods change only the
/// elements they are about. Everything Kaiten does not model — elements, attributes, their
/// order, comments — is written back as it was, in syncthing's own encoding: a config.xml that
/// syncthing wrote, read and written again, is byte-identical.
///
/// Loading validates what Kaiten relies on and names the file and line of the first problem.
public final class ConfigFile {
    /// Where the file was read from, and where ``write()`` puts it.
    public let path: String
    let document: XMLDocument
    var root: XMLElement { document.rootElement()! }

    /// The config version syncthing 1.19.2 writes, and `kaiten init` with it.
    public static let currentVersion = 36
    /// The newest config version Kaiten reads and edits: syncthing 2.x's. A config of any
    /// version from 30 to this one keeps its version when Kaiten writes it.
    public static let newestVersion = 52

    init(path: String, document: XMLDocument) {
        self.path = path
        self.document = document
    }

    // MARK: - Loading

    /// Reads and validates `path`.
    /// - Throws: ``ConfigError`` naming the file and line: malformed XML, a version Kaiten does
    ///   not know, an unknown folder type, a duplicate folder or device, an invalid device ID.
    public static func load(path: String) throws(ConfigError) -> ConfigFile {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ConfigError(.missingFile, file: path, "missing; run `kaiten init` to create a home")
        }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw ConfigError(.unreadable, file: path, "is a directory, not a file; config.xml must be the file syncthing or `kaiten init` writes")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigError(.unreadable, file: path, "cannot be read: \(String(cString: strerror(errno)))")
        }
        return try parse(data: data, path: path)
    }

    /// Parses config.xml content; `path` is used in errors and by ``write()``.
    public static func parse(data: Data, path: String) throws(ConfigError) -> ConfigFile {
        try precheck(data, path: path)
        let lines = try ElementLines.scan(data: data, path: path)
        let document: XMLDocument
        do {
            document = try XMLDocument(data: data, options: [.nodePreserveWhitespace])
        } catch {
            throw ConfigError(.malformedXML, file: path, "not well-formed XML: \(error)")
        }
        guard let root = document.rootElement(), root.name == "configuration" else {
            throw ConfigError(.malformedXML, file: path, line: 1, "the root element must be <configuration>")
        }
        let config = ConfigFile(path: path, document: document)
        try config.validate(lines: lines)
        return config
    }

    /// The largest config.xml Kaiten reads: syncthing's own are kilobytes (a few MB with
    /// thousands of folders); anything bigger is not a config.xml.
    static let maximumSize = 16 << 20

    /// Cheap checks before libxml2 sees the bytes: it crashes on an empty document and prints
    /// its own noise for others, so the obvious cases get a clear, one-line error here.
    static func precheck(_ data: Data, path: String) throws(ConfigError) {
        guard data.count <= maximumSize else {
            throw ConfigError(
                .malformedXML, file: path,
                "is \(data.count / 1_048_576) MiB: not a syncthing config.xml (those are at most a few MiB)")
        }
        guard let first = data.firstIndex(where: { !($0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D) }) else {
            throw ConfigError(.malformedXML, file: path, line: 1, "is empty; restore it from a backup or run `kaiten init` in a new home")
        }
        guard data[first] == UInt8(ascii: "<") else {
            let line = data[..<first].filter { $0 == 0x0A }.count + 1
            throw ConfigError(.malformedXML, file: path, line: line, "is not XML (it does not begin with a tag)")
        }
        // libxml2 hands Foundation's XMLParser names as bytes it assumes are UTF-8, and the
        // parser crashes on those that are not: refuse them here, naming the line.
        if String(validating: data, as: UTF8.self) == nil {
            throw ConfigError(
                .malformedXML, file: path, line: TextFacts.lineOfFirstInvalidUTF8(data), "is not UTF-8 text (a binary or damaged file)")
        }
        if data.contains(0) {
            let zero = data.firstIndex(of: 0)!
            let line = data[..<zero].filter { $0 == 0x0A }.count + 1
            throw ConfigError(.malformedXML, file: path, line: line, "holds a NUL byte: binary data, not XML")
        }
        // A DOCTYPE declares entities, which libxml2 expands, external ones (a file, a URL)
        // included: syncthing's XML reader takes none, and neither does Kaiten.
        if let doctype = data.firstRange(of: Data("<!DOCTYPE".utf8)) ?? data.firstRange(of: Data("<!doctype".utf8)) {
            let line = data[..<doctype.lowerBound].filter { $0 == 0x0A }.count + 1
            throw ConfigError(
                .malformedXML, file: path, line: line, "declares a DOCTYPE (entities): syncthing's config.xml has none; remove it")
        }
    }

    /// A new configuration for a fresh home, the way `syncthing generate` lays it out, with
    /// NAT traversal, usage and crash reporting and auto-upgrade off; global and local
    /// discovery on only with `discovery`, relays only with `relays` (by default Kaiten talks
    /// only to the addresses it is given).
    public static func makeNew(
        path: String, myID: DeviceID, name: String, listenAddress: String, apiKey: String, guiAddress: String = "127.0.0.1:8384",
        discovery: Bool = false, relays: Bool = false
    ) throws(ConfigError) -> ConfigFile {
        let text = ConfigTemplate.render(
            myID: myID, name: name, listenAddress: listenAddress, apiKey: apiKey, guiAddress: guiAddress, discovery: discovery, relays: relays)
        return try parse(data: Data(text.utf8), path: path)
    }

    // MARK: - Typed views

    /// The config's `version` attribute.
    public var version: Int { Int(root.attribute(forName: "version")?.stringValue ?? "") ?? 0 }

    /// Every top-level `<device>`, in file order.
    public var devices: [DeviceConfiguration] {
        root.elements(forName: "device").compactMap { try? Self.device(from: $0) }
    }

    /// Every `<folder>`, in file order.
    public var folders: [FolderConfiguration] {
        // Only the devices marked untrusted are parsed (rare): this runs for every index batch.
        let untrusted = Set(root.elements(forName: "device").compactMap { element in
            Self.flagValue(Self.childText(element, "untrusted")) ? Self.deviceID(of: element) : nil
        })
        return root.elements(forName: "folder").compactMap { element in
            guard var folder = try? Self.folder(from: element) else { return nil }
            // A device marked untrusted without a password on this folder's entry would get
            // plain data: refused, as syncthing refuses it.
            let marked = folder.devices.filter { untrusted.contains($0) }
            if !marked.isEmpty {
                folder.devices.removeAll { untrusted.contains($0) }
                folder.untrustedDevices += marked
            }
            return folder
        }
    }

    /// Why folders config.xml shares are not shared with some devices, one sentence each
    /// (naming folder and device), for every front-end to show: see
    /// ``FolderConfiguration/untrustedDevices``.
    public var sharingRefusals: [String] {
        let names = Dictionary(devices.map { ($0.id, $0.name) }, uniquingKeysWith: { first, _ in first })
        return folders.flatMap { folder in
            folder.untrustedDevices.map { device in
                let name = names[device].flatMap { $0.isEmpty ? nil : " (\($0))" } ?? ""
                return "folder \"\(folder.id)\" is shared with \(device.shortDescription)\(name), a device marked untrusted, "
                    + "without an encryption password: it would get plain data, so the folder is not shared with it; "
                    + "`kaiten folder share \(folder.id) \(device.shortDescription) --untrusted --password-file FILE` shares it encrypted"
            }
        }
    }

    /// The `<options>` Kaiten uses.
    public var options: OptionsConfiguration {
        let element = root.elements(forName: "options").first
        func text(_ name: String) -> String? { element?.elements(forName: name).first?.stringValue }
        return OptionsConfiguration(
            listenAddresses: element?.elements(forName: "listenAddress").compactMap(\.stringValue) ?? [],
            // An element left out takes syncthing's default, as syncthing reads it (defaults
            // first, then the XML): discovery and relays on.
            globalAnnounceEnabled: flag(text("globalAnnounceEnabled"), default: true),
            localAnnounceEnabled: flag(text("localAnnounceEnabled"), default: true),
            relaysEnabled: flag(text("relaysEnabled"), default: true),
            natEnabled: flag(text("natEnabled"), default: true),
            urAccepted: Int(text("urAccepted") ?? "") ?? 0,
            reconnectionIntervalS: Int(text("reconnectionIntervalS") ?? "") ?? 60,
            globalAnnounceServers: element.map { element in
                let servers = element.elements(forName: "globalAnnounceServer").compactMap(\.stringValue)
                return element.elements(forName: "globalAnnounceServer").isEmpty ? ["default"] : servers
            } ?? ["default"],
            localAnnouncePort: Int(text("localAnnouncePort") ?? "").flatMap { (1...65535).contains($0) ? $0 : nil } ?? 21027,
            localAnnounceMulticastAddress: text("localAnnounceMCAddr") ?? "[ff12::8384]:21027",
            announceLANAddresses: flag(text("announceLANAddresses"), default: true))
    }

    /// A boolean element as syncthing's XML decoder reads it: absent, the default.
    func flag(_ text: String?, default value: Bool) -> Bool {
        guard let text else { return value }
        return Self.flagValue(text)
    }

    /// Go's strconv.ParseBool, as syncthing reads a boolean; an empty element is false.
    static func flagValue(_ text: String?) -> Bool {
        guard let text = text?.trimmingCharacters(in: .whitespaces) else { return false }
        return ["1", "t", "T", "true", "TRUE", "True"].contains(text)
    }

    /// The `<gui>` element.
    public var gui: GUIConfiguration {
        let element = root.elements(forName: "gui").first
        let text = { (name: String) in element?.elements(forName: name).first?.stringValue ?? "" }
        var gui = GUIConfiguration(
            isEnabled: element?.attribute(forName: "enabled")?.stringValue != "false", address: text("address"), apiKey: text("apikey"))
        gui.useTLS = Self.flagValue(element?.attribute(forName: "tls")?.stringValue)
        gui.user = text("user")
        gui.password = text("password")
        gui.insecureSkipHostcheck = Self.flagValue(text("insecureSkipHostcheck"))
        gui.metricsWithoutAuth = Self.flagValue(text("metricsWithoutAuth"))
        let prompt = element?.elements(forName: "sendBasicAuthPrompt").first?.stringValue
        gui.sendBasicAuthPrompt = prompt.map(Self.flagValue) ?? (version <= Self.currentVersion)
        if let duration = Int(text("sessionCookieDurationS").trimmingCharacters(in: .whitespaces)), duration > 0 { gui.sessionCookieDurationS = duration }
        return gui
    }

    /// One folder by ID.
    public func folder(id: String) -> FolderConfiguration? { folders.first { $0.id == id } }

    /// The folders a verb names, in config.xml's order; all of them when none is named. Each one
    /// named must be configured.
    public func folders(named requested: [String]) throws(ConfigError) -> [FolderConfiguration] {
        for id in requested where folder(id: id) == nil {
            throw ConfigError(.unknownFolder, file: path, "folder \"\(id)\" is not configured")
        }
        return folders.filter { requested.isEmpty || requested.contains($0.id) }
    }

    /// One device by ID.
    public func device(id: DeviceID) -> DeviceConfiguration? { devices.first { $0.id == id } }

    // MARK: - Writing

    /// The file's content as it would be written.
    public func serialized() -> String {
        ConfigSerializer.serialize(root)
    }

    /// Writes the file atomically: temporary file, fsync, rename, fsync of the directory.
    public func write() throws(ConfigError) {
        try ConfigError.writing { () throws(FileWriteError) in try AtomicFile.write(Array(serialized().utf8), to: path, mode: 0o600) }
    }

    // MARK: - Validation and element decoding

    func validate(lines: ElementLines) throws(ConfigError) {
        let versionText = root.attribute(forName: "version")?.stringValue ?? ""
        guard let version = Int(versionText) else {
            throw ConfigError(.unsupportedVersion, file: path, line: 1, "<configuration> has no numeric version")
        }
        guard version <= Self.newestVersion, version >= 30 else {
            throw ConfigError(
                .unsupportedVersion, file: path, line: 1,
                "config version \(version) is not supported (Kaiten reads 30...\(Self.newestVersion): syncthing 1.12 to 2.x)"
            )
        }
        var seenDevices = Set<DeviceID>()
        for (i, element) in root.elements(forName: "device").enumerated() {
            let line = lines.line(of: "device", index: i)
            let device: DeviceConfiguration
            do { device = try Self.device(from: element) } catch { throw error.located(file: path, line: line) }
            guard seenDevices.insert(device.id).inserted else {
                throw ConfigError(.duplicateDeviceID, file: path, line: line, "device \(device.id) is listed twice")
            }
        }
        var seenFolders = Set<String>()
        for (i, element) in root.elements(forName: "folder").enumerated() {
            let line = lines.line(of: "folder", index: i)
            let folder: FolderConfiguration
            do { folder = try Self.folder(from: element) } catch { throw error.located(file: path, line: line) }
            guard seenFolders.insert(folder.id).inserted else {
                throw ConfigError(.duplicateFolderID, file: path, line: line, "folder ID \"\(folder.id)\" is used twice")
            }
        }
    }

    /// A path with symlinks resolved as far as it exists and no trailing slash, for comparing.
    static func comparablePath(_ path: String) -> String {
        var resolved = (path as NSString).standardizingPath
        if let real = realpath(resolved, nil) {
            resolved = String(cString: real)
            free(real)
        }
        while resolved.count > 1 && resolved.hasSuffix("/") { resolved.removeLast() }
        return resolved
    }

    static func attribute(_ element: XMLElement, _ name: String) -> String? {
        element.attribute(forName: name)?.stringValue
    }

    static func deviceID(of element: XMLElement) -> DeviceID? {
        try? DeviceID(attribute(element, "id") ?? "")
    }

    static func childText(_ element: XMLElement, _ name: String) -> String? {
        element.elements(forName: name).first?.stringValue
    }

    static func device(from element: XMLElement) throws(ElementError) -> DeviceConfiguration {
        let idText = attribute(element, "id") ?? ""
        let id: DeviceID
        do { id = try DeviceID(idText) } catch { throw ElementError(.invalidDeviceID, "<device>: \(error)") }
        let compressionText = attribute(element, "compression") ?? "metadata"
        guard let compression = Compression(configValue: compressionText) else {
            throw ElementError(
                .invalidValue, "device \(id.shortDescription): unknown compression \"\(compressionText)\" (metadata, never or always)")
        }
        let connectionsText = childText(element, "numConnections")?.trimmingCharacters(in: .whitespaces) ?? "0"
        guard let numConnections = Int(connectionsText), numConnections >= 0 else {
            throw ElementError(.invalidValue, "device \(id.shortDescription): numConnections \"\(connectionsText)\" is not a count (0 for the default)")
        }
        var configuration = DeviceConfiguration(
            id: id, name: attribute(element, "name") ?? "",
            addresses: element.elements(forName: "address").compactMap(\.stringValue),
            compression: compression,
            isIntroducer: attribute(element, "introducer") == "true",
            isPaused: childText(element, "paused") == "true",
            certName: attribute(element, "certName") ?? "", numConnections: numConnections)
        configuration.isUntrusted = flagValue(childText(element, "untrusted"))
        return configuration
    }

    static func folder(from element: XMLElement) throws(ElementError) -> FolderConfiguration {
        let id = attribute(element, "id") ?? ""
        guard !id.isEmpty else { throw ElementError(.invalidValue, "<folder> has no id") }
        let typeText = attribute(element, "type") ?? "sendreceive"
        guard let type = FolderType(configValue: typeText) else {
            throw ElementError(
                .unknownFolderType,
                "folder \"\(id)\": unknown type \"\(typeText)\" (sendreceive, sendonly, receiveonly or receiveencrypted)")
        }
        var devices: [DeviceID] = []
        var encrypted: [DeviceID: EncryptionPassword] = [:]
        for deviceElement in element.elements(forName: "device") {
            let text = attribute(deviceElement, "id") ?? ""
            let device: DeviceID
            do { device = try DeviceID(text) } catch {
                throw ElementError(.invalidDeviceID, "folder \"\(id)\": \(error)")
            }
            if let password = childText(deviceElement, "encryptionPassword"), !password.isEmpty {
                encrypted[device] = EncryptionPassword(password)
            } else {
                devices.append(device)
            }
        }
        func int(_ text: String?, _ name: String, default value: Int) throws(ElementError) -> Int {
            guard let text, !text.isEmpty else { return value }
            guard let n = Int(text.trimmingCharacters(in: .whitespaces)) else {
                throw ElementError(.invalidValue, "folder \"\(id)\": \(name) \"\(text)\" is not a number")
            }
            return n
        }
        let versioning = element.elements(forName: "versioning").first
        var folder = FolderConfiguration(
            id: id, label: attribute(element, "label") ?? "", path: attribute(element, "path") ?? "",
            type: type, devices: devices,
            rescanIntervalS: try int(attribute(element, "rescanIntervalS"), "rescanIntervalS", default: 0),
            ignorePerms: attribute(element, "ignorePerms") == "true",
            versioningType: versioning.flatMap { attribute($0, "type") } ?? "",
            // Absent means 0 in syncthing (Go zero value), not the GUI's default of 10.
            maxConflicts: try int(childText(element, "maxConflicts"), "maxConflicts", default: 0),
            markerName: childText(element, "markerName").flatMap { $0.isEmpty ? nil : $0 } ?? ".stfolder",
            isPaused: childText(element, "paused") == "true")
        folder.encryptedDevices = encrypted
        folder.copyOwnershipFromParent = childText(element, "copyOwnershipFromParent") == "true"
        if let versioning {
            for param in versioning.elements(forName: "param") {
                if let key = attribute(param, "key") { folder.versioningParams[key] = attribute(param, "val") ?? "" }
            }
            folder.versioningPath = childText(versioning, "fsPath") ?? folder.versioningParams["versionsPath"] ?? ""
        }
        if let minimum = element.elements(forName: "minDiskFree").first, let value = Double(minimum.stringValue ?? "") {
            folder.minDiskFree = MinDiskFree(value: value, unit: attribute(minimum, "unit") ?? "%")
        }
        return folder
    }
}

/// An element-level problem, before the file and line are known.
struct ElementError: Error {
    let code: ConfigError.Code
    let message: String
    init(_ code: ConfigError.Code, _ message: String) {
        self.code = code
        self.message = message
    }
    func located(file: String, line: Int?) -> ConfigError { ConfigError(code, file: file, line: line, message) }
}

/// Line numbers of the top-level `<folder>` and `<device>` elements, and well-formedness with
/// the line of the first error (libxml2 through XMLParser reports it; XMLDocument does not).
struct ElementLines {
    var lines: [String: [Int]] = [:]

    func line(of name: String, index: Int) -> Int? {
        guard let list = lines[name], index < list.count else { return nil }
        return list[index]
    }

    static func scan(data: Data, path: String) throws(ConfigError) -> ElementLines {
        let parser = XMLParser(data: data)
        let delegate = Delegate()
        parser.delegate = delegate
        delegate.parser = parser
        // XMLParser on Linux can report success after libxml2 recovered from an error; any
        // reported error counts.
        if !parser.parse() || delegate.errorLine != nil || delegate.wrongRoot != nil {
            if let root = delegate.wrongRoot {
                throw ConfigError(.malformedXML, file: path, line: 1, "the root element must be <configuration>, not <\(root)>")
            }
            let line = delegate.errorLine ?? parser.lineNumber
            var reason = delegate.errorText ?? (parser.parserError as NSError?)?.localizedDescription ?? "parse error"
            // libxml2 calls a cut-off file "extra content at the end"; say what it is.
            if delegate.errorCode == 5 || delegate.errorCode == 77,
                data.range(of: Data("</configuration>".utf8)) == nil
            {
                reason = "the file ends before </configuration>: it was cut off (a full disk, an interrupted copy?)"
            }
            throw ConfigError(.malformedXML, file: path, line: max(line, 1), "not well-formed XML (\(reason))")
        }
        return ElementLines(lines: delegate.lines)
    }

    private final class Delegate: NSObject, XMLParserDelegate {
        weak var parser: XMLParser?
        var depth = 0
        var errorCode: Int?
        /// The root element's name when it is not `configuration` (parsing stops there).
        var wrongRoot: String?
        var lines: [String: [Int]] = [:]
        var errorLine: Int?
        var errorText: String?

        /// libxml2's xmlParserErrors, for the mistakes people make when editing config.xml by hand.
        static func explain(_ code: Int) -> String {
            switch code {
            case 4: return "the document is empty"
            case 5: return "extra content after the closing </configuration>"
            case 23: return "an entity reference is missing its ';' (write & as &amp;)"
            case 26, 27: return "unknown entity (write & as &amp;)"
            case 28, 29, 30, 89, 90, 104: return "an entity declared in the file (a DOCTYPE): config.xml takes none"
            case 38: return "'<' inside an attribute value (write &lt;)"
            case 39, 40, 41: return "an attribute value is not in quotes"
            case 68: return "a tag name is missing after '<' (write < as &lt;)"
            case 73: return "'>' expected"
            case 76: return "an opening and a closing tag do not match"
            case 77: return "the file ends before all tags are closed"
            default: return "libxml2 error \(code)"
            }
        }

        func parser(
            _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
            qualifiedName qName: String?, attributes attributeDict: [String: String] = [:]
        ) {
            depth += 1
            if depth == 1 && elementName != "configuration" {
                wrongRoot = elementName
                parser.abortParsing()
            }
            if depth == 2 { lines[elementName, default: []].append(parser.lineNumber) }
        }

        func parser(
            _ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?
        ) {
            depth -= 1
        }

        func parser(_ parser: XMLParser, parseErrorOccurred parseError: Error) {
            // abortParsing reports an error of its own: the wrong root is the story then.
            if errorLine == nil && wrongRoot == nil {
                errorLine = parser.lineNumber
                errorCode = (parseError as NSError).code
                errorText = Self.explain((parseError as NSError).code)
            }
        }
    }
}
