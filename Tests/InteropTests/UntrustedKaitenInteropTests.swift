import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Kaiten as the untrusted device (issue 40, item 3): a `receiveencrypted` folder that two
/// trusted syncthings, which do not know each other, sync through. Kaiten never has the
/// password: it stores what they seal as syncthing's untrusted device lays it out, announces
/// it and serves it.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct UntrustedKaitenInteropTests {
    static let folder = ApplyInteropTests.folder
    static let password = EncryptedSharingInteropTests.password
    typealias World = ApplyInteropTests.World

    static let names = ["docs/a.txt", "docs/big.bin", "top.txt"]

    /// A trusted syncthing with the folder at `path`, shared with the Kaiten `k` encrypted.
    static func trust(_ st: SyncthingInstance, path: String, kaiten k: DeviceID) async throws {
        try await st.addDevice(k, name: "k")
        try await st.addFolder(
            id: folder, path: path, devices: [],
            extra: ["devices": [["deviceID": st.deviceID.description], ["deviceID": k.description, "encryptionPassword": password]]])
    }

    /// The directories syncthing's layout makes only to hold encrypted names (`A.syncthing-enc`,
    /// `A.syncthing-enc/BC`) that have nothing in them under `root`. (A sealed directory entry is
    /// a directory of its own, empty on the untrusted device: its files have their own names.)
    static func emptyDirectories(under root: String) -> [String] {
        let all = (FileManager.default.enumerator(atPath: root)?.allObjects as? [String]) ?? []
        return all.filter { name in
            var isDirectory: ObjCBool = false
            guard !name.hasPrefix(".stfolder"), name.split(separator: "/").count <= 2,
                FileManager.default.fileExists(atPath: root + "/" + name, isDirectory: &isDirectory),
                isDirectory.boolValue
            else { return false }
            return ((try? FileManager.default.contentsOfDirectory(atPath: root + "/" + name)) ?? []).isEmpty
        }
    }

    static func holds(_ st: SyncthingInstance, files: Int) async throws -> Bool {
        let s = try await ApplyInteropTests.status(st)
        return s["localFiles"] as? Int == files && s["needFiles"] as? Int == 0 && s["state"] as? String == "idle"
    }

    @Test func twoSyncthingsSyncThroughAKaitenThatHoldsCiphertextOnly() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-untrusted-k")
        defer { dir.remove() }
        let world = try World(dir)
        let stored = world.local
        let aData = dir.file("a-data")
        let bData = dir.file("b-data")
        try TestFiles.write(aData + "/docs/a.txt", "a secret short file 5d2f\n")
        try TestFiles.random(aData + "/docs/big.bin", size: 700_000)
        try TestFiles.write(aData + "/top.txt", "secret at the top 5d2f\n")
        for path in [aData, bData] { try FileManager.default.createDirectory(atPath: path + "/.stfolder", withIntermediateDirectories: true) }
        let passwordFile = dir.file("password")
        try (Self.password + "\n").write(toFile: passwordFile, atomically: true, encoding: .utf8)

        let a = try SyncthingInstance.generate(in: dir.path, name: "a")
        let b = try SyncthingInstance.generate(in: dir.path, name: "b")
        try await withSyncthing(a) { a in
            try await withSyncthing(b) { b in
                // The two trusted devices know only Kaiten: everything between them goes through it.
                try await Self.trust(a, path: aData, kaiten: world.me)
                try await Self.trust(b, path: bData, kaiten: world.me)
                try await ApplyInteropTests.waitScanned(a, files: 3)
                #expect(try world.kaiten("peer", "add", a.deviceID.description, "--name", "a", "--address", a.address).status == 0)
                #expect(try world.kaiten("peer", "add", b.deviceID.description, "--name", "b", "--address", b.address).status == 0)
                let add = try world.kaiten(
                    "folder", "add", Self.folder, "--path", stored, "--type", "receiveencrypted", "--share", "a", "--share", "b")
                #expect(add.status == 0, "\(add.stdout)\(add.stderr)")
                // It holds no password, so it shares with nobody encrypted.
                let reshare = try world.kaiten("folder", "share", Self.folder, "a", "--untrusted", "--password-file", passwordFile)
                #expect(reshare.status != 0 && reshare.stderr.contains("receiveencrypted"), "\(reshare.stderr)")

                // One-shot verbs: the first contact stores the token the trusted devices give and
                // lists the folder; their sealed index comes in; apply stores the ciphertext.
                let sync = try world.kaiten("index", "sync")
                #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
                let token = stored + "/.stfolder/syncthing-encryption_password_token"
                #expect(FileManager.default.fileExists(atPath: token))
                #expect(!((try? String(contentsOfFile: token, encoding: .utf8)) ?? "").contains(Self.password))
                let ls = try world.kaiten("ls", Self.folder, "-R")
                #expect(ls.status == 0 && ls.stdout.contains(".syncthing-enc"), "\(ls.stdout)\(ls.stderr)")
                #expect(!ls.stdout.contains("docs") && !ls.stdout.contains("top.txt"), "\(ls.stdout)")
                let apply = try world.kaiten("apply", "--yes")
                #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
                #expect(UntrustedDeviceInteropTests.leaks(of: "5d2f", under: stored).isEmpty, "\(UntrustedDeviceInteropTests.leaks(of: "5d2f", under: stored))")
                let storedNames = (FileManager.default.enumerator(atPath: stored)?.allObjects as? [String]) ?? []
                #expect(!storedNames.contains { $0.contains("docs") || $0.contains("top") || $0.contains("big") }, "\(storedNames)")
                #expect(!FileManager.default.fileExists(atPath: stored + "/.stignore"))

                // syncthing's decrypter and Kaiten's read what Kaiten stores as the peers' bytes.
                let out = dir.file("out")
                let decrypted = try EncryptedSharingInteropTests.syncthingDecrypt(stored, to: out, home: dir.path)
                #expect(decrypted.status == 0, "\(decrypted.stdout)\(decrypted.stderr)")
                #expect(EncryptedFolderInteropTests.plainFiles(out) == Self.names, "\(EncryptedFolderInteropTests.plainFiles(out))")
                for name in Self.names { #expect(ApplyInteropTests.sha(out + "/" + name) == ApplyInteropTests.sha(aData + "/" + name), "\(name)") }
                let ours = try KaitenCLI.run(["decrypt", stored, "--password-file", passwordFile, "--verify-only"])
                #expect(ours.status == 0 && ours.stdout.contains("3 verified, 0 failed"), "\(ours.stdout)\(ours.stderr)")
                let again = try world.kaiten("plan", "--json")
                #expect(again.status == 0, "\(again.stderr)")
                let planned = (try? JSONSerialization.jsonObject(with: Data(again.stdout.utf8))) as? [String: Any]
                let actions = ((planned?["folders"] as? [[String: Any]])?.first?["actions"] as? [Any]) ?? ["?"]
                #expect(actions.isEmpty, "\(again.stdout)")

                // The service: b, which has nothing, gets everything from Kaiten alone; what b adds
                // reaches a through Kaiten.
                // The deletion brake holds for ciphertext as for plain files: one deletion of four
                // files is let through here.
                let run = try RunInteropTests.Running.start(
                    home: world.home, logPath: dir.file("run.log"), ["--apply", "all", "--max-delete", "50%"])
                defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
                do {
                    try await b.waitUntil("b holds a's files, from Kaiten", timeout: 90) { try await Self.holds(b, files: 3) }
                    for name in Self.names { #expect(ApplyInteropTests.sha(bData + "/" + name) == ApplyInteropTests.sha(aData + "/" + name), "\(name)") }
                    try TestFiles.write(bData + "/from-b.txt", "written on b 5d2f\n")
                    _ = try await b.post("/rest/db/scan?folder=\(Self.folder)")
                    try await a.waitUntil("a holds b's new file, through Kaiten", timeout: 90) { try await Self.holds(a, files: 4) }
                    #expect(ApplyInteropTests.sha(aData + "/from-b.txt") == ApplyInteropTests.sha(bData + "/from-b.txt"))
                    // A deletion on a goes through Kaiten too (it removes its ciphertext).
                    let storedBefore = EncryptedFolderInteropTests.plainFiles(stored).count
                    let storedBeforeDeletion = (FileManager.default.enumerator(atPath: stored)?.allObjects as? [String]) ?? []
                    try FileManager.default.removeItem(atPath: aData + "/top.txt")
                    _ = try await a.post("/rest/db/scan?folder=\(Self.folder)")
                    try await b.waitUntil("b deletes what a deleted, through Kaiten", timeout: 90) {
                        try await Self.holds(b, files: 3) && !FileManager.default.fileExists(atPath: bData + "/top.txt")
                    }
                    #expect(EncryptedFolderInteropTests.plainFiles(stored).count == storedBefore - 1)
                    // The directories that held only its encrypted name went with it, in the same
                    // apply (before Kaiten announced the deletion b took).
                    #expect(!storedBeforeDeletion.filter { $0.split(separator: "/").count <= 2 }.isEmpty)
                    #expect(Self.emptyDirectories(under: stored).isEmpty, "\(Self.emptyDirectories(under: stored))")
                } catch {
                    Issue.record("kaiten run's log:\n\(run.log)")
                    throw error
                }
                run.stop()
                #expect(!run.log.contains(Self.password))
                #expect(UntrustedDeviceInteropTests.leaks(of: "5d2f", under: stored).isEmpty)
                let last = try EncryptedSharingInteropTests.syncthingDecrypt(stored, to: out, home: dir.path)
                #expect(last.status == 0, "\(last.stdout)\(last.stderr)")
                #expect(ApplyInteropTests.sha(out + "/from-b.txt") == ApplyInteropTests.sha(bData + "/from-b.txt"))
            }
        }
    }

    /// A trusted device that takes Kaiten for a trusted one (shares the folder without a
    /// password) is refused in syncthing's words and gets nothing stored; the first password's
    /// token is kept, and a device sealing with another password is refused after it.
    @Test func aPeerSharingPlainlyOrWithAnotherPasswordIsRefused() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-untrusted-refused")
        defer { dir.remove() }
        let world = try World(dir)
        let stored = world.local
        let data = dir.file("c-data")
        try TestFiles.write(data + "/plain.txt", "plain secret 9e41\n")
        try FileManager.default.createDirectory(atPath: data + "/.stfolder", withIntermediateDirectories: true)
        let token = stored + "/.stfolder/syncthing-encryption_password_token"
        let c = try SyncthingInstance.generate(in: dir.path, name: "c")
        try await withSyncthing(c) { c in
            try await c.addDevice(world.me, name: "k")
            try await c.addFolder(id: Self.folder, path: data, devices: [world.me])
            try await ApplyInteropTests.waitScanned(c, files: 1)
            #expect(try world.kaiten("peer", "add", c.deviceID.description, "--name", "c", "--address", c.address).status == 0)
            #expect(try world.kaiten("folder", "add", Self.folder, "--path", stored, "--type", "receiveencrypted", "--share", "c").status == 0)

            let plain = try world.kaiten("index", "sync")
            #expect(plain.status != 0, "\(plain.stdout)\(plain.stderr)")
            #expect((plain.stdout + plain.stderr).contains("remote expects to exchange plain data"), "\(plain.stdout)\(plain.stderr)")
            #expect((plain.stdout + plain.stderr).contains(Self.folder), "\(plain.stdout)\(plain.stderr)")
            #expect(!FileManager.default.fileExists(atPath: token))
            let plan = try world.kaiten("plan", "--offline", "--json")
            let planned = (try? JSONSerialization.jsonObject(with: Data(plan.stdout.utf8))) as? [String: Any]
            let actions = ((planned?["folders"] as? [[String: Any]])?.first?["actions"] as? [Any]) ?? ["?"]
            #expect(actions.isEmpty, "\(plan.stdout)")
            #expect(UntrustedDeviceInteropTests.leaks(of: "9e41", under: stored).isEmpty)

            // Sealed with a password: taken, its token kept.
            try await Self.trust(c, path: data, kaiten: world.me)
            let sealed = try world.kaiten("index", "sync")
            #expect(sealed.status == 0, "\(sealed.stdout)\(sealed.stderr)")
            let kept = try String(contentsOfFile: token, encoding: .utf8)
            // Another password on the same folder: refused, the kept token unchanged.
            try await c.addFolder(
                id: Self.folder, path: data, devices: [],
                extra: ["devices": [["deviceID": c.deviceID.description], ["deviceID": world.me.description, "encryptionPassword": "another one"]]])
            let other = try world.kaiten("index", "sync")
            #expect(other.status != 0 && (other.stdout + other.stderr).contains("different encryption passwords used"), "\(other.stdout)\(other.stderr)")
            #expect(try String(contentsOfFile: token, encoding: .utf8) == kept)
        }
    }

    /// Kaiten in both roles: a trusted Kaiten shares its folder encrypted with an untrusted
    /// Kaiten, which stores it as ciphertext (its index, pulls and trailers) without the
    /// password; both decrypters read the store as the trusted Kaiten's bytes.
    @Test func aKaitenHoldsAnotherKaitensFolderAsCiphertext() async throws {
        typealias Side = KaitenToKaitenInteropTests.Side
        let dir = try TemporaryDirectory(prefix: "kaiten-untrusted-k2k")
        defer { dir.remove() }
        let trusted = try Side("t", in: dir)
        let untrusted = try Side("u", in: dir)
        let passwordFile = dir.file("password")
        try (Self.password + "\n").write(toFile: passwordFile, atomically: true, encoding: .utf8)
        #expect(try trusted.kaiten("peer", "add", untrusted.id.description, "--name", "u", "--address", "tcp://127.0.0.1:\(untrusted.port)").status == 0)
        #expect(try trusted.kaiten("folder", "add", Self.folder, "--path", trusted.data, "--type", "sendonly").status == 0)
        let share = try trusted.kaiten("folder", "share", Self.folder, "u", "--untrusted", "--password-file", passwordFile)
        #expect(share.status == 0, "\(share.stderr)")
        #expect(try untrusted.kaiten("peer", "add", trusted.id.description, "--name", "t", "--address", "tcp://127.0.0.1:\(trusted.port)").status == 0)
        let add = try untrusted.kaiten("folder", "add", Self.folder, "--path", untrusted.data, "--type", "receiveencrypted", "--share", "t")
        #expect(add.status == 0, "\(add.stderr)")
        for name in ["docs/a.txt", "top.txt"] { try TestFiles.write(trusted.data + "/" + name, "\(name) on the trusted Kaiten 3b7a\n") }
        try TestFiles.random(trusted.data + "/docs/big.bin", size: 700_000)
        #expect(try trusted.kaiten("select", Self.folder, "docs", "top.txt", "--force").status == 0)

        let run = try trusted.run(dir, ["--apply", "all"])
        defer { KaitenToKaitenInteropTests.stop(run) }
        try await RunInteropTests.waitFor("the trusted Kaiten announces its files", log: run) { run.log.contains("done send f/docs/big.bin") }
        // The first exchange stores the token and lists the folder on the same connection.
        let sync = try untrusted.kaiten("index", "sync")
        #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
        let apply = try untrusted.kaiten("apply", "--yes")
        #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
        #expect(UntrustedDeviceInteropTests.leaks(of: "3b7a", under: untrusted.data).isEmpty)
        let out = dir.file("out")
        let decrypted = try EncryptedSharingInteropTests.syncthingDecrypt(untrusted.data, to: out, home: dir.path)
        #expect(decrypted.status == 0, "\(decrypted.stdout)\(decrypted.stderr)")
        #expect(EncryptedFolderInteropTests.plainFiles(out) == Self.names, "\(EncryptedFolderInteropTests.plainFiles(out))")
        for name in Self.names { #expect(ApplyInteropTests.sha(out + "/" + name) == ApplyInteropTests.sha(trusted.data + "/" + name), "\(name)") }
        let ours = try KaitenCLI.run(["decrypt", untrusted.data, "--password-file", passwordFile, "--verify-only"])
        #expect(ours.status == 0 && ours.stdout.contains("3 verified, 0 failed"), "\(ours.stdout)\(ours.stderr)")
        // A stored file whose trailer is damaged is no version Kaiten wrote: reported as a
        // conflict, never overwritten; dropped, it is taken again from the trusted Kaiten.
        let storedFiles = EncryptedFolderInteropTests.plainFiles(untrusted.data)
        let damaged = try #require(storedFiles.first)
        let handle = try #require(FileHandle(forUpdatingAtPath: untrusted.data + "/" + damaged))
        let length = try handle.seekToEnd()
        try handle.truncate(atOffset: length - 1)
        try handle.close()
        let plan = try untrusted.kaiten("plan", "--offline", "--json")
        let planned = (try? JSONSerialization.jsonObject(with: Data(plan.stdout.utf8))) as? [String: Any]
        let folderPlan = (planned?["folders"] as? [[String: Any]])?.first
        #expect((folderPlan?["actions"] as? [Any])?.isEmpty == true, "\(plan.stdout)")
        #expect(((folderPlan?["conflicts"] as? [[String: Any]])?.map { $0["path"] as? String }) == [damaged], "\(plan.stdout)")
        let dropped = try untrusted.kaiten("resolve", Self.folder, damaged, "--delete-local")
        #expect(dropped.status == 0, "\(dropped.stdout)\(dropped.stderr)")
        let again = try untrusted.kaiten("apply", "--yes")
        #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
        let repaired = try KaitenCLI.run(["decrypt", untrusted.data, "--password-file", passwordFile, "--verify-only"])
        #expect(repaired.status == 0 && repaired.stdout.contains("3 verified, 0 failed"), "\(repaired.stdout)\(repaired.stderr)")
        // Reading or selecting ciphertext means nothing: said, with the usage status.
        let cat = try untrusted.kaiten("cat", Self.folder, "top.txt")
        #expect(cat.status == 64 && cat.stderr.contains("receiveencrypted"), "\(cat.stderr)")
        let select = try untrusted.kaiten("select", Self.folder, "x")
        #expect(select.status == 64 && select.stderr.contains("receiveencrypted"), "\(select.stderr)")
        #expect(!run.log.contains(Self.password))
    }

    /// `kill -9` of an apply storing ciphertext, at random points of the store: every file under a real name
    /// is a whole stored file that both decrypters verify (a partial one only ever under a
    /// temporary name), and the next apply completes the store.
    @Test func anApplyStoringCiphertextKilledAtAnyMomentLeavesOnlyWholeFiles() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-untrusted-kill")
        defer { dir.remove() }
        let world = try World(dir)
        let stored = world.local
        let aData = dir.file("a-data")
        var names: [String] = []
        // Sizes far apart, so that the files are stored one after another, not all at the end.
        for (n, size) in [300_000, 1_000_000, 3_000_000, 6_000_000, 10_000_000, 14_000_000].enumerated() {
            let name = "d\(n % 2)/part\(n).bin"
            try TestFiles.random(aData + "/" + name, size: size)
            names.append(name)
        }
        try TestFiles.write(aData + "/small.txt", "a small secret 7c1e\n")
        names.append("small.txt")
        names.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        try FileManager.default.createDirectory(atPath: aData + "/.stfolder", withIntermediateDirectories: true)
        let passwordFile = dir.file("password")
        try (Self.password + "\n").write(toFile: passwordFile, atomically: true, encoding: .utf8)

        let a = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(a) { a in
            try await Self.trust(a, path: aData, kaiten: world.me)
            try await ApplyInteropTests.waitScanned(a, files: names.count)
            #expect(try world.kaiten("peer", "add", a.deviceID.description, "--name", "a", "--address", a.address).status == 0)
            #expect(try world.kaiten("folder", "add", Self.folder, "--path", stored, "--type", "receiveencrypted", "--share", "a").status == 0)
            let sync = try world.kaiten("index", "sync")
            #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")

            /// Whatever is under a real name verifies, with the password, as the trusted bytes.
            var partialStores = 0
            func checkInvariant(_ round: Int) throws {
                let verified = try KaitenCLI.run(["decrypt", stored, "--password-file", passwordFile, "--verify-only"])
                // "N verified, 0 failed", or "0 failed" when nothing is stored yet.
                let noneFailed = verified.stdout.range(of: #"(^|[:,] )0 failed"#, options: .regularExpression) != nil
                #expect(verified.status == 0 && noneFailed, "round \(round): \(verified.stdout)\(verified.stderr)")
                let count = verified.stdout.range(of: #"[0-9]+ verified"#, options: .regularExpression)
                    .flatMap { Int(verified.stdout[$0].split(separator: " ")[0]) } ?? 0
                if count > 0 && count < names.count { partialStores += 1 }
            }
            /// Files under their real names in the store (not the temporary ones being written).
            func storedCount() -> Int {
                ((try? FileManager.default.subpathsOfDirectory(atPath: stored)) ?? []).filter { path in
                    let name = (path as NSString).lastPathComponent
                    var info = Glibc.stat()
                    return !path.hasPrefix(".stfolder") && !name.hasPrefix(".syncthing.") && lstat(stored + "/" + path, &info) == 0
                        && info.st_mode & S_IFMT == S_IFREG
                }.count
            }
            func emptyStore() throws {
                for name in try FileManager.default.contentsOfDirectory(atPath: stored) where name != ".stfolder" {
                    try FileManager.default.removeItem(atPath: stored + "/" + name)
                }
            }

            let first = try world.kaiten("apply", "--yes")
            #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
            try checkInvariant(0)

            var killedMidway = 0
            var round = 0
            var moments = SplitMix64.forTest("anApplyStoringCiphertextKilledAtAnyMoment")
            while killedMidway < 8 && round < 40 {
                round += 1
                try emptyStore()
                // Killed once it has stored k of the files: inside the store, whatever the
                // machine's pace (a kill timed by the clock landed before the first file under
                // CI's load).
                let k = Int.random(in: 1..<names.count, using: &moments)
                if try world.applyKilled(when: { storedCount() >= k }) { killedMidway += 1 }
                try checkInvariant(round)
            }
            #expect(killedMidway == 8)
            // The kills landed inside the store, not only before or after it.
            #expect(partialStores > 0)

            // The next apply completes the store: syncthing's decrypter reads every file.
            let last = try world.kaiten("apply", "--yes", "--max-delete", "100%")
            #expect(last.status == 0, "\(last.stdout)\(last.stderr)")
            let out = dir.file("out")
            let decrypted = try EncryptedSharingInteropTests.syncthingDecrypt(stored, to: out, home: dir.path)
            #expect(decrypted.status == 0, "\(decrypted.stdout)\(decrypted.stderr)")
            #expect(EncryptedFolderInteropTests.plainFiles(out) == names, "\(EncryptedFolderInteropTests.plainFiles(out))")
            for name in names { #expect(ApplyInteropTests.sha(out + "/" + name) == ApplyInteropTests.sha(aData + "/" + name), "\(name)") }
            let leftovers = try FileManager.default.subpathsOfDirectory(atPath: stored).filter { $0.contains(".syncthing.") }
            #expect(leftovers.isEmpty, "\(leftovers)")
            #expect(try world.kaiten("plan", "--detailed-exitcode").status == 0)
        }
    }
}
