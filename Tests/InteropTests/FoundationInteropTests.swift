import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Kaiten's identity and config.xml against the real syncthing binary (1.19.2, and 2.x when
/// scripts/test runs the suites again with it).
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct FoundationInteropTests {
    func kaiten(_ args: [String]) throws -> ProcessResult { try KaitenCLI.run(args) }

    @Test func deviceIDOfAKaitenCertificateMatchesSyncthing() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = dir.file("home")
        let created = try kaiten(["init", "--home", home, "--name", "k"])
        #expect(created.status == 0, "\(created.stderr)")
        let ours = try kaiten(["id", "--home", home]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(ours == created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(try SyncthingInstance.deviceIDAsSyncthingSees(home: home) == ours)
    }

    @Test func aSyncthingHomeWorksUnchanged() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let syncthing = try SyncthingInstance.generate(in: dir.path)
        let theirs = try SyncthingInstance.deviceIDAsSyncthingSees(home: syncthing.home)
        let ours = try kaiten(["id", "--home", syncthing.home])
        #expect(ours.status == 0, "\(ours.stderr)")
        #expect(ours.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == theirs)
        let peers = try kaiten(["peer", "ls", "--home", syncthing.home, "--json"])
        #expect(peers.status == 0)
        #expect(peers.stdout.contains(theirs))
    }

    /// RSA, Ed25519 and PKCS#8 keys: syncthing and Kaiten derive the same ID, and both accept the pair.
    @Test(arguments: CertificateFactory.KeyType.allCases)
    func deviceIDOfEveryKeyTypeMatchesSyncthing(_ type: CertificateFactory.KeyType) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let syncthing = try SyncthingInstance.generate(in: dir.path)
        let (cert, key) = try CertificateFactory.make(type)
        try cert.write(toFile: syncthing.home + "/cert.pem", atomically: true, encoding: .utf8)
        try key.write(toFile: syncthing.home + "/key.pem", atomically: true, encoding: .utf8)
        let theirs = try SyncthingInstance.deviceIDAsSyncthingSees(home: syncthing.home)
        let ours = try kaiten(["id", "--home", syncthing.home])
        #expect(ours.status == 0, "\(ours.stderr)")
        #expect(ours.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == theirs)
    }

    /// A config.xml that syncthing itself wrote, with a folder and a device added over REST,
    /// reads and writes back byte for byte; a Kaiten edit and its undo leave it identical too.
    @Test func syncthingWrittenConfigRoundTrips() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let syncthing = try SyncthingInstance.generate(in: dir.path)
        let other = try DeviceID(bytes: Array(repeating: 7, count: 32))
        try await withSyncthing(syncthing) { st in
            try await st.addDevice(other, name: "Zoë's \"box\" & co", addresses: ["tcp://127.0.0.1:1"], compression: "never")
            try FileManager.default.createDirectory(atPath: dir.file("data"), withIntermediateDirectories: true)
            try await st.addFolder(
                id: "f1", path: dir.file("data"), type: "receiveonly", devices: [other],
                extra: ["label": "Label <1>", "versioning": ["type": "staggered", "params": ["maxAge": "0"]]])
        }
        let path = syncthing.home + "/config.xml"
        let original = try String(contentsOfFile: path, encoding: .utf8)
        #expect(original.contains("Label &lt;1&gt;"))
        let config = try ConfigFile.load(path: path)
        #expect(Array(config.serialized().utf8) == Array(original.utf8), "byte for byte, not String ==")
        #expect(config.folder(id: "f1")?.type == .receiveonly)
        #expect(config.folder(id: "f1")?.versioningType == "staggered")

        let extra = "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2"
        #expect(try kaiten(["peer", "add", "--home", syncthing.home, extra]).status == 0)
        #expect(try kaiten(["peer", "rm", "--home", syncthing.home, extra]).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(original.utf8))
    }

    /// syncthing 1.19.2 started on a home made entirely by Kaiten starts cleanly and reports
    /// the same device, devices and folders through its REST API.
    @Test func syncthingLoadsAHomeMadeByKaiten() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = dir.file("home")
        let port = try FreePort.next()
        let initialized = try kaiten(["init", "--home", home, "--name", "kaiten-made", "--listen", "tcp://127.0.0.1:\(port)"])
        #expect(initialized.status == 0, "\(initialized.stderr)")
        let myID = initialized.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let peer = "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2"
        #expect(
            try kaiten(["peer", "add", "--home", home, peer, "--name", "nas", "--address", "tcp://127.0.0.1:1"]).status
                == 0)
        let folderPath = dir.file("photos")
        let added = try kaiten([
            "folder", "add", "--home", home, "photos", "--path", folderPath, "--label", "Photos", "--type",
            "receiveonly", "--share", peer,
        ])
        #expect(added.status == 0, "\(added.stderr)")

        let syncthing = try SyncthingInstance.existing(home: home)
        try await withSyncthing(syncthing) { st in
            let status = try #require(try await st.get("/rest/system/status") as? [String: Any])
            #expect(status["myID"] as? String == myID)
            let listeners = status["connectionServiceStatus"] as? [String: Any]
            #expect(listeners?.keys.contains("tcp://127.0.0.1:\(port)") == true)

            let devices = try #require(try await st.get("/rest/config/devices") as? [[String: Any]])
            let byID = Dictionary(uniqueKeysWithValues: devices.map { ($0["deviceID"] as? String ?? "", $0) })
            #expect(byID[myID]?["name"] as? String == "kaiten-made")
            #expect(byID[peer]?["name"] as? String == "nas")
            #expect(byID[peer]?["addresses"] as? [String] == ["tcp://127.0.0.1:1"])

            let folders = try #require(try await st.get("/rest/config/folders") as? [[String: Any]])
            #expect(folders.count == 1)
            let folder = try #require(folders.first)
            #expect(folder["id"] as? String == "photos")
            #expect(folder["label"] as? String == "Photos")
            #expect(folder["path"] as? String == folderPath)
            #expect(folder["type"] as? String == "receiveonly")
            #expect(folder["maxConflicts"] as? Int == 10)
            #expect(folder["rescanIntervalS"] as? Int == 3600)
            let shared = Set((folder["devices"] as? [[String: Any]] ?? []).compactMap { $0["deviceID"] as? String })
            #expect(shared == [myID, peer])

            let options = try #require(try await st.get("/rest/config/options") as? [String: Any])
            #expect(options["globalAnnounceEnabled"] as? Bool == false)
            #expect(options["localAnnounceEnabled"] as? Bool == false)
            #expect(options["relaysEnabled"] as? Bool == false)
            #expect(options["natEnabled"] as? Bool == false)
            #expect(options["urAccepted"] as? Int == -1)

            // The folder is healthy: syncthing found the marker Kaiten made and scanned it.
            try await st.waitIdle(folder: "photos")
            let log = st.log
            #expect(!log.contains("Failed to"), "\(log)")
        }
        // And Kaiten still reads the home after syncthing has run on it.
        #expect(try kaiten(["folder", "ls", "--home", home]).status == 0)
    }

    /// `kaiten init --key-type ed25519|ecdsa`: the syncthing under test derives the same device ID
    /// from each certificate (issue 15, item 3).
    @Test(arguments: ["ed25519", "ecdsa"])
    func initMakesEachKeyTypeAndSyncthingAgreesOnTheID(_ keyType: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = dir.file("home")
        let created = try kaiten(["init", "--home", home, "--name", "k", "--key-type", keyType])
        #expect(created.status == 0, "\(created.stderr)")
        let key = try String(contentsOfFile: home + "/key.pem", encoding: .utf8)
        #expect(key.hasPrefix(keyType == "ed25519" ? "-----BEGIN PRIVATE KEY-----" : "-----BEGIN EC PRIVATE KEY-----"))
        let ours = try kaiten(["id", "--home", home]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try SyncthingInstance.deviceIDAsSyncthingSees(home: home) == ours)
        let bad = try kaiten(["init", "--home", dir.file("other"), "--key-type", "rsa"])
        #expect(bad.status == 64, "\(bad.stderr)")
    }

    /// A home the syncthing under test generated (2.x: config version 52, an Ed25519 identity) is
    /// used by Kaiten as it is, edited by `peer add` and `folder add`, and syncthing then starts
    /// on it without rewriting it: Kaiten wrote what that version expects (issue 15, item 6).
    @Test func aDroppedInHomeIsEditedAsItsSyncthingExpects() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let syncthing = try SyncthingInstance.generate(in: dir.path)
        let path = syncthing.home + "/config.xml"
        let version = try ConfigFile.load(path: path).version
        #expect(version == (SyncthingInstance.majorVersion >= 2 ? 52 : 36))
        let theirs = try SyncthingInstance.deviceIDAsSyncthingSees(home: syncthing.home)
        #expect(try kaiten(["id", "--home", syncthing.home]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == theirs)

        let peer = "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2"
        #expect(try kaiten(["peer", "add", "--home", syncthing.home, peer, "--name", "nas", "--address", "tcp://127.0.0.1:1"]).status == 0)
        let added = try kaiten(["folder", "add", "--home", syncthing.home, "photos", "--path", dir.file("photos"), "--share", peer])
        #expect(added.status == 0, "\(added.stderr)")
        let edited = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(try ConfigFile.load(path: path).version == version, "Kaiten keeps the version")

        try await withSyncthing(syncthing) { st in
            let folders = try #require(try await st.get("/rest/config/folders") as? [[String: Any]])
            #expect(folders.map { $0["id"] as? String } == ["photos"])
            let devices = try #require(try await st.get("/rest/config/devices") as? [[String: Any]])
            #expect(devices.contains { $0["deviceID"] as? String == peer && $0["name"] as? String == "nas" })
            try await st.waitIdle(folder: "photos")
        }
        let after = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(after == edited, "syncthing rewrote the config Kaiten edited:\n\(String(decoding: after, as: UTF8.self))")
    }
}
