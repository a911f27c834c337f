import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// select / deselect / adopt / plan / show without peers: the selection file, errors, exit codes.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct SelectionCLITests {
    func kaiten(_ args: String...) throws -> ProcessResult { try KaitenCLI.run(args) }

    /// A home with one folder, `docs`, at `<dir>/docs` (with its marker).
    func withFolder(_ body: (String, TemporaryDirectory) throws -> Void) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = dir.file("home")
        #expect(try kaiten("init", "--home", home, "--name", "ci", "--listen", "tcp://127.0.0.1:22000").status == 0)
        let added = try kaiten("folder", "add", "--home", home, "docs", "--path", dir.file("docs"))
        #expect(added.status == 0, "\(added.stderr)")
        try body(home, dir)
    }

    @Test func selectEditsTheFileKeepingCommentsAndRefusesTypos() throws {
        try withFolder { home, _ in
            let file = home + "/selections/docs.txt"
            let typo = try kaiten("select", "--home", home, "docs", "reports")
            #expect(typo.status == 1)
            #expect(typo.stderr.contains("\"reports\" is not in the global index of docs"))
            #expect(typo.stderr.contains("--force"))
            #expect(!FileManager.default.fileExists(atPath: file))

            try FileManager.default.createDirectory(atPath: home + "/selections", withIntermediateDirectories: true)
            try "# kept comment\n\nold/one\n".write(toFile: file, atomically: true, encoding: .utf8)
            // A name with glob characters is selected literally when escaped; unescaped it is a
            // pattern (issue 10, item 16). Both are written the same way here.
            // "café" typed in NFD: stored in NFC (compared as bytes: String == calls them equal).
            let added = try kaiten("select", "--home", home, "docs", "--force", "/reports/", "a \\[1\\]\\*.txt", "cafe\u{301}", "old/one/deeper")
            #expect(added.status == 0, "\(added.stderr)")
            #expect(added.stdout.contains("old/one/deeper: already selected through old/one"))
            #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == Data("# kept comment\n\nold/one\nreports\na \\[1\\]\\*.txt\ncaf\u{E9}\n".utf8))

            let removed = try kaiten("deselect", "--home", home, "docs", "reports", "old/one/deeper")
            #expect(removed.status == 1)
            #expect(removed.stdout.contains("deselected reports"))
            #expect(removed.stderr.contains("old/one/deeper is selected through old/one"))
            #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == Data("# kept comment\n\nold/one\na \\[1\\]\\*.txt\ncaf\u{E9}\n".utf8))

            let escape = try kaiten("select", "--home", home, "docs", "--force", "../etc")
            #expect(escape.status == 1)
            #expect(escape.stderr.contains("not a clean folder-relative path"))
        }
    }

    /// Issue 10, item 16: globs on the command line become pattern lines when they match
    /// something (refused when they match nothing, unless --force); deselect removes them.
    @Test func patternsFromTheCommandLine() throws {
        try withFolder { home, _ in
            let file = home + "/selections/docs.txt"
            let none = try kaiten("select", "--home", home, "docs", "photos/2024/*/IMG_000?.jpg")
            #expect(none.status == 1)
            #expect(none.stderr.contains("matches nothing"), "\(none.stderr)")
            let forced = try kaiten("select", "--home", home, "docs", "--force", "photos/2024/*/IMG_000?.jpg")
            #expect(forced.status == 0, "\(forced.stderr)")
            #expect(try String(contentsOfFile: file, encoding: .utf8) == "photos/2024/*/IMG_000?.jpg\n")
            let removed = try kaiten("deselect", "--home", home, "docs", "photos/2024/*/IMG_000?.jpg")
            #expect(removed.status == 0, "\(removed.stderr)")
            #expect(removed.stdout.contains("deselected the pattern"))
            #expect(try String(contentsOfFile: file, encoding: .utf8) == "")
        }
    }

    @Test func adoptImportsASelectiveStIgnoreAndRefusesOthersQuotingThem() throws {
        try withFolder { home, dir in
            let stignore = dir.file("docs/.stignore")
            try "(?d).DS_Store\n!/a\\[1\\].txt\n!/photos/2025\n*\n".write(toFile: stignore, atomically: true, encoding: .utf8)
            let adopted = try kaiten("adopt", "--home", home, "docs")
            #expect(adopted.status == 0, "\(adopted.stderr)")
            #expect(try String(contentsOfFile: home + "/selections/docs.txt", encoding: .utf8) == "(?d).DS_Store\na\\[1\\].txt\nphotos/2025\n")
            // The plan now renders the same (already sorted) .stignore: nothing to write.
            let plan = try kaiten("plan", "--home", home, "--offline", "--json")
            #expect(plan.status == 0, "\(plan.stderr)")
            let object = try JSONSerialization.jsonObject(with: Data(plan.stdout.utf8)) as? [String: Any]
            let folder = (object?["folders"] as? [[String: Any]])?.first
            #expect((folder?["stignore"] as? [String: Any])?["changed"] as? Bool == false)

            try "// hand-written\n*.iso\n!/keep\n*\n".write(toFile: stignore, atomically: true, encoding: .utf8)
            let refused = try kaiten("adopt", "--home", home, "docs")
            #expect(refused.status == 1)
            #expect(refused.stderr.contains("\"*.iso\""))
            let unmanaged = try kaiten("plan", "--home", home, "--offline")
            #expect(unmanaged.status == 0)
            #expect(unmanaged.stdout.contains("not in Sushitrain's selective grammar"))
        }
    }

    /// Issue 19, item 10: a CRLF .stignore is adopted; an empty one imports nothing without
    /// complaint; a line that escapes the folder is reported at its file and line.
    @Test func adoptReadsCRLFAndEmptyFilesAndNamesTheBadLine() throws {
        try withFolder { home, dir in
            let stignore = dir.file("docs/.stignore")
            try "(?d).DS_Store\r\n!/photos/2025\r\n*\r\n".write(toFile: stignore, atomically: true, encoding: .utf8)
            let crlf = try kaiten("adopt", "--home", home, "docs")
            #expect(crlf.status == 0, "\(crlf.stderr)")
            #expect(try String(contentsOfFile: home + "/selections/docs.txt", encoding: .utf8) == "(?d).DS_Store\nphotos/2025\n")

            try "".write(toFile: stignore, atomically: true, encoding: .utf8)
            let empty = try kaiten("adopt", "--home", home, "docs")
            #expect(empty.status == 0, "\(empty.stderr)")
            #expect(empty.stdout.contains("0 selected path(s)"))

            try "!/ok\n!/../x\n*\n".write(toFile: stignore, atomically: true, encoding: .utf8)
            let bad = try kaiten("adopt", "--home", home, "docs")
            #expect(bad.status != 0)
            #expect(bad.stderr.contains(stignore + ":2"), "\(bad.stderr)")
            #expect(!bad.stderr.contains("argument:0"), "\(bad.stderr)")
            // Nothing was half-imported.
            #expect(try String(contentsOfFile: home + "/selections/docs.txt", encoding: .utf8) == "(?d).DS_Store\nphotos/2025\n")
        }
    }

    @Test func applySkipsAFolderWithoutItsMarkerAndSaysSo() throws {
        try withFolder { home, dir in
            let second = try kaiten("folder", "add", "--home", home, "other", "--path", dir.file("other"))
            #expect(second.status == 0)
            try FileManager.default.removeItem(atPath: dir.file("docs/.stfolder"))
            let applied = try kaiten("apply", "--home", home, "--yes")
            #expect(applied.status == 4, "\(applied.stdout)\(applied.stderr)")
            #expect(applied.stderr.contains("docs: skipped:") && applied.stderr.contains(".stfolder is missing"))
            // The other folder went ahead: its .stignore was written; nothing appeared in docs.
            #expect(FileManager.default.fileExists(atPath: dir.file("other/.stignore")))
            #expect(!FileManager.default.fileExists(atPath: dir.file("docs/.stignore")))
        }
    }

    @Test func planExitCodesAndErrors() throws {
        try withFolder { home, dir in
            let first = try kaiten("plan", "--home", home, "--offline", "--detailed-exitcode")
            #expect(first.status == 2, "\(first.stdout)\(first.stderr)")
            #expect(first.stdout.contains("~ write       .stignore (0 selected paths)"))
            try "*\n".write(toFile: dir.file("docs/.stignore"), atomically: true, encoding: .utf8)
            let synced = try kaiten("plan", "--home", home, "--offline", "--detailed-exitcode")
            #expect(synced.status == 0, "\(synced.stdout)\(synced.stderr)")
            #expect(synced.stdout.contains("No changes."))

            try FileManager.default.createDirectory(atPath: home + "/selections", withIntermediateDirectories: true)
            try "ok\n(?d)a/b\n".write(toFile: home + "/selections/docs.txt", atomically: true, encoding: .utf8)
            let bad = try kaiten("plan", "--home", home, "--offline")
            #expect(bad.status == 1)
            #expect(bad.stderr.contains("selections/docs.txt:2:"))
            try FileManager.default.removeItem(atPath: home + "/selections/docs.txt")

            try FileManager.default.removeItem(atPath: dir.file("docs/.stfolder"))
            let unmounted = try kaiten("plan", "--home", home, "--offline")
            #expect(unmounted.status == 1)
            #expect(unmounted.stderr.contains(".stfolder is missing"))

            let unknown = try kaiten("plan", "--home", home, "--offline", "nope")
            #expect(unknown.status == 1 && unknown.stderr.contains("\"nope\" is not configured"))

            try "{\"format_version\": \"2.0\"}".write(toFile: dir.file("future.plan"), atomically: true, encoding: .utf8)
            let future = try kaiten("show", "--home", home, dir.file("future.plan"))
            #expect(future.status == 1 && future.stderr.contains("newer than this kaiten understands"))
            // An older plan (1.0 had no causes, 1.1 no renames) is made again, not guessed at.
            for old in ["1.0", "1.1"] {
                try "{\"format_version\": \"\(old)\"}".write(toFile: dir.file("old.plan"), atomically: true, encoding: .utf8)
                let refused = try kaiten("apply", "--home", home, dir.file("old.plan"), "--yes")
                #expect(refused.status == 1, "\(refused.stderr)")
                #expect(refused.stderr.contains("plan format \(old) was written by another kaiten version") && refused.stderr.contains("make a new plan"), "\(refused.stderr)")
            }
            let missing = try kaiten("show", "--home", home, dir.file("none.plan"))
            #expect(missing.status == 1 && missing.stderr.contains("none.plan"))
        }
    }
}
