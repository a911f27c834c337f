import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// The built `kaiten` binary, run as a user runs it: exit codes, stdout/stderr, --json shapes.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct CLITests {
    static let peer = "LXONAJ2-BUJHTRL-4AZYOG4-5H4JWNG-XA4OJHO-JEGBUIY-D5N2DL5-KCJ33AQ"

    func kaiten(_ args: String...) throws -> ProcessResult { try KaitenCLI.run(args) }
    func kaiten(_ args: [String]) throws -> ProcessResult { try KaitenCLI.run(args) }

    func withHome(_ body: (String, TemporaryDirectory) throws -> Void) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = dir.file("home")
        let result = try kaiten("init", "--home", home, "--name", "ci", "--listen", "tcp://127.0.0.1:22000")
        #expect(result.status == 0, "\(result.stderr)")
        try body(home, dir)
    }

    /// Issue 10, item 5: an empty, whitespace-only, cut-off or binary config.xml is one line
    /// naming the file, exit 1, never a crash (it was SIGSEGV, exit 139), and nothing is written.
    @Test(arguments: ["", " \n\t\n", "<configuration version=\"36\">\n  <device id=", "\u{0}\u{1}garbage"])
    func aBrokenConfigIsOneLineAndExit1(_ content: String) throws {
        try withHome { home, _ in
            try content.write(toFile: home + "/config.xml", atomically: true, encoding: .utf8)
            for verb in [["id"], ["peer", "ls"], ["plan", "--offline"]] {
                let result = try KaitenCLI.run(verb + ["--home", home])
                #expect(result.status == 1, "\(verb): \(result.status) \(result.stderr)")
                let lines = result.stderr.split(separator: "\n")
                #expect(lines.count == 1, "\(result.stderr)")
                #expect(result.stderr.contains(home + "/config.xml"), "\(result.stderr)")
            }
            #expect(try String(contentsOfFile: home + "/config.xml", encoding: .utf8) == content)
        }
    }

    /// Issue 10, item 17: `--home` (and `-v`) before the verb, as git and terraform take theirs.
    @Test func globalOptionsMayComeBeforeTheVerb() throws {
        try withHome { home, _ in
            let after = try kaiten("id", "--home", home)
            let before = try kaiten("--home", home, "id")
            #expect(before.status == 0, "\(before.stderr)")
            #expect(before.stdout == after.stdout)
            let equals = try kaiten("--home=\(home)", "peer", "ls")
            #expect(equals.status == 0, "\(equals.stderr)")
        }
    }

    /// Issue 10, item 10: every malformed argument is a usage error (64) naming the argument.
    @Test func malformedArgumentsExit64() throws {
        try withHome { home, _ in
            var wrongCheck = Array(Self.peer)
            wrongCheck[14] = wrongCheck[14] == "A" ? "B" : "A"  // the first check character
            let badID = try kaiten("peer", "add", "--home", home, String(wrongCheck))
            #expect(badID.status == 64, "\(badID.stderr)")
            let badAddress = try kaiten("peer", "add", "--home", home, Self.peer, "--address", "http://x:1")
            #expect(badAddress.status == 64, "\(badAddress.stderr)")
            #expect(badAddress.stderr.contains("--address \"http://x:1\""), "\(badAddress.stderr)")
            #expect(!badAddress.stderr.contains("config.xml"), "\(badAddress.stderr)")
            let badTTL = try kaiten("url", "--home", home, "f", "x", "--ttl", "soon")
            #expect(badTTL.status == 64, "\(badTTL.stderr)")
        }
    }

    /// Issue 36, item 31: every mistake in `kaiten url`'s arguments is one line naming it, exit
    /// 64, never the whole usage and never silently ignored.
    @Test(arguments: [
        (["--ttl", "-5m"], "--ttl -5m"), (["--ttl", "0s"], "--ttl 0s"), (["--ttl", "-5"], "--ttl -5"),
        (["--size", "64"], "--size is for thumbnail links"), (["--thumb", "--size", "4"], "--size 4"),
    ])
    func urlArgumentMistakesAreOneLineEach(extra: [String], said: String) throws {
        try withHome { home, _ in
            let result = try kaiten(["url", "--home", home, "f", "x"] + extra)
            #expect(result.status == 64, "\(result.stderr)")
            #expect(result.stderr.contains(said), "\(result.stderr)")
            #expect(!result.stderr.contains("USAGE") && !result.stderr.contains("Usage"), "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        }
    }

    /// `kaiten thumb` of a picture made here since the last plan (only on disk, in no peer's
    /// index): the folder is scanned first, so it is found and its thumbnail made (issue 36,
    /// item 17: it was "not in the global index" until a plan had scanned).
    @Test func thumbSeesAFileMadeSinceTheLastPlan() throws {
        try withHome { home, dir in
            let local = dir.file("photos")
            try FileManager.default.createDirectory(atPath: local + "/.stfolder", withIntermediateDirectories: true)
            #expect(try kaiten("folder", "add", "p", "--path", local, "--home", home).status == 0)
            try TestMedia.jpeg(local + "/new.jpg", width: 640, height: 480)
            let thumb = try kaiten("thumb", "p", "new.jpg", "--cache", dir.file("cache"), "--json", "--home", home)
            #expect(thumb.status == 0, "\(thumb.stdout)\(thumb.stderr)")
            #expect(thumb.stdout.contains("\"made\""), "\(thumb.stdout)")
        }
    }

    /// A mistyped --type is a usage error naming the argument, not config.xml (issue 36, item 30).
    @Test func aMistypedFolderTypeIsAUsageError() throws {
        try withHome { home, _ in
            let result = try kaiten("folder", "add", "x", "--path", home + "/x", "--type", "recieveonly", "--home", home)
            #expect(result.status == 64, "\(result.stderr)")
            #expect(result.stderr.contains("--type recieveonly") && !result.stderr.contains("config.xml"), "\(result.stderr)")
        }
    }

    @Test func aPathThatLeavesTheFolderIsOneLineForUrl() throws {
        try withHome { home, _ in
            let result = try kaiten("url", "--home", home, "f", "../etc/passwd")
            #expect(result.status == 64 && result.stderr.contains("../etc/passwd"), "\(result.stderr)")
            #expect(!result.stderr.contains("USAGE") && !result.stderr.contains("Usage"), "\(result.stderr)")
        }
    }

    @Test func initPrintsTheDeviceIDAndIdAgrees() throws {
        try withHome { home, _ in
            let id = try kaiten("id", "--home", home)
            #expect(id.status == 0)
            #expect(id.stdout.range(of: #"^[A-Z2-7]{7}(-[A-Z2-7]{7}){7}\n$"#, options: .regularExpression) != nil)
            let json = try kaiten("id", "--home", home, "--json")
            let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: String]
            #expect(object?["device_id"] == id.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }

    @Test func homeComesFromTheEnvironment() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let created = try KaitenCLI.run(["init", "--name", "x"], environment: ["KAITEN_HOME": dir.file("k")])
        #expect(created.status == 0)
        #expect(FileManager.default.fileExists(atPath: dir.file("k/config.xml")))
        let xdg = try KaitenCLI.run(["init", "--name", "x"], environment: ["XDG_CONFIG_HOME": dir.file("xdg")])
        #expect(xdg.status == 0)
        #expect(FileManager.default.fileExists(atPath: dir.file("xdg/kaiten/cert.pem")))
    }

    @Test func initNeverOverwritesAndNamesTheFiles() throws {
        try withHome { home, _ in
            let before = try String(contentsOfFile: home + "/config.xml", encoding: .utf8)
            let again = try kaiten("init", "--home", home)
            #expect(again.status == 1)
            #expect(again.stderr.contains("config.xml"))
            #expect(again.stderr.contains("cert.pem"))
            #expect(again.stderr.contains("key.pem"))
            #expect(again.stdout.isEmpty)
            #expect(try String(contentsOfFile: home + "/config.xml", encoding: .utf8) == before)
        }
    }

    @Test func peerAddListRemove() throws {
        try withHome { home, _ in
            let add = try kaiten(
                "peer", "add", "--home", home, Self.peer.lowercased(), "--name", "nas", "--address",
                "tcp://127.0.0.1:22001")
            #expect(add.status == 0, "\(add.stderr)")
            let list = try kaiten("peer", "ls", "--home", home, "--json")
            let rows = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
            let nas = try #require(rows.first { $0["device_id"] as? String == Self.peer })
            #expect(nas["name"] as? String == "nas")
            #expect(nas["addresses"] as? [String] == ["tcp://127.0.0.1:22001"])
            #expect(rows.filter { $0["is_self"] as? Bool == true }.count == 1)

            let duplicate = try kaiten("peer", "add", "--home", home, Self.peer)
            #expect(duplicate.status == 1)
            #expect(duplicate.stderr.contains("already configured"))

            let rm = try kaiten("peer", "rm", "--home", home, Self.peer)
            #expect(rm.status == 0)
            #expect(!(try kaiten("peer", "ls", "--home", home)).stdout.contains(Self.peer))
        }
    }

    @Test func invalidDeviceIDIsOneClearLine() throws {
        try withHome { home, _ in
            let before = try String(contentsOfFile: home + "/config.xml", encoding: .utf8)
            let typo = String(Self.peer.dropLast()) + "B"
            let result = try kaiten("peer", "add", "--home", home, typo)
            #expect(result.status == 64, "a malformed argument is a usage error (issue 10, item 10)")
            #expect(result.stderr.contains("check character"))
            #expect(result.stderr.split(separator: "\n").count == 1)
            #expect(try String(contentsOfFile: home + "/config.xml", encoding: .utf8) == before)
        }
    }

    @Test func folderAddShareList() throws {
        try withHome { home, dir in
            #expect(try kaiten("peer", "add", "--home", home, Self.peer, "--name", "nas").status == 0)
            let fresh = dir.file("data/photos")
            let add = try kaiten(
                "folder", "add", "--home", home, "photos", "--path", fresh, "--type", "receiveonly", "--share",
                Self.peer)
            #expect(add.status == 0, "\(add.stderr)")
            // Kaiten created the directory, so it also made the marker.
            #expect(FileManager.default.fileExists(atPath: fresh + "/.stfolder"))

            // An existing directory gets no marker: it might be an unmounted disk.
            let existing = dir.file("existing")
            try FileManager.default.createDirectory(atPath: existing, withIntermediateDirectories: true)
            #expect(try kaiten("folder", "add", "--home", home, "docs", "--path", existing).status == 0)
            #expect(!FileManager.default.fileExists(atPath: existing + "/.stfolder"))
            #expect(try kaiten("folder", "share", "--home", home, "docs", Self.peer).status == 0)

            let list = try kaiten("folder", "ls", "--home", home, "--json")
            let rows = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
            #expect(rows.map { $0["id"] as? String } == ["photos", "docs"])
            #expect(rows[0]["type"] as? String == "receiveonly")
            #expect(rows[0]["max_conflicts"] as? Int == 10)
            #expect((rows[1]["devices"] as? [String])?.contains(Self.peer) == true)
        }
    }

    /// Issue 10, item 19: peers by name wherever an ID goes; `peer edit`, `folder unshare`
    /// (the peer's index of the folder dropped), `folder rm` (files and selection kept, Kaiten's
    /// records gone), and overlapping folder paths refused.
    @Test func folderAndPeerManagement() throws {
        try withHome { home, dir in
            let laptop = "MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD"
            #expect(try kaiten("peer", "add", "--home", home, Self.peer, "--name", "nas").status == 0)
            #expect(try kaiten("peer", "add", "--home", home, laptop, "--name", "laptop").status == 0)
            let data = dir.file("data/photos")
            let add = try kaiten("folder", "add", "--home", home, "photos", "--path", data, "--share", "nas")
            #expect(add.status == 0, "\(add.stderr)")
            let share = try kaiten("folder", "share", "--home", home, "photos", "LAPTOP")
            #expect(share.status == 0 && share.stderr.contains("laptop (MFZWI3D)"), "\(share.stderr)")
            let unknown = try kaiten("folder", "share", "--home", home, "photos", "phone")
            #expect(unknown.status == 1 && unknown.stderr.contains("no configured peer is named \"phone\""), "\(unknown.stderr)")
            let byPrefix = try kaiten("peer", "edit", "--home", home, "LXONAJ2", "--address", "tcp://10.0.0.1:22000", "--compression", "always")
            #expect(byPrefix.status == 0, "\(byPrefix.stderr)")
            let renamed = try kaiten("peer", "edit", "--home", home, "nas", "--name", "nas2")
            #expect(renamed.status == 0, "\(renamed.stderr)")
            let nothing = try kaiten("peer", "edit", "--home", home, "nas2")
            #expect(nothing.status == 64 && nothing.stderr.contains("nothing to change"), "\(nothing.stderr)")
            let peers = try #require(try JSONSerialization.jsonObject(with: Data(kaiten("peer", "ls", "--home", home, "--json").stdout.utf8)) as? [[String: Any]])
            let nas = try #require(peers.first { $0["device_id"] as? String == Self.peer })
            #expect(nas["name"] as? String == "nas2")
            #expect(nas["addresses"] as? [String] == ["tcp://10.0.0.1:22000"])
            #expect(nas["compression"] as? String == "always")

            // Overlapping paths: the same, inside, around — refused, config.xml unchanged.
            let config = try Data(contentsOf: URL(fileURLWithPath: home + "/config.xml"))
            for (id, path) in [("same", data), ("inner", data + "/2024"), ("outer", dir.file("data")), ("slash", data + "/")] {
                let overlap = try kaiten("folder", "add", "--home", home, id, "--path", path)
                #expect(overlap.status == 1 && overlap.stderr.contains("folders must not overlap"), "\(id): \(overlap.stderr)")
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: home + "/config.xml")) == config)
            #expect(try kaiten("folder", "add", "--home", home, "sibling", "--path", dir.file("data/photos2")).status == 0)

            // unshare drops the peer's index of the folder.
            let logPath = Home(path: home).indexLogPath(folderID: "photos")
            try FileManager.default.createDirectory(atPath: (logPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            let laptopID = try DeviceID(laptop)
            let nasID = try DeviceID(Self.peer)
            func entry(_ name: String, by device: DeviceID) -> BEPFileInfo {
                var file = BEPFileInfo()
                file.name = name
                file.type = .directory
                file.sequence = 1
                var counter = BEPCounter()
                counter.id = device.shortID
                counter.value = 1
                file.version.counters = [counter]
                return file
            }
            let log = try IndexLog.open(path: logPath, folderID: "photos")
            try log.apply(device: laptopID, indexID: 7, files: [entry("from-laptop", by: laptopID)], isFullIndex: true)
            try log.apply(device: nasID, indexID: 8, files: [entry("from-nas", by: nasID)], isFullIndex: true)
            log.close()
            let unshare = try kaiten("folder", "unshare", "--home", home, "photos", "laptop")
            #expect(unshare.status == 0, "\(unshare.stderr)")
            let after = try IndexLog.open(path: logPath, folderID: "photos", readOnly: true)
            #expect(after.index.global("from-laptop") == nil)
            #expect(after.index.global("from-nas") != nil)
            #expect(after.checkpoints[laptopID] == nil && after.checkpoints[nasID] != nil)
            after.close()
            let folders = try #require(try JSONSerialization.jsonObject(with: Data(kaiten("folder", "ls", "--home", home, "--json").stdout.utf8)) as? [[String: Any]])
            #expect((folders.first { $0["id"] as? String == "photos" }?["devices"] as? [String])?.contains(laptop) == false)

            // peer rm by name: gone from config.xml and from the log.
            let removed = try kaiten("peer", "rm", "--home", home, "nas2")
            #expect(removed.status == 0, "\(removed.stderr)")
            let afterRm = try IndexLog.open(path: logPath, folderID: "photos", readOnly: true)
            #expect(afterRm.index.global("from-nas") == nil)
            afterRm.close()

            // folder rm: files and the selection file stay; Kaiten's records of it go.
            try TestFiles.write(data + "/keep.jpg", "a photo\n")
            try TestFiles.write(home + "/selections/photos.txt", "keep.jpg\n")
            let rm = try kaiten("folder", "rm", "--home", home, "photos")
            #expect(rm.status == 0, "\(rm.stderr)")
            #expect(try String(contentsOfFile: data + "/keep.jpg", encoding: .utf8) == "a photo\n")
            #expect(FileManager.default.fileExists(atPath: home + "/selections/photos.txt"))
            #expect(!FileManager.default.fileExists(atPath: logPath))
            #expect(!(try kaiten("folder", "ls", "--home", home).stdout.contains("photos ")))
            // Now the path is free again.
            #expect(try kaiten("folder", "add", "--home", home, "photos-again", "--path", data).status == 0)
        }
    }

    @Test func folderMistakesChangeNothing() throws {
        try withHome { home, dir in
            let before = try String(contentsOfFile: home + "/config.xml", encoding: .utf8)
            let badType = try kaiten("folder", "add", "--home", home, "x", "--path", dir.file("x"), "--type", "mirror")
            // A usage error (issue 36, item 30: it exited 1 as if config.xml were at fault).
            #expect(badType.status == 64)
            #expect(badType.stderr.contains("--type mirror: not a folder type"))
            #expect(!FileManager.default.fileExists(atPath: dir.file("x")))
            let unknownPeer = try kaiten("folder", "add", "--home", home, "x", "--path", dir.file("x"), "--share", Self.peer)
            #expect(unknownPeer.status == 1)
            #expect(unknownPeer.stderr.contains("peer add"))
            #expect(try String(contentsOfFile: home + "/config.xml", encoding: .utf8) == before)
            #expect(try kaiten("folder", "add", "--home", home, "x", "--path", dir.file("x")).status == 0)
            let duplicate = try kaiten("folder", "add", "--home", home, "x", "--path", dir.file("y"))
            #expect(duplicate.status == 1)
            #expect(duplicate.stderr.contains("already configured"))
        }
    }

    @Test func malformedConfigNamesFileAndLine() throws {
        try withHome { home, _ in
            var text = try String(contentsOfFile: home + "/config.xml", encoding: .utf8)
            text = text.replacingOccurrences(of: "<paused>false</paused>", with: "<paused>false</pause>")
            try text.write(toFile: home + "/config.xml", atomically: true, encoding: .utf8)
            let result = try kaiten("peer", "ls", "--home", home)
            #expect(result.status == 1)
            #expect(result.stderr.hasPrefix("kaiten: \(home)/config.xml:4: "))
        }
    }

    @Test func garbledPEMNamesTheFile() throws {
        try withHome { home, _ in
            try "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".write(
                toFile: home + "/cert.pem", atomically: true, encoding: .utf8)
            let result = try kaiten("id", "--home", home)
            #expect(result.status == 1)
            #expect(result.stderr.contains("\(home)/cert.pem"))
        }
    }

    @Test func missingOrUnusableHome() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let missing = try kaiten("id", "--home", dir.file("nothing"))
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("kaiten init"))
        try "x".write(toFile: dir.file("file"), atomically: true, encoding: .utf8)
        let notDirectory = try kaiten("peer", "ls", "--home", dir.file("file"))
        #expect(notDirectory.status == 1)
        #expect(notDirectory.stderr.contains("not a directory"))
    }

    @Test func usageErrorsExit64() throws {
        let result = try kaiten("peer", "add")
        #expect(result.status == 64)
    }

    /// The shell example of `plan --help` says what each exit code means when run as shown
    /// (issue 36, item 27: `A || [ $? -eq 2 ] && echo pending` printed "pending" in sync).
    @Test(arguments: [(0, ""), (2, "pending\n"), (1, "")])
    func thePlanHelpsExitCodeExampleSaysWhatEachCodeMeans(code: Int, said: String) throws {
        let help = try KaitenCLI.run(["plan", "--help"]).stdout
        let example = try #require(help.split(separator: "\n").first { $0.contains("--detailed-exitcode") && $0.contains("kaiten plan") && $0.contains("$?") })
        let script = "kaiten() { return \(code); }\n" + example.trimmingCharacters(in: .whitespaces)
        let run = try ProcessRunner.run("/bin/bash", ["-c", script])
        #expect(run.stdout == said, "\(example) with exit \(code): \(run.stdout)")
    }

    @Test(arguments: [
        ["--help"], ["init", "--help"], ["id", "--help"], ["peer", "add", "--help"], ["peer", "rm", "--help"],
        ["peer", "ls", "--help"], ["peer", "check", "--help"], ["index", "sync", "--help"], ["index", "compact", "--help"],
        ["index", "rebuild", "--help"], ["ls", "--help"], ["status", "--help"], ["folder", "add", "--help"], ["folder", "share", "--help"], ["folder", "unshare", "--help"], ["folder", "rm", "--help"], ["folder", "ls", "--help"], ["peer", "edit", "--help"],
        ["select", "--help"], ["deselect", "--help"], ["adopt", "--help"], ["plan", "--help"], ["show", "--help"],
        ["apply", "--help"], ["conflicts", "--help"], ["resolve", "--help"],
        ["cat", "--help"], ["get", "--help"], ["serve", "--help"], ["url", "--help"], ["run", "--help"],
    ])
    func everyVerbHasHelp(_ args: [String]) throws {
        let result = try KaitenCLI.run(args)
        #expect(result.status == 0)
        #expect(result.stdout.contains("USAGE:"))
        #expect(result.stdout.contains("--home"))
        // README promises an example in every verb's help (issue 10, item 22).
        if args != ["--help"] { #expect(result.stdout.contains("Example"), "\(args)") }
    }
}
