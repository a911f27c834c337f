import Foundation

#if canImport(FoundationXML)
import FoundationXML
#endif

/// config.xml as syncthing's REST API shows it (`GET /rest/config`): the same objects, key
/// names and value types as syncthing answers, every key of 1.19.2 and of 2.1.3, so tools
/// written for either generation decode Kaiten's.
extension ConfigFile {
    /// The whole configuration: `version`, `folders`, `devices`, `gui`, `ldap`, `options`,
    /// `remoteIgnoredDevices`, `defaults`.
    public func syncthingJSON() -> [String: Any] {
        let schema = SyncthingConfigSchema.shared
        let defaults = root.elements(forName: "defaults").first
        return [
            "version": version,
            "folders": root.elements(forName: "folder").map { schema.render($0, as: schema.folder) },
            "devices": root.elements(forName: "device").map { schema.render($0, as: schema.device) },
            "gui": schema.render(root.elements(forName: "gui").first, as: schema.gui),
            "ldap": schema.render(root.elements(forName: "ldap").first, as: schema.ldap),
            "options": schema.render(root.elements(forName: "options").first, as: schema.options),
            "remoteIgnoredDevices": root.elements(forName: "remoteIgnoredDevice").map { schema.render($0, as: schema.remoteIgnoredDevice) },
            "defaults": [
                "folder": schema.render(defaults?.elements(forName: "folder").first, as: schema.folder),
                "device": schema.render(defaults?.elements(forName: "device").first, as: schema.device),
                "ignores": ["lines": defaults?.elements(forName: "ignores").first?.elements(forName: "line").map { $0.stringValue ?? "" } ?? []],
            ],
        ]
    }
}

/// Each object's keys with the type syncthing gives the value (a list of one element: a list
/// of such elements), and where each key lives in config.xml.
struct SyncthingConfigSchema: @unchecked Sendable {  // read-only after init
    static let shared = SyncthingConfigSchema()

    let folder: [String: Any]
    let device: [String: Any]
    let gui: [String: Any]
    let ldap: [String: Any]
    let options: [String: Any]
    let remoteIgnoredDevice: [String: Any]

    private init() {
        let all = (try? JSONSerialization.jsonObject(with: Data(Self.shapes.utf8))) as? [String: [String: Any]] ?? [:]
        folder = all["folder"] ?? [:]
        device = all["device"] ?? [:]
        gui = all["gui"] ?? [:]
        ldap = all["ldap"] ?? [:]
        options = all["options"] ?? [:]
        remoteIgnoredDevice = all["remoteIgnoredDevice"] ?? [:]
    }

    /// Where a key is in config.xml when not under its own name: `@` an attribute; a list's
    /// elements are named in the singular.
    static let xmlNames: [String: String] = [
        "deviceID": "@id", "useTLS": "@tls", "apiKey": "apikey", "urUniqueId": "urUniqueID",
        "devices": "device", "addresses": "address", "allowedNetworks": "allowedNetwork", "ignoredFolders": "ignoredFolder",
        "listenAddresses": "listenAddress", "globalAnnounceServers": "globalAnnounceServer", "alwaysLocalNets": "alwaysLocalNet",
        "unackedNotificationIDs": "unackedNotificationID", "stunServers": "stunServer", "featureFlags": "featureFlag",
        "entries": "entry",
    ]

    /// `element` in the shape of `schema` (an absent element: every key at its zero value).
    func render(_ element: XMLElement?, as schema: [String: Any]) -> [String: Any] {
        var object: [String: Any] = [:]
        for (key, shape) in schema {
            let name = Self.xmlNames[key] ?? key
            if key == "params", let element {
                // Versioning's parameters: <param key="…" val="…"/>.
                var params: [String: String] = [:]
                for param in element.elements(forName: "param") {
                    if let k = param.attribute(forName: "key")?.stringValue { params[k] = param.attribute(forName: "val")?.stringValue ?? "" }
                }
                object[key] = params
                continue
            }
            switch shape {
            case let list as [Any]:
                let children = element?.elements(forName: name) ?? []
                if let item = list.first as? [String: Any] {
                    object[key] = children.map { render($0, as: item) }
                } else {
                    object[key] = children.map { Self.value($0.stringValue ?? "", like: list.first ?? "") }
                }
            case let nested as [String: Any]:
                object[key] = render(element?.elements(forName: name).first, as: nested)
            default:
                let text: String?
                if name.hasPrefix("@") {
                    text = element?.attribute(forName: String(name.dropFirst()))?.stringValue
                } else if let attribute = element?.attribute(forName: name)?.stringValue {
                    text = attribute
                } else if let child = element?.elements(forName: name).first {
                    text = child.stringValue
                } else if key == "value" {
                    // minDiskFree and the like: <minDiskFree unit="%">1</minDiskFree>.
                    text = element?.stringValue
                } else {
                    text = nil
                }
                object[key] = Self.value(text ?? "", like: shape)
            }
        }
        return object
    }

    /// `text` as the type `shape` names (`bool`, `int`, `string`), as Go reads it from XML
    /// (an empty number is 0).
    static func value(_ text: String, like shape: Any) -> Any {
        switch shape as? String {
        case "bool": return ConfigFile.flagValue(text)
        case "int":
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            if let integer = Int(trimmed) { return integer }
            return Double(trimmed) ?? 0
        default: return text
        }
    }

    /// syncthing's objects (the keys 2.1.3's `GET /rest/config` answers with, and those only
    /// 1.19.2 has), each key with its value's type.
    static let shapes = """
        {"folder":{"id":"string","label":"string","filesystemType":"string","path":"string","type":"string","devices":[{"deviceID":"string","introducedBy":"string","encryptionPassword":"string"}],\
        "group":"string","rescanIntervalS":"int","fsWatcherEnabled":"bool","fsWatcherDelayS":"int","fsWatcherTimeoutS":"int","ignorePerms":"bool","autoNormalize":"bool",\
        "minDiskFree":{"value":"int","unit":"string"},"versioning":{"type":"string","params":{},"cleanupIntervalS":"int","fsPath":"string","fsType":"string"},"copiers":"int",\
        "pullerMaxPendingKiB":"int","hashers":"int","order":"string","ignoreDelete":"bool","scanProgressIntervalS":"int","pullerPauseS":"int","pullerDelayS":"int",\
        "maxConflicts":"int","disableSparseFiles":"bool","paused":"bool","markerName":"string","copyOwnershipFromParent":"bool","modTimeWindowS":"int",\
        "maxConcurrentWrites":"int","disableFsync":"bool","blockPullOrder":"string","copyRangeMethod":"string","caseSensitiveFS":"bool","junctionsAsDirs":"bool","disableTempIndexes":"bool","weakHashThresholdPct":"int",\
        "syncOwnership":"bool","sendOwnership":"bool","syncXattrs":"bool","sendXattrs":"bool","blockIndexing":"bool",\
        "xattrFilter":{"entries":[{"match":"string","permit":"bool"}],"maxSingleEntrySize":"int","maxTotalSize":"int"}},\
        "device":{"deviceID":"string","name":"string","addresses":["string"],"compression":"string","certName":"string","introducer":"bool","skipIntroductionRemovals":"bool",\
        "introducedBy":"string","paused":"bool","allowedNetworks":["string"],"autoAcceptFolders":"bool","maxSendKbps":"int","maxRecvKbps":"int",\
        "ignoredFolders":[{"time":"string","id":"string","label":"string"}],"maxRequestKiB":"int","untrusted":"bool","remoteGUIPort":"int","numConnections":"int","group":"string"},\
        "gui":{"enabled":"bool","address":"string","unixSocketPermissions":"string","user":"string","password":"string","authMode":"string","metricsWithoutAuth":"bool",\
        "useTLS":"bool","apiKey":"string","insecureAdminAccess":"bool","theme":"string","insecureSkipHostcheck":"bool","insecureAllowFrameLoading":"bool",\
        "sendBasicAuthPrompt":"bool","sessionCookieDurationS":"int","sessionCookiePath":"string","debugging":"bool"},\
        "ldap":{"address":"string","bindDN":"string","transport":"string","insecureSkipVerify":"bool","searchBaseDN":"string","searchFilter":"string"},\
        "options":{"listenAddresses":["string"],"globalAnnounceServers":["string"],"globalAnnounceEnabled":"bool","localAnnounceEnabled":"bool",\
        "localAnnouncePort":"int","localAnnounceMCAddr":"string","maxSendKbps":"int","maxRecvKbps":"int","reconnectionIntervalS":"int","relaysEnabled":"bool",\
        "relayReconnectIntervalM":"int","startBrowser":"bool","natEnabled":"bool","natLeaseMinutes":"int","natRenewalMinutes":"int","natTimeoutSeconds":"int",\
        "urAccepted":"int","urSeen":"int","urUniqueId":"string","urURL":"string","urPostInsecurely":"bool","urInitialDelayS":"int","autoUpgradeIntervalH":"int",\
        "upgradeToPreReleases":"bool","keepTemporariesH":"int","progressUpdateIntervalS":"int","limitBandwidthInLan":"bool",\
        "minHomeDiskFree":{"value":"int","unit":"string"},"releasesURL":"string","alwaysLocalNets":["string"],"overwriteRemoteDeviceNamesOnConnect":"bool",\
        "tempIndexMinBlocks":"int","unackedNotificationIDs":["string"],"trafficClass":"int","setLowPriority":"bool","maxFolderConcurrency":"int","crURL":"string",\
        "crashReportingEnabled":"bool","stunKeepaliveStartS":"int","stunKeepaliveMinS":"int","stunServers":["string"],"maxConcurrentIncomingRequestKiB":"int",\
        "announceLANAddresses":"bool","sendFullIndexOnUpgrade":"bool","featureFlags":["string"],"auditEnabled":"bool","auditFile":"string",\
        "connectionLimitEnough":"int","connectionLimitMax":"int","connectionPriorityTcpLan":"int","connectionPriorityQuicLan":"int",\
        "connectionPriorityTcpWan":"int","connectionPriorityQuicWan":"int","connectionPriorityRelay":"int","connectionPriorityUpgradeThreshold":"int","cacheIgnoredFiles":"bool",\
        "databaseTuning":"string","insecureAllowOldTLSVersions":"bool","restartOnWakeup":"bool"},\
        "remoteIgnoredDevice":{"time":"string","deviceID":"string","name":"string","address":"string"}}
        """
}
