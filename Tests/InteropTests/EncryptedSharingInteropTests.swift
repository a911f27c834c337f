import Foundation
import KaitenConfig
import KaitenEncryption
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Kaiten as a trusted device sharing a folder with an untrusted syncthing (issue 40, items 1
/// and 2): the syncthing stores ciphertext only, `syncthing decrypt` of what it stores gives
/// Kaiten's bytes, and a fresh Kaiten with only the password and that syncthing online
/// rebuilds the selected files and streams an unselected one.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct EncryptedSharingInteropTests {
    static let folder = ApplyInteropTests.folder
    static let password = "correct horse battery staple"
    typealias World = ApplyInteropTests.World

    /// Kaiten's files: a short one (padded when sealed), several blocks, one in a subdirectory,
    /// one selected only later.
    static let names = ["docs/a.txt", "docs/big.bin", "docs/sub/c.txt", "later.txt"]

    static func storedFileCount(_ u: SyncthingInstance) async throws -> (files: Int, need: Int, state: String) {
        let status = try await ApplyInteropTests.status(u)
        return (status["localFiles"] as? Int ?? -1, status["needFiles"] as? Int ?? -1, status["state"] as? String ?? "")
    }

    static func syncthingDecrypt(_ store: String, to out: String, home: String) throws -> ProcessResult {
        let binary = try #require(SyncthingInstance.binary, "syncthing is not installed; scripts/test installs it")
        try? FileManager.default.removeItem(atPath: out)
        return try ProcessRunner.run(
            binary, ["decrypt", store, "--password", Self.password, "--to", out], environment: ["HOME": home, "PATH": "/usr/bin:/bin"])
    }

    /// A fresh Kaiten home (`kaiten2`, its folder at `local2`) with the password and the
    /// untrusted device `u` as its only peer, which now shares the folder with it too.
    static func freshKaiten(
        in dir: TemporaryDirectory, untrusted u: SyncthingInstance, alongside first: DeviceID, passwordFile: String
    ) async throws -> (local: String, run: ([String]) throws -> ProcessResult) {
        let home = dir.file("kaiten2")
        let local = dir.file("local2")
        let created = try KaitenCLI.run(["init", "--home", home, "--name", "k2", "--listen", "tcp://127.0.0.1:0"])
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let run: ([String]) throws -> ProcessResult = { args in try KaitenCLI.run(args + ["--home", home]) }
        try await u.addDevice(me, name: "k2")
        var folderConfig = try await u.get("/rest/config/folders/\(folder)") as? [String: Any] ?? [:]
        folderConfig["devices"] = [["deviceID": u.deviceID.description], ["deviceID": first.description], ["deviceID": me.description]]
        _ = try await u.put("/rest/config/folders/\(folder)", json: folderConfig)
        #expect(try run(["peer", "add", u.deviceID.description, "--name", "vps", "--address", u.address]).status == 0)
        #expect(try run(["folder", "add", folder, "--path", local]).status == 0)
        #expect(try run(["folder", "share", folder, "vps", "--untrusted", "--password-file", passwordFile]).status == 0)
        return (local, run)
    }

    @Test func anUntrustedSyncthingHoldsCiphertextOnlyAndAFreshKaitenRebuildsFromIt() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-sealed")
        defer { dir.remove() }
        let world = try World(dir)
        let stored = dir.file("stored")
        try FileManager.default.createDirectory(atPath: stored, withIntermediateDirectories: true)
        let passwordFile = dir.file("password")
        try (Self.password + "\n").write(toFile: passwordFile, atomically: true, encoding: .utf8)
        try TestFiles.write(world.local + "/docs/a.txt", "a secret short file 7c1e\n")
        try TestFiles.random(world.local + "/docs/big.bin", size: 700_000)
        try TestFiles.write(world.local + "/docs/sub/c.txt", "secret in a subdirectory 7c1e\n")
        try TestFiles.write(world.local + "/later.txt", "secret selected later 7c1e\n")
        try FileManager.default.createDirectory(atPath: world.local + "/.stfolder", withIntermediateDirectories: true)

        let u = try SyncthingInstance.generate(in: dir.path, name: "u")
        try await withSyncthing(u) { u in
            // The untrusted device has its receive-encrypted folder before Kaiten shares it.
            try await u.addDevice(world.me, name: "k")
            try await u.addFolder(id: Self.folder, path: stored, type: "receiveencrypted", devices: [world.me])
            #expect(try world.kaiten("peer", "add", u.deviceID.description, "--name", "vps", "--address", u.address).status == 0)
            try world.addFolder(sharedWith: [])
            let share = try world.kaiten("folder", "share", Self.folder, "vps", "--untrusted", "--password-file", passwordFile)
            #expect(share.status == 0, "\(share.stdout)\(share.stderr)")
            #expect((share.stdout + share.stderr).contains("encrypted"), "\(share.stdout)\(share.stderr)")
            #expect(!share.stdout.contains(Self.password) && !share.stderr.contains(Self.password))
            let folders = try world.kaiten("folder", "ls", "--json")
            #expect(try DocumentedJSON.problems(stdout: folders.stdout, at: "kaiten folder ls").isEmpty, "\(folders.stdout)")
            let rows = try JSONSerialization.jsonObject(with: Data(folders.stdout.utf8)) as? [[String: Any]] ?? []
            #expect(rows.first?["encrypted_devices"] as? [String] == [u.deviceID.description], "\(folders.stdout)")
            #expect((rows.first?["devices"] as? [String])?.contains(u.deviceID.description) == false, "\(folders.stdout)")
            #expect(!folders.stdout.contains(Self.password) && !folders.stdout.contains("correct horse"))
            #expect(try world.kaiten("folder", "ls").stdout.contains("vps (encrypted)"))
            // Sharing it in plain text on top is refused: the device never gets plain data.
            let plainShare = try world.kaiten("folder", "share", Self.folder, "vps")
            #expect(plainShare.status != 0 && plainShare.stderr.contains("never gets plain data"), "\(plainShare.stderr)")
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)

            // The first contact hands the untrusted device its token; it shares the folder from then on.
            let first = try world.kaiten("index", "sync")
            #expect(first.status == 0 || (first.stdout + first.stderr).contains("password token this connection gave it"), "\(first.stdout)\(first.stderr)")
            try await u.waitUntil("the untrusted device stores the token", timeout: 60) {
                FileManager.default.fileExists(atPath: stored + "/.stfolder/syncthing-encryption_password_token")
            }
            // The peer check offers the folder with its token, as a session does: shared both ways.
            let check = try world.kaiten("peer", "check", "--json")
            let checked = (try? JSONSerialization.jsonObject(with: Data(check.stdout.utf8))) as? [[String: Any]]
            #expect(check.status == 0 && checked?.first?["shared_both_ways"] as? [String] == [Self.folder], "\(check.stdout)\(check.stderr)")
            let apply = try world.kaiten("apply", "--yes", "--send-timeout", "90")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            #expect(!apply.stdout.contains(Self.password) && !apply.stderr.contains(Self.password))
            try await u.waitUntil("the untrusted device stores the selected files", timeout: 90) {
                let s = try await Self.storedFileCount(u)
                return s.files == 3 && s.need == 0 && s.state == "idle"
            }

            // Ciphertext only: no plain name or byte under its folder.
            #expect(UntrustedDeviceInteropTests.leaks(of: "secret", under: stored).isEmpty, "\(UntrustedDeviceInteropTests.leaks(of: "secret", under: stored))")
            #expect(UntrustedDeviceInteropTests.leaks(of: "7c1e", under: stored).isEmpty)
            let storedNames = (FileManager.default.enumerator(atPath: stored)?.allObjects as? [String]) ?? []
            #expect(!storedNames.contains { $0.contains("docs") || $0.contains("big.bin") || $0.contains("a.txt") }, "\(storedNames)")

            // syncthing's own decrypter reads Kaiten's files out of what the untrusted device stores.
            let out = dir.file("out")
            let decrypted = try Self.syncthingDecrypt(stored, to: out, home: dir.path)
            #expect(decrypted.status == 0, "\(decrypted.stdout)\(decrypted.stderr)")
            #expect(EncryptedFolderInteropTests.plainFiles(out) == ["docs/a.txt", "docs/big.bin", "docs/sub/c.txt"], "\(EncryptedFolderInteropTests.plainFiles(out))")
            for name in ["docs/a.txt", "docs/big.bin", "docs/sub/c.txt"] {
                #expect(ApplyInteropTests.sha(out + "/" + name) == ApplyInteropTests.sha(world.local + "/" + name), "\(name)")
            }

            // The selection changed: the newly selected file goes out sealed too.
            #expect(try world.kaiten("select", Self.folder, "later.txt").status == 0)
            let second = try world.kaiten("apply", "--yes", "--send-timeout", "90")
            #expect(second.status == 0, "\(second.stdout)\(second.stderr)")
            try await u.waitUntil("the untrusted device stores the newly selected file", timeout: 90) {
                let s = try await Self.storedFileCount(u)
                return s.files == 4 && s.need == 0 && s.state == "idle"
            }
            #expect(UntrustedDeviceInteropTests.leaks(of: "7c1e", under: stored).isEmpty)
            let again = try Self.syncthingDecrypt(stored, to: out, home: dir.path)
            #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
            for name in Self.names {
                #expect(ApplyInteropTests.sha(out + "/" + name) == ApplyInteropTests.sha(world.local + "/" + name), "\(name)")
            }
            // Kaiten's decrypter reads the same store.
            let ours = try KaitenCLI.run(["decrypt", stored, "--password-file", passwordFile, "--verify-only"])
            #expect(ours.status == 0 && ours.stdout.contains("4 verified, 0 failed"), "\(ours.stdout)\(ours.stderr)")

            // A fresh Kaiten with only the password and the untrusted device: the first Kaiten
            // is not running (one-shot verbs), so the untrusted device is the only source.
            let fresh = try await Self.freshKaiten(in: dir, untrusted: u, alongside: world.me, passwordFile: passwordFile)
            let local2 = fresh.local
            func k2(_ args: String...) throws -> ProcessResult { try fresh.run(args) }
            let sync = try k2("index", "sync")
            #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
            let ls = try k2("ls", Self.folder, "-R")
            for name in Self.names { #expect(ls.stdout.contains(name), "\(ls.stdout)\(ls.stderr)") }
            let select = try k2("select", Self.folder, "docs")
            #expect(select.status == 0, "\(select.stdout)\(select.stderr)")
            let rebuilt = try k2("apply", "--yes")
            #expect(rebuilt.status == 0, "\(rebuilt.stdout)\(rebuilt.stderr)")
            for name in ["docs/a.txt", "docs/big.bin", "docs/sub/c.txt"] {
                #expect(ApplyInteropTests.sha(local2 + "/" + name) == ApplyInteropTests.sha(world.local + "/" + name), "\(name)")
            }
            #expect(!FileManager.default.fileExists(atPath: local2 + "/later.txt"))
            // An unselected file, streamed from ciphertext without keeping it.
            let streamed = try k2("cat", Self.folder, "later.txt")
            #expect(streamed.status == 0 && streamed.stdout == "secret selected later 7c1e\n", "\(streamed.stdout)\(streamed.stderr)")
            #expect(!FileManager.default.fileExists(atPath: local2 + "/later.txt"))
        }
    }
}

extension EncryptedSharingInteropTests {
    /// `kaiten run` with an untrusted syncthing as its only peer: the folder is taken up on the
    /// connection once the untrusted device has the token (its next ClusterConfig lists it),
    /// the selected files and a change made later reach it sealed. Then a block of its store is
    /// altered (size and time kept, so it does not notice): a Kaiten pulling from it refuses
    /// the file, naming it, writes nothing under its name, and takes the other files.
    @Test func aServiceKeepsAnUntrustedDeviceCurrentAndAnAlteredBlockIsRefused() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-sealed-run")
        defer { dir.remove() }
        let world = try World(dir)
        let stored = dir.file("stored")
        try FileManager.default.createDirectory(atPath: stored, withIntermediateDirectories: true)
        let passwordFile = dir.file("password")
        try Self.password.write(toFile: passwordFile, atomically: true, encoding: .utf8)
        try TestFiles.write(world.local + "/docs/a.txt", "a secret short file 7c1e\n")
        try TestFiles.random(world.local + "/docs/big.bin", size: 400_000)
        try FileManager.default.createDirectory(atPath: world.local + "/.stfolder", withIntermediateDirectories: true)

        let u = try SyncthingInstance.generate(in: dir.path, name: "u")
        try await withSyncthing(u) { u in
            try await u.addDevice(world.me, name: "k")
            try await u.addFolder(id: Self.folder, path: stored, type: "receiveencrypted", devices: [world.me], extra: ["fsWatcherEnabled": false, "rescanIntervalS": 3600])
            #expect(try world.kaiten("peer", "add", u.deviceID.description, "--name", "vps", "--address", u.address).status == 0)
            try world.addFolder(sharedWith: [])
            #expect(try world.kaiten("folder", "share", Self.folder, "vps", "--untrusted", "--password-file", passwordFile).status == 0)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)

            let run = try RunInteropTests.Running.start(home: world.home, logPath: dir.file("run.log"), ["--apply", "all"])
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            func waitStored(_ count: Int, _ what: String) async throws {
                do {
                    try await u.waitUntil(what, timeout: 90) {
                        let s = try await Self.storedFileCount(u)
                        return s.files == count && s.need == 0 && s.state == "idle"
                    }
                } catch {
                    Issue.record("kaiten run's log:\n\(run.log)")
                    throw error
                }
            }
            try await waitStored(2, "the untrusted device stores the selection, from the service")
            try TestFiles.write(world.local + "/docs/new.txt", "a secret written later 7c1e\n")
            try await waitStored(3, "the untrusted device stores the change made later")
            run.stop()
            #expect(!run.log.contains(Self.password), "\(run.log)")
            #expect(UntrustedDeviceInteropTests.leaks(of: "7c1e", under: stored).isEmpty)
            let out = dir.file("out")
            let decrypted = try Self.syncthingDecrypt(stored, to: out, home: dir.path)
            #expect(decrypted.status == 0, "\(decrypted.stdout)\(decrypted.stderr)")
            for name in ["docs/a.txt", "docs/big.bin", "docs/new.txt"] {
                #expect(ApplyInteropTests.sha(out + "/" + name) == ApplyInteropTests.sha(world.local + "/" + name), "\(name)")
            }

            // One byte of big.bin's first sealed block flipped where the untrusted device keeps it.
            let map = try KaitenCLI.run(["decrypt", stored, "--password-file", passwordFile, "--verify-only", "--json"])
            let files = (try JSONSerialization.jsonObject(with: Data(map.stdout.utf8)) as? [String: Any])?["files"] as? [[String: Any]] ?? []
            let storedBig = try #require(files.first { $0["name"] as? String == "docs/big.bin" }?["stored"] as? String)
            let path = stored + "/" + storedBig
            let before = ApplyInteropTests.stat(path)
            let fd = open(path, O_RDWR)
            var byte: UInt8 = 0
            #expect(pread(fd, &byte, 1, 100) == 1)
            byte ^= 0x01
            #expect(pwrite(fd, &byte, 1, 100) == 1)
            var times = [before.st_atim, before.st_mtim]
            futimens(fd, &times)
            close(fd)

            let fresh = try await Self.freshKaiten(in: dir, untrusted: u, alongside: world.me, passwordFile: passwordFile)
            let local2 = fresh.local
            func k2(_ args: String...) throws -> ProcessResult { try fresh.run(args) }
            #expect(try k2("index", "sync").status == 0)
            #expect(try k2("select", Self.folder, "docs").status == 0)
            let pulled = try k2("apply", "--yes")
            #expect(pulled.status != 0, "\(pulled.stdout)")
            #expect(pulled.stderr.contains("docs/big.bin") && pulled.stderr.contains("does not decrypt and verify"), "\(pulled.stderr)")
            #expect(!FileManager.default.fileExists(atPath: local2 + "/docs/big.bin"))
            let leftovers = (FileManager.default.enumerator(atPath: local2)?.allObjects as? [String] ?? []).filter { $0.contains(".syncthing.") || $0.contains(".tmp") }
            #expect(leftovers.isEmpty, "\(leftovers)")
            #expect(ApplyInteropTests.sha(local2 + "/docs/a.txt") == ApplyInteropTests.sha(world.local + "/docs/a.txt"))
            #expect(ApplyInteropTests.sha(local2 + "/docs/new.txt") == ApplyInteropTests.sha(world.local + "/docs/new.txt"))
            let streamed = try k2("cat", Self.folder, "docs/big.bin")
            #expect(streamed.status != 0 && streamed.stderr.contains("docs/big.bin"), "\(streamed.stderr)")
        }
    }
}

/// What an untrusted device sends is trusted for nothing but holding ciphertext: names that
/// open outside the folder, plain text where ciphertext belongs, metadata moved from one name
/// to another and another password are refused and named, nothing stored (a scripted
/// untrusted peer, whose every byte the test chooses).
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct EncryptedSharingBadInputTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    enum Case: String, CaseIterable, Sendable {
        case nameOutsideTheFolder, plainIndex, swappedMetadata, otherPassword
    }

    @Test(arguments: Case.allCases) func anUntrustedPeerIsTrustedForNothing(_ trial: Case) async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-sealed-bad")
        defer { dir.remove() }
        let world = try World(dir)
        let password = "correct horse battery staple"
        let passwordFile = dir.file("password")
        try password.write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let key = try FolderKey(folderID: Self.folder, password: password)
        let peer = try await ScriptedPeer(in: dir.path, folder: Self.folder, contents: [:], allowed: world.me)
        defer { Task { await peer.stop() } }
        #expect(try await world.kaitenDetached("peer", "add", peer.deviceID.description, "--name", "vps", "--address", peer.address).status == 0)
        try FileManager.default.createDirectory(atPath: world.local + "/.stfolder", withIntermediateDirectories: true)
        try world.addFolder(sharedWith: [])
        #expect(try await world.kaitenDetached("folder", "share", Self.folder, "vps", "--untrusted", "--password-file", passwordFile).status == 0)

        let good = peer.file("good.txt", Data("fine\n".utf8), sequence: 1)
        var sent: [BEPFileInfo]
        var token = key.passwordToken
        let why: String
        switch trial {
        case .nameOutsideTheFolder:
            sent = [try EncryptedFileInfo.encrypt(good, folderKey: key), try EncryptedFileInfo.encrypt(peer.file("../escape.txt", Data("out\n".utf8), sequence: 2), folderKey: key)]
            why = "escape.txt"
        case .plainIndex:
            sent = [good]
            why = "index of encrypted folder \"\(Self.folder)\""
        case .swappedMetadata:
            let other = try EncryptedFileInfo.encrypt(peer.file("other.txt", Data("other\n".utf8), sequence: 2), folderKey: key)
            var swapped = try EncryptedFileInfo.encrypt(good, folderKey: key)
            swapped.encrypted = other.encrypted
            sent = [swapped]
            why = "index of encrypted folder \"\(Self.folder)\""
        case .otherPassword:
            sent = [try EncryptedFileInfo.encrypt(good, folderKey: try FolderKey(folderID: Self.folder, password: "another one"))]
            token = try FolderKey(folderID: Self.folder, password: "another one").passwordToken
            why = "different encryption passwords used"
        }
        peer.passwordTokens.withLockedValue { $0 = (Data(token), Data()) }
        peer.announce(sent)
        let sync = try await world.kaitenDetached("index", "sync")
        #expect(sync.status != 0, "\(sync.stdout)")
        let said = sync.stdout + sync.stderr
        #expect(said.contains(why), "\(said)")
        #expect(said.contains("vps") || said.contains(peer.deviceID.shortDescription), "the peer is named: \(said)")
        #expect(!said.contains(password))
        let ls = try await world.kaitenDetached("ls", Self.folder, "-R", "--json")
        #expect(!ls.stdout.contains("good.txt") && !ls.stdout.contains("escape") && !ls.stdout.contains("other.txt"), "\(ls.stdout)")
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/escape.txt"))

        // The same peer with a well-formed index under the right password is taken in: the
        // refusals were the checks'.
        peer.passwordTokens.withLockedValue { $0 = (Data(key.passwordToken), Data()) }
        peer.announce([try EncryptedFileInfo.encrypt(good, folderKey: key)])
        let fine = try await world.kaitenDetached("index", "sync")
        #expect(fine.status == 0, "\(fine.stdout)\(fine.stderr)")
        #expect(try await world.kaitenDetached("ls", Self.folder).stdout.contains("good.txt"))
    }
}
