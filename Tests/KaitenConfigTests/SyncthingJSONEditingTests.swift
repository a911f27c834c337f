import Foundation
import KaitenProtocol
import Testing

@testable import KaitenConfig

/// syncthing's JSON objects written back into config.xml: only the keys that changed, where
/// syncthing keeps them, with their types checked; the rest of the file byte for byte.
struct SyncthingJSONEditingTests {
    static func config() throws -> ConfigFile { try ConfigFile.parse(data: try ConfigFileTests.fixture(), path: "config.xml") }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test func aFolderSentBackWithOneChangeChangesOnlyThatKey() throws {
        let config = try Self.config()
        let before = config.serialized()
        var folder = try #require((config.syncthingJSON()["folders"] as? [[String: Any]])?.first { $0["id"] as? String == "photos" })
        // Through JSON, as a client sends it.
        folder = try Self.json(String(decoding: try JSONSerialization.data(withJSONObject: folder), as: UTF8.self))
        folder["label"] = "Pictures"
        folder["maxConflicts"] = 3
        try config.patchFolder(id: "photos", with: folder)
        let after = config.serialized()
        let changed = zip(before.split(separator: "\n"), after.split(separator: "\n")).filter { $0 != $1 }
        #expect(before.split(separator: "\n").count == after.split(separator: "\n").count, "no line added or removed")
        #expect(changed.count == 2, "\(changed)")
        #expect(try #require(config.folder(id: "photos")).label == "Pictures")
        #expect(try #require(config.folder(id: "photos")).maxConflicts == 3)
        // A config of 1.19.2 does not gain 2.x's keys from a whole object sent back.
        #expect(!after.contains("xattrFilter") && !after.contains("blockIndexing"))
        let reread = try ConfigFile.parse(data: Data(after.utf8), path: "config.xml")
        #expect(reread.folder(id: "photos")?.label == "Pictures")
    }

    @Test func booleansNumbersListsAndNestedObjectsGoWhereSyncthingKeepsThem() throws {
        let config = try Self.config()
        let peer = try #require(config.devices.first { $0.id != config.folders[0].devices.first })
        try config.patchDevice(
            id: peer.id, with: try Self.json(#"{"paused": true, "name": "nas <2>", "addresses": ["tcp://127.0.0.1:22001", "dynamic"], "maxRecvKbps": 100}"#))
        let device = try #require(config.device(id: peer.id))
        #expect(device.isPaused && device.name == "nas <2>" && device.addresses == ["tcp://127.0.0.1:22001", "dynamic"])
        let rendered = try #require((config.syncthingJSON()["devices"] as? [[String: Any]])?.first { $0["deviceID"] as? String == peer.id.description })
        #expect(rendered["maxRecvKbps"] as? Int == 100)
        try config.patchFolder(id: "photos", with: try Self.json(#"{"versioning": {"type": "simple", "params": {"keep": "7"}}, "minDiskFree": {"value": 5, "unit": "%"}}"#))
        let folder = try #require((config.syncthingJSON()["folders"] as? [[String: Any]])?.first { $0["id"] as? String == "photos" })
        let versioning = try #require(folder["versioning"] as? [String: Any])
        #expect(versioning["type"] as? String == "simple" && (versioning["params"] as? [String: String]) == ["keep": "7"])
        #expect((folder["minDiskFree"] as? [String: Any])?["value"] as? Int == 5)
        _ = try ConfigFile.parse(data: Data(config.serialized().utf8), path: "config.xml")
    }

    @Test func aValueOfTheWrongTypeOrAnotherIDIsRefusedAndNamed() throws {
        let config = try Self.config()
        let before = config.serialized()
        for (object, named) in [
            (#"{"rescanIntervalS": "often"}"#, "rescanIntervalS"), (#"{"paused": 1}"#, "paused"), (#"{"label": false}"#, "label"),
            (#"{"devices": "all"}"#, "devices"), (#"{"id": "other"}"#, "other"),
        ] {
            #expect(throws: ConfigError.self) { try config.patchFolder(id: "photos", with: try Self.json(object)) }
            do {
                try config.patchFolder(id: "photos", with: try Self.json(object))
            } catch {
                #expect("\(error)".contains(named), "\(error)")
            }
        }
        #expect(throws: ConfigError.self) { try config.patchFolder(id: "nope", with: [:]) }
        // A refused edit of a single key changes nothing (each check comes before its write).
        #expect(config.serialized() == before)
        // Keys syncthing does not have are ignored, as its decoder ignores them.
        try config.patchFolder(id: "photos", with: try Self.json(#"{"colour": "blue"}"#))
        #expect(config.serialized() == before)
    }

    @Test func theGUISectionTakesTLSAsAnAttribute() throws {
        let config = try Self.config()
        try config.patchSection("gui", with: try Self.json(#"{"useTLS": true, "address": "127.0.0.1:9999"}"#))
        #expect(config.gui.useTLS && config.gui.address == "127.0.0.1:9999")
        #expect(config.serialized().contains("tls=\"true\""))
        #expect(throws: ConfigError.self) { try config.patchSection("ldap", with: [:]) }
    }

    @Test func aPasswordIsStoredAsABcryptHashAndCheckedAgainstIt() throws {
        let hash = try PasswordHash.make("correct horse")
        #expect(PasswordHash.isHash(hash) && hash.hasPrefix("$2a$10$"))
        #expect(PasswordHash.matches("correct horse", hash: hash))
        #expect(!PasswordHash.matches("correct horsf", hash: hash))
        #expect(!PasswordHash.matches("correct horse", hash: "correct horse"))
        #expect(try PasswordHash.make("p") != PasswordHash.make("p"), "a fresh salt each time")
    }
}
