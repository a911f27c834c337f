import Crypto
import Foundation
import KaitenEncryption
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Folders stored by an untrusted device: syncthing A (trusted) shares a folder with syncthing
/// B as an untrusted device, B stores only ciphertext, and `kaiten decrypt` gives back A's
/// files from B's folder alone: byte for byte, with modes and times; a wrong password, a
/// flipped bit, a swapped file or an existing file is refused and named, never written.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct EncryptedFolderInteropTests {
    static let folder = "enc"
    static let password = "correct horse battery staple"

    /// The plain files A shares: a short one (padded to 1 KiB when sealed), several blocks,
    /// an empty one, an executable, a non-ASCII name.
    static let files: [(name: String, size: Int)] = [
        ("a.txt", 0), ("dir/sub/b.bin", 700_000), ("empty", 0), ("run.sh", 0), ("café ü.txt", 0),
    ]

    struct Store {
        let plain: String
        let stored: String
        let passwordFile: String
    }

    /// A and B started, the folder shared encrypted, returned once B stores all of it; both
    /// stopped after `body`.
    static func withUntrustedStore(_ dir: TemporaryDirectory, _ body: (Store) async throws -> Void) async throws {
        let plain = dir.file("plain")
        let stored = dir.file("stored")
        try FileManager.default.createDirectory(atPath: stored, withIntermediateDirectories: true)
        try TestFiles.write(plain + "/a.txt", "a secret short file\n")
        try TestFiles.random(plain + "/dir/sub/b.bin", size: 700_000)
        try TestFiles.write(plain + "/empty", "")
        try TestFiles.write(plain + "/run.sh", "#!/bin/sh\necho secret script\n")
        chmod(plain + "/run.sh", 0o755)
        try TestFiles.write(plain + "/café ü.txt", "secret unicode\n")
        let passwordFile = dir.file("password")
        try Self.password.write(toFile: passwordFile, atomically: true, encoding: .utf8)

        let a = try SyncthingInstance.generate(in: dir.path, name: "a")
        let b = try SyncthingInstance.generate(in: dir.path, name: "b")
        try await withSyncthing(a) { a in
            try await withSyncthing(b) { b in
                // B has its folder before A shares: a ClusterConfig that arrives first is
                // "unexpected" to 1.19.2, which then waits for the next connection.
                try await b.addDevice(a.deviceID, name: "a", addresses: [a.address])
                try await b.addFolder(id: Self.folder, path: stored, type: "receiveencrypted", devices: [a.deviceID])
                try await a.addDevice(b.deviceID, name: "b", addresses: [b.address])
                try await a.addFolder(
                    id: Self.folder, path: plain, devices: [b.deviceID],
                    extra: ["devices": [["deviceID": a.deviceID.description], ["deviceID": b.deviceID.description, "encryptionPassword": Self.password]]])
                try await b.waitUntil("B stores the folder encrypted", timeout: 120) {
                    let status = try await b.get("/rest/db/status?folder=\(Self.folder)") as? [String: Any]
                    return status?["state"] as? String == "idle" && status?["needFiles"] as? Int == 0
                        && status?["globalFiles"] as? Int == Self.files.count && status?["localFiles"] as? Int == Self.files.count
                }
                try await body(Store(plain: plain, stored: stored, passwordFile: passwordFile))
            }
        }
    }

    static func decrypt(_ arguments: [String]) throws -> ProcessResult {
        try KaitenCLI.run(["decrypt"] + arguments)
    }

    /// Every regular file below `root` (relative), none of syncthing's own.
    static func plainFiles(_ root: String) -> [String] {
        let names = (FileManager.default.enumerator(atPath: root)?.allObjects as? [String]) ?? []
        return names.filter { name in
            var info = stat()
            return lstat(root + "/" + name, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && !name.hasPrefix(".stfolder")
        }.sorted()
    }

    @Test func kaitenDecryptsWhatAnUntrustedSyncthingStores() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-decrypt")
        defer { dir.remove() }
        try await Self.withUntrustedStore(dir) { store in
            // Ciphertext only on B: no plain name or byte.
            #expect(UntrustedDeviceInteropTests.leaks(of: "secret", under: store.stored).isEmpty)
            // (Names only for short words: random ciphertext holds any three given bytes somewhere
            // in 700 KB now and then.)
            let storedNames = (FileManager.default.enumerator(atPath: store.stored)?.allObjects as? [String]) ?? []
            #expect(!storedNames.contains { $0.contains("sub") || $0.contains("b.bin") || $0.contains("run.sh") }, "\(storedNames)")

            let out = dir.file("out")
            let first = try Self.decrypt([store.stored, "--password-file", store.passwordFile, "--to", out, "--json"])
            #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
            #expect(try DocumentedJSON.problems(stdout: first.stdout, at: "kaiten decrypt").isEmpty, "\(first.stdout)")
            #expect(!first.stdout.contains(Self.password) && !first.stderr.contains(Self.password))
            #expect(Self.plainFiles(out) == Self.files.map(\.name).sorted(), "\(Self.plainFiles(out))")
            for (name, _) in Self.files {
                #expect(ApplyInteropTests.sha(out + "/" + name) == ApplyInteropTests.sha(store.plain + "/" + name), "\(name)")
                let want = ApplyInteropTests.stat(store.plain + "/" + name)
                let got = ApplyInteropTests.stat(out + "/" + name)
                #expect(got.st_mode & 0o777 == want.st_mode & 0o777, "\(name): mode \(String(got.st_mode & 0o777, radix: 8))")
                #expect(got.st_mtim.tv_sec == want.st_mtim.tv_sec, "\(name): mtime")
            }
            // Again: everything is already there.
            let again = try Self.decrypt([store.stored, "--password-file", store.passwordFile, "--to", out])
            #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
            #expect(again.stdout.contains("folder \(Self.folder): 0 failed") || again.stdout.contains("\(Self.files.count) unchanged"), "\(again.stdout)")
            #expect(again.stdout.contains("\(Self.files.count) unchanged, 0 failed"), "\(again.stdout)")
            // Verify only, the password from stdin.
            let verify = try KaitenCLI.run(["decrypt", store.stored, "--password-file", "-", "--verify-only"], stdin: Self.password + "\n")
            #expect(verify.status == 0 && verify.stdout.contains("\(Self.files.count) verified, 0 failed"), "\(verify.stdout)\(verify.stderr)")

            // Which stored file is which, from the JSON.
            let document = try #require(try JSONSerialization.jsonObject(with: Data(first.stdout.utf8)) as? [String: Any])
            var storedPath: [String: String] = [:]
            for file in document["files"] as? [[String: Any]] ?? [] {
                if let name = file["name"] as? String, let path = file["stored"] as? String { storedPath[name] = path }
            }
            #expect(storedPath.count == Self.files.count)
            let bStored = try #require(storedPath["dir/sub/b.bin"])
            let aStored = try #require(storedPath["a.txt"])
            let unicodeStored = try #require(storedPath["café ü.txt"])

            // The block hashes syncthing sealed for the untrusted device open with the file key
            // and the plain offset (2.x; 1.19.2 may have sealed them without it), giving the
            // plain SHA-256: what Kaiten must send an untrusted device in its turn.
            let key = try FolderKey(folderID: Self.folder, password: Self.password)
            let fd = open(store.stored + "/" + bStored, O_RDONLY)
            defer { close(fd) }
            var info = stat()
            fstat(fd, &info)
            let outer = try EncryptedTrailer.read(fd: fd, size: Int64(info.st_size))
            let plain = try EncryptedFileInfo.decrypt(outer, folderKey: key)
            let fileKey = key.fileKey(for: plain.name)
            for (sealed, block) in zip(outer.blocks, plain.blocks) {
                #expect(try EncryptedFileInfo.openBlockHash(sealed.hash, fileKey: fileKey, plainOffset: block.offset) == Array(block.hash))
                if SyncthingInstance.majorVersion >= 2 {
                    #expect(try AESSIV.open(sealed.hash, key: fileKey, associatedData: [EncryptedFileInfo.bigEndian(block.offset), []]) == Array(block.hash))
                }
            }
            #expect(outer.modifiedS == EncryptedFileInfo.fixedModification && outer.permissions == 0o644)
            #expect(outer.blockSize == plain.blockSize + 40 || (plain.blockSize == 0 && outer.blockSize == (128 << 10) + 40), "\(outer.blockSize) \(plain.blockSize)")
            // What Kaiten makes of the same plain FileInfo is what syncthing made, but for the
            // random nonce of the sealed metadata.
            var ours = try EncryptedFileInfo.encrypt(plain, folderKey: key)
            var theirs = outer
            ours.encrypted = Data()
            theirs.encrypted = Data()
            #expect(ours.name == theirs.name && ours.blocks == theirs.blocks && ours.size == theirs.size && ours.version == theirs.version, "\(ours)\n\(theirs)")

            // A wrong password: said at once, naming the folder, nothing written.
            let wrong = dir.file("wrong-password")
            try "not the password".write(toFile: wrong, atomically: true, encoding: .utf8)
            let wrongOut = dir.file("wrong-out")
            let refused = try Self.decrypt([store.stored, "--password-file", wrong, "--to", wrongOut])
            #expect(refused.status == 1, "\(refused.stdout)\(refused.stderr)")
            #expect(refused.stderr.contains("folder \"\(Self.folder)\": wrong password"), "\(refused.stderr)")
            #expect(Self.plainFiles(wrongOut).isEmpty)

            // A copy of the store to damage (B keeps its own).
            let copy = dir.file("damaged")
            #expect(try ProcessRunner.run("/bin/cp", ["-a", store.stored, copy]).status == 0)
            // A flipped bit in a block of b.bin.
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: copy + "/" + bStored))
            try handle.seek(toOffset: 200_000)
            let byte = try #require(try handle.read(upToCount: 1))
            try handle.seek(toOffset: 200_000)
            try handle.write(contentsOf: Data([byte[0] ^ 0x01]))
            try handle.close()
            // a.txt's stored file put under café's encrypted name (a swap by the untrusted device).
            #expect(rename(copy + "/" + aStored, copy + "/" + unicodeStored) == 0)
            let damagedOut = dir.file("damaged-out")
            let damaged = try Self.decrypt([copy, "--password-file", store.passwordFile, "--to", damagedOut])
            #expect(damaged.status == 1, "\(damaged.stdout)\(damaged.stderr)")
            #expect(damaged.stderr.contains("\(bStored) (dir/sub/b.bin): block 1 at "), "\(damaged.stderr)")
            #expect(damaged.stderr.contains("does not decrypt with this password"), "\(damaged.stderr)")
            #expect(damaged.stderr.contains("\(unicodeStored): its trailer names \"\(aStored)\""), "\(damaged.stderr)")
            #expect(Self.plainFiles(damagedOut) == ["empty", "run.sh"], "\(Self.plainFiles(damagedOut))")

            // Without a token file the folder ID must be given; given, it works.
            let tokenless = dir.file("tokenless")
            #expect(try ProcessRunner.run("/bin/cp", ["-a", store.stored, tokenless]).status == 0)
            try FileManager.default.removeItem(atPath: tokenless + "/.stfolder")
            let noID = try Self.decrypt([tokenless, "--password-file", store.passwordFile, "--verify-only"])
            #expect(noID.status == 1 && noID.stderr.contains("--folder-id"), "\(noID.stderr)")
            let withID = try Self.decrypt([tokenless, "--password-file", store.passwordFile, "--verify-only", "--folder-id", Self.folder])
            #expect(withID.status == 0, "\(withID.stdout)\(withID.stderr)")
            let wrongWithoutToken = try Self.decrypt([tokenless, "--password-file", wrong, "--verify-only", "--folder-id", Self.folder])
            #expect(wrongWithoutToken.status == 1 && wrongWithoutToken.stderr.contains("wrong password or folder ID"), "\(wrongWithoutToken.stderr)")

            // A destination file with other content is kept unless --overwrite.
            try TestFiles.write(out + "/a.txt", "the user's own edit\n")
            let kept = try Self.decrypt([store.stored, "--password-file", store.passwordFile, "--to", out])
            #expect(kept.status == 1 && kept.stderr.contains("a.txt exists with other content; --overwrite replaces it"), "\(kept.stderr)")
            #expect(try String(contentsOfFile: out + "/a.txt", encoding: .utf8) == "the user's own edit\n")
            let replaced = try Self.decrypt([store.stored, "--password-file", store.passwordFile, "--to", out, "--overwrite"])
            #expect(replaced.status == 0, "\(replaced.stderr)")
            #expect(ApplyInteropTests.sha(out + "/a.txt") == ApplyInteropTests.sha(store.plain + "/a.txt"))
            #expect(try FileManager.default.contentsOfDirectory(atPath: out).allSatisfy { !$0.hasPrefix(".syncthing.") })

            // Usage: neither or both of --to and --verify-only; the password never on the command line.
            #expect(try Self.decrypt([store.stored, "--password-file", store.passwordFile]).status == 64)
            #expect(try Self.decrypt([store.stored, "--password-file", store.passwordFile, "--to", out, "--verify-only"]).status == 64)
            #expect(try Self.decrypt([store.stored, "--password", Self.password, "--verify-only"]).status == 64)
            // Into the encrypted folder itself: refused.
            let inside = try Self.decrypt([store.stored, "--password-file", store.passwordFile, "--to", store.stored + "/plain"])
            #expect(inside.status == 1 && inside.stderr.contains("is inside the encrypted folder"), "\(inside.stderr)")
        }
    }

    /// Kaiten's encrypted FileInfos, sealed blocks and trailers, laid out as an untrusted device
    /// stores them, are what syncthing's own decrypter reads: the same bytes, names and modes.
    @Test func syncthingDecryptReadsWhatKaitenEncrypts() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-encrypt")
        defer { dir.remove() }
        let key = try FolderKey(folderID: Self.folder, password: Self.password)
        let store = dir.file("store")
        var contents: [String: Data] = [
            "a.txt": Data("short\n".utf8), "empty": Data(), "dir/sub/b.bin": Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }),
            "café ü.txt": Data("unicode\n".utf8),
        ]
        contents["exactly-one-block"] = Data(repeating: 7, count: 128 << 10)
        var sequence: Int64 = 0
        for (name, data) in contents.sorted(by: { $0.key < $1.key }) {
            sequence += 1
            var plain = BEPFileInfo()
            plain.name = name
            plain.type = .file
            plain.size = Int64(data.count)
            plain.permissions = name == "a.txt" ? 0o600 : 0o644
            plain.modifiedS = 1_700_000_000 + sequence
            plain.modifiedNs = 5
            plain.sequence = sequence
            plain.blockSize = 128 << 10
            var counter = BEPCounter()
            counter.id = 42
            counter.value = UInt64(sequence)
            plain.version.counters = [counter]
            plain.blocks = TestBlocks.of(data)
            let outer = try EncryptedFileInfo.encrypt(plain, folderKey: key)
            #expect(!outer.name.contains(name) && outer.modifiedS == EncryptedFileInfo.fixedModification && outer.permissions == 0o644)
            #expect(try EncryptedFileInfo.decrypt(outer, folderKey: key) == plain)
            var stored = Data()
            let fileKey = key.fileKey(for: name)
            for block in plain.blocks {
                stored += try EncryptedBlock.seal(data[Int(block.offset)..<Int(block.offset) + Int(block.size)], fileKey: fileKey)
            }
            #expect(Int64(stored.count) == outer.size)
            stored += try EncryptedTrailer.encode(outer)
            let path = store + "/" + outer.name
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try stored.write(to: URL(fileURLWithPath: path))
        }
        try FileManager.default.createDirectory(atPath: store + "/.stfolder", withIntermediateDirectories: true)
        try Data(StoredPasswordToken(folderID: Self.folder, token: key.passwordToken).encoded())
            .write(to: URL(fileURLWithPath: store + "/" + StoredPasswordToken.relativePath))
        #expect(UntrustedDeviceInteropTests.leaks(of: "unicode", under: store).isEmpty)

        let binary = try #require(SyncthingInstance.binary, "syncthing is not installed; scripts/test installs it")
        let out = dir.file("syncthing-out")
        let decrypted = try ProcessRunner.run(
            binary, ["decrypt", store, "--password", Self.password, "--to", out],
            environment: ["HOME": dir.path, "PATH": "/usr/bin:/bin"])
        #expect(decrypted.status == 0, "\(decrypted.stdout)\(decrypted.stderr)")
        #expect(Self.plainFiles(out) == contents.keys.sorted(), "\(Self.plainFiles(out))")
        for (name, data) in contents {
            #expect(FileManager.default.contents(atPath: out + "/" + name) == data, "\(name)")
        }
        let verified = try ProcessRunner.run(
            binary, ["decrypt", store, "--password", Self.password, "--verify-only"], environment: ["HOME": dir.path, "PATH": "/usr/bin:/bin"])
        #expect(verified.status == 0, "\(verified.stdout)\(verified.stderr)")
        // And Kaiten's decrypter agrees.
        let ours = try Self.decrypt([store, "--password-file", try Self.passwordFile(dir), "--verify-only"])
        #expect(ours.status == 0 && ours.stdout.contains("\(contents.count) verified, 0 failed"), "\(ours.stdout)\(ours.stderr)")
    }

    static func passwordFile(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.file("password")
        try Self.password.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}
