import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Syncthing's untrusted devices (encrypted sharing) where the two sides disagree: a device
/// meant to see ciphertext never gets a plain name or byte, and a peer that wants a folder
/// exchanged in a way this device is not configured for is refused, naming the folder.
/// (Sharing that works: ``EncryptedSharingInteropTests``.)
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct UntrustedDeviceInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    /// Whether a verb's output says the peer and this device disagree on encryption: in
    /// syncthing's words when the peer closed first (1.19.2 sends no ClusterConfig then), or
    /// in Kaiten's when its own check refused the peer's ClusterConfig.
    static func saysEncryptionMismatch(_ text: String) -> Bool {
        text.contains("remote expects to exchange plain data, but is configured to be encrypted")
            || text.contains("disagree on which folders are encrypted")
    }

    /// Every file under `root` whose name or content holds `secret`.
    static func leaks(of secret: String, under root: String) -> [String] {
        var found: [String] = []
        let enumerator = FileManager.default.enumerator(atPath: root)
        while let relative = enumerator?.nextObject() as? String {
            if relative.contains(secret) { found.append(relative) }
            if let data = FileManager.default.contents(atPath: root + "/" + relative),
                String(decoding: data, as: UTF8.self).contains(secret)
            {
                found.append(relative + " (content)")
            }
        }
        return found
    }

    /// A dropped-in config.xml shares the folder with the peer as an untrusted device (an
    /// `<encryptionPassword>` on its entry) while the peer holds it as a plain folder: apply and
    /// index sync send it nothing of a new local file (a plain syncthing shows whatever it got
    /// as is), and say the two disagree on encryption, naming the device.
    @Test func aDeviceMeantToSeeCiphertextGetsNoPlainText() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-untrusted")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/a.txt", "shared before\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(FileManager.default.fileExists(atPath: world.local + "/docs/a.txt"))

            // The password syncthing's GUI writes for an untrusted device, on the peer's entry.
            let configPath = world.home + "/config.xml"
            let config = try String(contentsOfFile: configPath, encoding: .utf8)
            let entry = "<device id=\"\(st.deviceID.description)\" introducedBy=\"\">"
            let range = try #require(config.range(of: entry + "\n            <encryptionPassword></encryptionPassword>"))
            try config.replacingCharacters(
                in: range, with: entry + "\n            <encryptionPassword>correct horse</encryptionPassword>"
            ).write(toFile: configPath, atomically: true, encoding: .utf8)

            try TestFiles.write(world.local + "/docs/secret-name.txt", "secret content 5f3a\n")
            try TestFiles.write(world.local + "/docs/a.txt", "secret content 5f3a, an edit\n")
            let apply = try world.kaiten("apply", "--yes", "--send-timeout", "3")
            #expect(apply.status != 0, "\(apply.stdout)")
            #expect(Self.saysEncryptionMismatch(apply.stderr), "\(apply.stderr)")
            #expect(apply.stderr.contains("from a:"), "the peer, by its name: \(apply.stderr)")
            #expect(!apply.stderr.contains("correct horse") && !apply.stdout.contains("correct horse"))
            let sync = try world.kaiten("index", "sync")
            #expect(sync.status != 0 && Self.saysEncryptionMismatch(sync.stdout + sync.stderr), "\(sync.stdout)\(sync.stderr)")

            // Nothing arrived, and nothing could: the peer has no connection from Kaiten
            // (the refusal ends it before any index or block), so no name, no byte; what the
            // connection would have sent of the folder was sealed anyway.
            let connections = try await st.get("/rest/system/connections") as? [String: Any]
            let kaiten = (connections?["connections"] as? [String: Any])?[world.me.description] as? [String: Any]
            #expect(kaiten?["connected"] as? Bool == false, "\(String(describing: kaiten))")
            try await ApplyInteropTests.rescan(st)
            #expect(Self.leaks(of: "secret", under: world.peerData).isEmpty, "\(Self.leaks(of: "secret", under: world.peerData))")
            // syncthing answers 404 for a name no device announced.
            let reply = try? await st.get("/rest/db/file?folder=\(Self.folder)&file=docs/secret-name.txt")
            #expect(reply == nil, "the peer knows of the new file: \(reply ?? "")")
            // And the edit of a shared file is not announced to it either.
            #expect(try String(contentsOfFile: world.peerData + "/docs/a.txt", encoding: .utf8) == "shared before\n")

            // Sharing it in plain text by hand is refused as well, naming the device.
            let share = try world.kaiten("folder", "share", Self.folder, st.deviceID.description)
            #expect(share.status != 0 && share.stderr.contains("never gets plain data"), "\(share.stderr)")
            #expect(share.stderr.contains(st.deviceID.shortDescription), "\(share.stderr)")
        }
    }

    /// The peer shares the folder with Kaiten as an untrusted device (it would send ciphertext
    /// and encrypted names): index sync refuses, says it is about encryption, and stores nothing.
    @Test func aSyncthingThatTreatsThisDeviceAsUntrustedIsRefused() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-untrusted")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/a.txt", "plain on the peer\n")
        try await withSyncthing(st) { st in
            try await world.connect(st)
            try await st.addFolder(
                id: Self.folder, path: world.peerData, devices: [world.me],
                extra: ["devices": [["deviceID": st.deviceID.description], ["deviceID": world.me.description, "encryptionPassword": "pw"]]])
            try await ApplyInteropTests.waitScanned(st, files: 1)
            try world.addFolder(sharedWith: [st.deviceID])
            let sync = try world.kaiten("index", "sync")
            #expect(sync.status != 0, "\(sync.stdout)")
            let said = sync.stdout + sync.stderr
            // 1.19.2 closes before its ClusterConfig (Kaiten says why from the close reason);
            // 2.x sends its ClusterConfig first, and Kaiten's own check names the folder. Both
            // say how to hold it as the untrusted device.
            #expect(said.contains("--type receiveencrypted"), "\(said)")
            #expect(
                said.contains("disagree on which folders are encrypted") || said.contains("shares folder \"\(Self.folder)\" with this device as an untrusted one"),
                "\(said)")
            #expect(!said.contains("does the peer know this device"), "\(said)")
            let ls = try world.kaiten("ls", Self.folder, "--json")
            #expect(!ls.stdout.contains("a.txt"), "\(ls.stdout)")
        }
    }

    /// A peer whose ClusterConfig marks the folder encrypted — on Kaiten's entry (it would send
    /// ciphertext) or on its own (it expects ciphertext) — is refused by Kaiten's own check
    /// (scripted: a real syncthing closes first, above), the folder named, nothing stored.
    @Test(arguments: [false, true]) func aPeerThatWantsTheFolderEncryptedIsRefused(onItsOwnEntry: Bool) async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-untrusted")
        defer { dir.remove() }
        let world = try World(dir)
        let peer = try await ScriptedPeer(in: dir.path, folder: Self.folder, contents: [:], allowed: world.me)
        defer { Task { await peer.stop() } }
        #expect(try await world.kaitenDetached("peer", "add", peer.deviceID.description, "--name", "scripted", "--address", peer.address).status == 0)
        try world.addFolder(sharedWith: [peer.deviceID])
        let token = Data(repeating: 0xA5, count: 48)
        peer.passwordTokens.withLockedValue { $0 = onItsOwnEntry ? (token, Data()) : (Data(), token) }
        peer.announce([peer.file("encrypted-name.bin", Data("ciphertext".utf8), sequence: 1)])
        let sync = try await world.kaitenDetached("index", "sync")
        #expect(sync.status != 0, "\(sync.stdout)")
        let said = sync.stdout + sync.stderr
        let why = onItsOwnEntry ? "holds folder \"\(Self.folder)\" as an untrusted device" : "remote expects to exchange encrypted data"
        #expect(said.contains(why), "\(said)")
        let ls = try await world.kaitenDetached("ls", Self.folder, "--json")
        #expect(!ls.stdout.contains("encrypted-name"), "\(ls.stdout)")
        // Without the tokens the same peer is taken in: the refusal was the check's.
        peer.passwordTokens.withLockedValue { $0 = (Data(), Data()) }
        let plain = try await world.kaitenDetached("index", "sync")
        #expect(plain.status == 0, "\(plain.stdout)\(plain.stderr)")
        #expect(try await world.kaitenDetached("ls", Self.folder).stdout.contains("encrypted-name.bin"))
    }
}
