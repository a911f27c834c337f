import Foundation
import KaitenProtocol
import KaitenTestSupport
import Testing

@testable import KaitenConfig

@Suite(.timeLimit(.minutes(5)))
struct ConfigFileTests {
    static let peer = try! DeviceID("LXONAJ2-BUJHTRL-4AZYOG4-5H4JWNG-XA4OJHO-JEGBUIY-D5N2DL5-KCJ33AQ")
    static let other = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")

    static func fixture() throws -> Data {
        let url = try #require(Bundle.module.url(forResource: "Fixtures/syncthing-written", withExtension: "xml"))
        return try Data(contentsOf: url)
    }

    @Test func syncthingWrittenConfigRoundTripsByteForByte() throws {
        let data = try Self.fixture()
        let config = try ConfigFile.parse(data: data, path: "config.xml")
        #expect(config.serialized() == String(decoding: data, as: UTF8.self))
    }

    @Test func readsTheModelledFields() throws {
        let config = try ConfigFile.parse(data: try Self.fixture(), path: "config.xml")
        #expect(config.version == 36)
        let folder = try #require(config.folder(id: "photos"))
        #expect(folder.label == "Photos \"2026\"")
        #expect(folder.type == .receiveonly)
        #expect(folder.path == "/tmp/fx/data")
        #expect(folder.versioningType == "simple")
        #expect(folder.maxConflicts == 10)
        #expect(folder.markerName == ".stfolder")
        #expect(folder.devices.contains(Self.peer))
        let device = try #require(config.device(id: Self.peer))
        #expect(device.name == "laptop & <nas>")
        #expect(device.compression == .never)
        #expect(device.addresses == ["tcp://127.0.0.1:22999"])
        #expect(config.gui.address == "127.0.0.1:8384")
        #expect(config.options.listenAddresses == ["default"])
        #expect(config.options.tcpListenAddresses == ["tcp://0.0.0.0:22000"])
    }

    @Test func editsKeepEverythingElseInPlace() throws {
        var text = String(decoding: try Self.fixture(), as: UTF8.self)
        // Elements and attributes Kaiten does not model, in odd places, must survive edits.
        text = text.replacingOccurrences(
            of: "<ldap></ldap>", with: "<ldap></ldap>\n    <!-- kept -->\n    <future flavour=\"x\">y</future>")
        text = text.replacingOccurrences(of: "<order>random</order>", with: "<order>random</order><zz a=\"1\"></zz>")
        let config = try ConfigFile.parse(data: Data(text.utf8), path: "config.xml")
        try config.addDevice(DeviceConfiguration(id: Self.other, name: "nas", addresses: ["tcp://10.0.0.2:22000"]))
        try config.shareFolder(id: "photos", with: Self.other)
        let out = config.serialized()
        #expect(out.contains("<ldap></ldap>\n    <!-- kept -->\n    <future flavour=\"x\">y</future>"))
        #expect(out.contains("<order>random</order><zz a=\"1\"></zz>"))
        let reread = try ConfigFile.parse(data: Data(out.utf8), path: "config.xml")
        #expect(reread.device(id: Self.other)?.addresses == ["tcp://10.0.0.2:22000"])
        #expect(reread.folder(id: "photos")?.devices.contains(Self.other) == true)

        // Removing what was added gives back the file we started from.
        try reread.removeDevice(Self.other)
        #expect(reread.serialized() == text)
    }

    /// Syncthing's untrusted devices. A folder device entry with an `<encryptionPassword>` is an
    /// encrypted share: not among the folder's plain devices (code that knows nothing of
    /// encryption shares nothing with it), its password kept but never shown; sharing it in
    /// plain text on top is refused. A device marked `<untrusted>` without a password on the
    /// folder's entry is refused, named, and not shared at all. The file is unchanged.
    @Test(arguments: [false, true]) func aDeviceMeantToSeeCiphertextIsNeverSharedPlain(deviceLevel: Bool) throws {
        var text = String(decoding: try Self.fixture(), as: UTF8.self)
        let entry = "<device id=\"\(Self.peer.description)\" introducedBy=\"\">\n            <encryptionPassword></encryptionPassword>"
        if deviceLevel {
            let marked = text.replacingOccurrences(of: "<untrusted>false</untrusted>", with: "<untrusted>true</untrusted>", options: [], range: text.range(of: "<untrusted>false</untrusted>"))
            text = marked
        } else {
            #expect(text.contains(entry))
            text = text.replacingOccurrences(of: entry, with: entry.replacingOccurrences(of: "<encryptionPassword></encryptionPassword>", with: "<encryptionPassword>s3cret</encryptionPassword>"))
        }
        let config = try ConfigFile.parse(data: Data(text.utf8), path: "config.xml")
        let folder = try #require(config.folder(id: "photos"))
        #expect(!folder.devices.contains(Self.peer))
        if deviceLevel {
            #expect(folder.untrustedDevices == [Self.peer] && folder.encryptedDevices.isEmpty && !folder.isShared(with: Self.peer))
            let refusals = config.sharingRefusals
            #expect(refusals.count == 1 && refusals[0].contains("folder \"photos\" is shared with \(Self.peer.shortDescription)"), "\(refusals)")
        } else {
            #expect(folder.untrustedDevices.isEmpty && folder.isShared(with: Self.peer))
            #expect(folder.encryptedDevices[Self.peer]?.text == "s3cret")
            #expect("\(folder)".contains("s3cret") == false, "a folder's description shows no password")
            #expect(config.sharingRefusals.isEmpty)
            // The same password again changes nothing; another one is refused.
            try config.shareFolder(id: "photos", with: Self.peer, password: EncryptionPassword("s3cret"))
            #expect { try config.shareFolder(id: "photos", with: Self.peer, password: EncryptionPassword("other")) } throws: {
                ($0 as? ConfigError)?.code == .untrustedDevice
            }
        }
        #expect { try config.shareFolder(id: "photos", with: Self.peer) } throws: { ($0 as? ConfigError)?.code == .untrustedDevice }
        #expect(config.serialized() == text)
    }

    /// Sharing encrypted writes the password on the folder's device entry, as syncthing keeps
    /// it, escaped; a folder added with an encrypted device keeps it too.
    @Test func anEncryptedShareIsWrittenWithItsPassword() throws {
        let config = try ConfigFile.parse(data: try Self.fixture(), path: "config.xml")
        try config.unshareFolder(id: "photos", from: Self.peer)
        try config.shareFolder(id: "photos", with: Self.peer, password: EncryptionPassword("pw & <x>"))
        var added = FolderConfiguration(id: "docs", label: "", path: "/srv/docs", type: .sendreceive, devices: [])
        added.encryptedDevices = [Self.peer: EncryptionPassword("another")]
        try config.addFolder(added)
        let reread = try ConfigFile.parse(data: Data(config.serialized().utf8), path: "config.xml")
        let folder = try #require(reread.folder(id: "photos"))
        #expect(folder.encryptedDevices[Self.peer]?.text == "pw & <x>" && !folder.devices.contains(Self.peer))
        #expect(reread.folder(id: "docs")?.encryptedDevices[Self.peer]?.text == "another")
        #expect(reread.folder(id: "docs")?.devices.contains(Self.peer) == false)
    }

    @Test func addedFolderSpellsOutEveryField() throws {
        let config = try ConfigFile.parse(data: try Self.fixture(), path: "config.xml")
        try config.addFolder(
            FolderConfiguration(id: "docs", label: "Docs", path: "/srv/docs", type: .receiveonly, devices: [Self.peer]))
        let out = config.serialized()
        let reread = try ConfigFile.parse(data: Data(out.utf8), path: "config.xml")
        let folder = try #require(reread.folder(id: "docs"))
        #expect(folder.type == .receiveonly)
        #expect(folder.maxConflicts == 10)
        #expect(folder.rescanIntervalS == 3600)
        for field in ["<maxConflicts>10</maxConflicts>", "<markerName>.stfolder</markerName>", "<paused>false</paused>",
            "<weakHashThresholdPct>25</weakHashThresholdPct>", "<maxConcurrentWrites>2</maxConcurrentWrites>"]
        {
            #expect(out.contains(field))
        }
        // The new folder sits after the existing one, indented like it.
        #expect(out.contains("</folder>\n    <folder id=\"docs\""))
        // syncthing's default (issue 36, item 29): a home moved back to syncthing keeps its watcher.
        let added = try #require(out.range(of: "<folder id=\"docs\"").map { String(out[$0.lowerBound...].prefix(400)) })
        #expect(added.contains("fsWatcherEnabled=\"true\""), "\(added)")
    }

    @Test func listenAddressesAreReplacedInPlace() throws {
        let config = try ConfigFile.parse(data: try Self.fixture(), path: "config.xml")
        config.setListenAddresses(["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"])
        let out = config.serialized()
        #expect(
            out.contains(
                "<options>\n        <listenAddress>tcp://127.0.0.1:1</listenAddress>\n        <listenAddress>tcp://127.0.0.1:2</listenAddress>\n        <globalAnnounceServer>"
            ))
    }

    struct BadInput: CustomTestStringConvertible, Sendable {
        let label: String
        let xml: String
        let code: ConfigError.Code
        let line: Int?
        var testDescription: String { label }
    }

    @Test(arguments: [
        BadInput(label: "malformed XML", xml: "<configuration version=\"36\">\n  <folder id=\"a\">\n</configuration>\n", code: .malformedXML, line: 3),
        BadInput(label: "not a config", xml: "<html></html>", code: .malformedXML, line: 1),
        // An external entity would be expanded by libxml2 (a file read into the config); the
        // DOCTYPE is refused at its line (issue 36, item 30).
        BadInput(
            label: "a DOCTYPE with an external entity",
            xml: "<?xml version=\"1.0\"?>\n<!DOCTYPE configuration [<!ENTITY e SYSTEM \"file:///etc/passwd\">]>\n<configuration version=\"36\"><gui><address>&e;</address></gui></configuration>",
            code: .malformedXML, line: 2),
        BadInput(label: "future version", xml: "<configuration version=\"99\"></configuration>", code: .unsupportedVersion, line: 1),
        BadInput(
            label: "unknown folder type",
            xml: "<configuration version=\"36\">\n    <folder id=\"a\" path=\"/x\" type=\"mirror\"></folder>\n</configuration>",
            code: .unknownFolderType, line: 2),
        BadInput(
            label: "duplicate folder ID",
            xml: "<configuration version=\"36\">\n    <folder id=\"a\" path=\"/x\"></folder>\n\n    <folder id=\"a\" path=\"/y\"></folder>\n</configuration>",
            code: .duplicateFolderID, line: 4),
        BadInput(
            label: "invalid device ID",
            xml: "<configuration version=\"36\">\n    <device id=\"NOT-A-DEVICE\"></device>\n</configuration>",
            code: .invalidDeviceID, line: 2),
        BadInput(
            label: "device ID typo in a folder",
            xml: "<configuration version=\"36\">\n    <folder id=\"a\" path=\"/x\">\n        <device id=\"P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ3\"></device>\n    </folder>\n</configuration>",
            code: .invalidDeviceID, line: 2),
    ])
    func badInputNamesFileAndLine(_ bad: BadInput) {
        let error = #expect(throws: ConfigError.self) {
            try ConfigFile.parse(data: Data(bad.xml.utf8), path: "/h/config.xml")
        }
        #expect(error?.code == bad.code)
        #expect(error?.line == bad.line)
        #expect(error?.description.hasPrefix("/h/config.xml:") == true)
    }

    @Test func duplicateAdditionsAreRefused() throws {
        let config = try ConfigFile.parse(data: try Self.fixture(), path: "config.xml")
        #expect(throws: ConfigError.self) { try config.addDevice(DeviceConfiguration(id: Self.peer)) }
        #expect(throws: ConfigError.self) { try config.addFolder(FolderConfiguration(id: "photos", path: "/x")) }
        #expect(throws: ConfigError.self) {
            try config.addFolder(FolderConfiguration(id: "new", path: "/x", devices: [Self.other]))
        }
        #expect(throws: ConfigError.self) { try config.shareFolder(id: "nope", with: Self.peer) }
        #expect(throws: ConfigError.self) { try config.removeDevice(Self.other) }
    }

    @Test func writeIsAtomicAndLeavesNoTemporaryFiles() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("config.xml")
        try Self.fixture().write(to: URL(fileURLWithPath: path))
        let config = try ConfigFile.load(path: path)
        try config.addDevice(DeviceConfiguration(id: Self.other, name: "nas"))
        try config.write()
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["config.xml"])
        #expect(try ConfigFile.load(path: path).device(id: Self.other)?.name == "nas")
    }

    @Test func newConfigIsLoopbackFriendlyAndSilent() throws {
        let id = try DeviceID(bytes: Array(0..<32))
        let config = try ConfigFile.makeNew(
            path: "config.xml", myID: id, name: "box <1>", listenAddress: "tcp://0.0.0.0:22000", apiKey: "k")
        #expect(config.options.listenAddresses == ["tcp://0.0.0.0:22000"])
        #expect(!config.options.globalAnnounceEnabled)
        #expect(!config.options.localAnnounceEnabled)
        #expect(!config.options.relaysEnabled)
        #expect(!config.options.natEnabled)
        #expect(config.options.urAccepted == -1)
        #expect(config.device(id: id)?.name == "box <1>")
        // Kaiten's own output also round-trips exactly.
        let again = try ConfigFile.parse(data: Data(config.serialized().utf8), path: "config.xml")
        #expect(again.serialized() == config.serialized())
    }
}

@Suite(.timeLimit(.minutes(5)))
struct HomeTests {
    @Test func resolutionOrder() {
        #expect(Home.resolve(explicit: "/a", environment: ["KAITEN_HOME": "/b"]).path == "/a")
        #expect(Home.resolve(explicit: nil, environment: ["KAITEN_HOME": "/b", "XDG_CONFIG_HOME": "/c"]).path == "/b")
        #expect(Home.resolve(explicit: nil, environment: ["XDG_CONFIG_HOME": "/c", "HOME": "/h"]).path == "/c/kaiten")
        #expect(Home.resolve(explicit: nil, environment: ["HOME": "/h"]).path == "/h/.config/kaiten")
        #expect(Home(path: "/x").selectionPath(folderID: "photos") == "/x/selections/photos.txt")
    }
}

/// A home written by syncthing 2.x (config version 52, fields 1.19.2 never had) is read,
/// edited and written back as 2.x expects (issue 15, item 6).
@Suite(.timeLimit(.minutes(5)))
struct Syncthing2ConfigTests {
    static let peer = try! DeviceID("LXONAJ2-BUJHTRL-4AZYOG4-5H4JWNG-XA4OJHO-JEGBUIY-D5N2DL5-KCJ33AQ")
    static let other = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")

    /// Written by `syncthing-2 generate` and then 2.1.3's REST API (a device named with `&`,
    /// `<` and NFC text; a folder label with NFD and NFC spellings of "café").
    static func fixture() throws -> Data {
        let url = try #require(Bundle.module.url(forResource: "Fixtures/syncthing2-written", withExtension: "xml"))
        return try Data(contentsOf: url)
    }

    @Test func roundTripsByteForByte() throws {
        let data = try Self.fixture()
        let config = try ConfigFile.parse(data: data, path: "config.xml")
        #expect(config.version == 52)
        #expect(Array(config.serialized().utf8) == [UInt8](data))
        let label = try #require(config.folder(id: "photos")?.label)
        #expect(Array(label.utf8) == Array("Photos \"2026\" cafe\u{301} caf\u{E9}".utf8))
    }

    @Test func newDevicesAndFoldersCarryWhatVersion52Expects() throws {
        let config = try ConfigFile.parse(data: try Self.fixture(), path: "config.xml")
        try config.addDevice(DeviceConfiguration(id: Self.other, name: "nas", addresses: ["tcp://10.0.0.2:22000"]))
        try config.addFolder(FolderConfiguration(id: "docs", label: "docs", path: "/srv/docs", devices: [Self.other]))
        let out = config.serialized()
        let reread = try ConfigFile.parse(data: Data(out.utf8), path: "config.xml")
        #expect(reread.version == 52)
        #expect(reread.device(id: Self.other)?.addresses == ["tcp://10.0.0.2:22000"])
        #expect(reread.folder(id: "docs")?.devices == [Self.other])
        // The new device and folder have every field 2.x's defaults list, in its order.
        let device = try #require(out.range(of: "<device id=\"\(Self.other)\" name="))
        let deviceText = String(out[device.lowerBound...].prefix(800))
        #expect(deviceText.contains("<numConnections>0</numConnections>"))
        let folder = try #require(out.range(of: "<folder id=\"docs\""))
        let folderText = String(out[folder.lowerBound...].prefix(3000))
        for field in ["<syncXattrs>false</syncXattrs>", "<blockIndexing>true</blockIndexing>", "<maxSingleEntrySize>1024</maxSingleEntrySize>", "fsWatcherTimeoutS=\"0\""] {
            #expect(folderText.contains(field), "\(field)")
        }
        #expect(!folderText.contains("weakHashThresholdPct"), "a 1.19.2 field 2.x dropped")
        #expect(folderText.contains("<maxConflicts>10</maxConflicts>"))
    }

    @Test func aVersionNewerThanKaitenKnowsIsRefusedWithTheFileAndLine() throws {
        let text = String(decoding: try Self.fixture(), as: UTF8.self).replacingOccurrences(
            of: "<configuration version=\"52\">", with: "<configuration version=\"60\">")
        #expect {
            _ = try ConfigFile.parse(data: Data(text.utf8), path: "config.xml")
        } throws: { error in
            "\(error)".contains("config.xml:1") && "\(error)".contains("version 60")
        }
    }
}

/// Bad config.xml bytes: a one-line error naming the file (and line), never a crash, nothing
/// written (issue 10, item 5).
@Suite(.timeLimit(.minutes(5)))
struct ConfigBadInputTests {
    static func text() throws -> Data { try ConfigFileTests.fixture() }

    static func error(_ data: Data) -> String? {
        do {
            _ = try ConfigFile.parse(data: data, path: "/h/config.xml")
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// A device's `<numConnections>` (syncthing 1.25+) is read; absent is 0 (the default); a
    /// value that is not a count is refused, naming the file and the device.
    @Test func aDevicesConnectionCountIsReadAndCheckedWhereSet() throws {
        let whole = String(decoding: try Self.text(), as: UTF8.self)
        #expect(try ConfigFile.parse(data: Data(whole.utf8), path: "/h/config.xml").device(id: ConfigFileTests.peer)?.numConnections == 0)
        func withCount(_ text: String) -> Data {
            Data(whole.replacingOccurrences(of: "<paused>false</paused>", with: "<paused>false</paused><numConnections>\(text)</numConnections>").utf8)
        }
        #expect(whole.contains("<paused>false</paused>"))
        let three = try ConfigFile.parse(data: withCount("3"), path: "/h/config.xml")
        #expect(three.device(id: ConfigFileTests.peer)?.numConnections == 3)
        for bad in ["three", "-1", "2.5"] {
            let message = try #require(Self.error(withCount(bad)), "accepted numConnections \(bad)")
            #expect(message.contains("/h/config.xml") && message.contains("numConnections \"\(bad)\""), "\(message)")
        }
    }

    /// A config.xml that is a directory says so, not "permissions?" (issue 36, item 30).
    @Test func aConfigThatIsADirectorySaysSo() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cfgdir")
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.file("config.xml"), withIntermediateDirectories: true)
        #expect {
            _ = try ConfigFile.load(path: dir.file("config.xml"))
        } throws: { error in
            "\(error)".contains("is a directory") && !"\(error)".contains("permissions?")
        }
    }

    @Test func theCommonWaysAFileGoesBadEachGetAClearError() throws {
        let whole = try Self.text()
        let cases: [(Data, String)] = [
            (Data(), "is empty"),
            (Data("  \n\t\n".utf8), "is empty"),
            (whole.prefix(whole.count / 2), "not well-formed XML"),
            (Data("<configuration version=\"36\">\n    <device id=\"x\">\n".utf8), "cut off"),
            (whole.prefix(200) + Data([0xC3, 0x28]) + whole.dropFirst(200), "not UTF-8"),
            (Data([0x00, 0xFF, 0x13, 0x37] + Array(repeating: 0x41, count: 100)), "not XML"),
            (Data("<settings version=\"36\"></settings>\n".utf8), "must be <configuration>, not <settings>"),
            (Data("<configuration version=\"36\">\0</configuration>".utf8), "NUL byte"),
            (Data(count: ConfigFile.maximumSize + 1), "MiB: not a syncthing config.xml"),
        ]
        for (data, expected) in cases {
            let message = try #require(Self.error(data), "accepted: \(expected)")
            #expect(message.contains("/h/config.xml"), "\(message)")
            #expect(message.contains(expected), "\(message)")
            #expect(!message.contains("\n"), "one line: \(message)")
        }
    }

    /// Random damage (seeded; KAITEN_TEST_SEED replays a run): every input is accepted or refused
    /// with an error, the process never crashes.
    @Test func fuzzedBytesNeverCrash() throws {
        let whole = [UInt8](try Self.text())
        // The seed is printed first: a crash takes the whole test process, failure message and all.
        var rng = SplitMix64.forTest("fuzzedBytesNeverCrash")
        var refused = 0
        for round in 0..<300 {
            var bytes = whole
            switch round % 4 {
            case 0: bytes = Array(bytes.prefix(Int.random(in: 0..<bytes.count, using: &rng)))
            case 1:
                for _ in 0..<Int.random(in: 1...20, using: &rng) {
                    bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                }
            case 2:
                let at = Int.random(in: 0..<bytes.count, using: &rng)
                bytes.insert(contentsOf: [UInt8]("<&\"'>]]>".utf8).shuffled(using: &rng), at: at)
            default:
                bytes = (0..<Int.random(in: 0..<2000, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            }
            if Self.error(Data(bytes)) != nil { refused += 1 }
        }
        #expect(refused > 100, "most damaged inputs are refused (the seed is printed above)")
    }
}
