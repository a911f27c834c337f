import Foundation
import KaitenTestSupport
import Testing

/// The built `kaiten` binary, run as a user runs it: exit codes, stdout/stderr, --json shapes.
struct CLITests {
    static let peer = "LXONAJ2-BUJHTRL-4AZYOG4-5H4JWNG-XA4OJHO-JEGBUIY-D5N2DL5-KCJ33AQ"

    func kaiten(_ args: String...) throws -> ProcessResult { try KaitenCLI.run(args) }

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

    @Test func folderMistakesChangeNothing() throws {
        try withHome { home, dir in
            let before = try String(contentsOfFile: home + "/config.xml", encoding: .utf8)
            let badType = try kaiten("folder", "add", "--home", home, "x", "--path", dir.file("x"), "--type", "mirror")
            #expect(badType.status == 1)
            #expect(badType.stderr.contains("unknown folder type"))
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

    @Test(arguments: [
        ["--help"], ["init", "--help"], ["id", "--help"], ["peer", "add", "--help"], ["peer", "rm", "--help"],
        ["peer", "ls", "--help"], ["peer", "check", "--help"], ["index", "sync", "--help"], ["index", "compact", "--help"],
        ["index", "rebuild", "--help"], ["ls", "--help"], ["status", "--help"], ["folder", "add", "--help"], ["folder", "share", "--help"], ["folder", "ls", "--help"],
        ["select", "--help"], ["deselect", "--help"], ["adopt", "--help"], ["plan", "--help"], ["show", "--help"],
        ["apply", "--help"], ["conflicts", "--help"], ["resolve", "--help"],
        ["cat", "--help"], ["get", "--help"], ["serve", "--help"], ["url", "--help"],
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
