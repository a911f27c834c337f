import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Selections and plans against a real syncthing peer, and a second real syncthing as the oracle
/// for the `.stignore` Kaiten writes.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct PlanInteropTests {
    func kaiten(_ args: [String]) throws -> ProcessResult { try KaitenCLI.run(args) }

    static let folder = "media"

    /// Names that exercise the escaping: glob characters, `!`, spaces, non-ASCII (NFC).
    static let files: [String: String] = [
        "photos/2025/a.jpg": "jpeg a",
        "photos/2025/b [1].jpg": "jpeg b",
        "photos/2025/junk.tmp": "a (?d) line keeps this out",
        "photos/2025/deep/c.jpg": "jpeg c",
        "photos/2024/old.jpg": "old jpeg",
        "docs/!bang.txt": "bang",
        "docs/with space.pdf": "pdf",
        "docs/café.pdf": "café",
        "docs/a*b?.txt": "stars",
        "docs/notes.txt": "notes, also present locally",
        "docs/other.txt": "not selected",
        "music/x.mp3": "mp3 x",
        "music/y.mp3": "mp3 y",
        "music/cover.png": "png",
        "big.bin": "",
    ]

    static func makePeerData(_ path: String) throws {
        for (name, text) in files where name != "big.bin" { try TestFiles.write(path + "/" + name, text + "\n") }
        try TestFiles.random(path + "/big.bin", size: 3 << 20)
        try FileManager.default.createSymbolicLink(atPath: path + "/docs/link", withDestinationPath: "notes.txt")
    }

    /// Every regular file and symlink under a folder, except syncthing's own.
    static func filesOnDisk(_ root: String) -> Set<String> {
        var out: Set<String> = []
        let enumerator = FileManager.default.enumerator(atPath: root)
        while let name = enumerator?.nextObject() as? String {
            if name.hasPrefix(".stfolder") || name == ".stignore" || name.hasPrefix(".stversions") { continue }
            var info = stat()
            lstat(root + "/" + name, &info)
            if info.st_mode & S_IFMT != S_IFDIR { out.insert(name) }
        }
        return out
    }

    static func status(_ st: SyncthingInstance, _ folder: String) async throws -> [String: Any] {
        try await st.get("/rest/db/status?folder=\(folder)") as? [String: Any] ?? [:]
    }

    @Test func planListsExactlyTheSelectionAndASecondSyncthingAgrees() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-plan")
        defer { dir.remove() }
        let a = try SyncthingInstance.generate(in: dir.path, name: "a")
        let b = try SyncthingInstance.generate(in: dir.path, name: "b")
        let home = dir.file("kaiten")
        let created = try kaiten(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:0"])
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let pathA = dir.file("data-a")
        let pathB = dir.file("data-b")
        let local = dir.file("k-data")
        try Self.makePeerData(pathA)

        try await withSyncthing(a) { a in
            try await a.addDevice(me, name: "k")
            try await a.addFolder(id: Self.folder, path: pathA, devices: [me])
            try await a.waitUntil("A scanned", timeout: 60) {
                let s = try await Self.status(a, Self.folder)
                return s["state"] as? String == "idle" && (s["localFiles"] as? Int ?? 0) >= Self.files.count
            }
            #expect(try kaiten(["peer", "add", "--home", home, a.deviceID.description, "--name", "a", "--address", a.address]).status == 0)
            #expect(try kaiten(["folder", "add", "--home", home, Self.folder, "--path", local, "--share", a.deviceID.description]).status == 0)
            let sync = try kaiten(["index", "sync", "--home", home])
            #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")

            // The scanner hashes exactly as syncthing does: every file of A's folder, scanned by
            // Kaiten, has the blocks hash syncthing announced.
            let log = try IndexLog.open(path: Home(path: home).indexLogPath(folderID: Self.folder), folderID: Self.folder, readOnly: true)
            let (scanned, _) = try FolderScanner(root: pathA).scan(previous: LocalTree())
            var compared = 0
            for entry in log.index.allGlobal() where entry.file.type == .file {
                #expect(scanned[entry.path]?.contentHash == entry.file.contentHash, "\(entry.path)")
                compared += 1
            }
            #expect(compared == Self.files.count)
            log.close()

            // Local state: a copy of one global file (not selected: freed), a file of our own.
            try TestFiles.write(local + "/docs/notes.txt", Self.files["docs/notes.txt"]! + "\n")
            try TestFiles.write(local + "/mine.txt", "only here\n")

            // select / deselect edit the selection file.
            // "café" typed in NFD (as macOS and some input methods send it): stored in NFC.
            #expect(try kaiten(["select", "--home", home, Self.folder, "photos/2025", "/docs/!bang.txt", "docs/with space.pdf", "docs/cafe\u{301}.pdf", "docs/a*b?.txt", "docs/link"]).status == 0)
            let selected = try Data(contentsOf: URL(fileURLWithPath: Home(path: home).selectionPath(folderID: Self.folder)))
            #expect(selected.range(of: Data("docs/caf\u{E9}.pdf\n".utf8)) != nil, "NFC bytes in the selection file")
            #expect(selected.range(of: Data("cafe\u{301}".utf8)) == nil, "no NFD bytes in the selection file")
            let typo = try kaiten(["select", "--home", home, Self.folder, "photos/2052"])
            #expect(typo.status == 1)
            #expect(typo.stderr.contains("not in the global index"))
            let covered = try kaiten(["select", "--home", home, Self.folder, "photos/2025/a.jpg"])
            #expect(covered.status == 0 && covered.stdout.contains("already selected through photos/2025"))
            #expect(try kaiten(["select", "--home", home, Self.folder, "docs/other.txt"]).status == 0)
            #expect(try kaiten(["deselect", "--home", home, Self.folder, "docs/other.txt"]).status == 0)
            // A glob and a (?d) line, written by hand, as a user would in git.
            let selectionPath = Home(path: home).selectionPath(folderID: Self.folder)
            var text = try String(contentsOfFile: selectionPath, encoding: .utf8)
            text = "# what this laptop keeps\n(?d)*.tmp\n" + text + "music/*.mp3\n"
            try text.write(toFile: selectionPath, atomically: true, encoding: .utf8)

            let planned = try kaiten(["plan", "--home", home, "--json", "--out", dir.file("p.plan"), "--detailed-exitcode"])
            #expect(planned.status == 2, "\(planned.stderr)")
            let plan = try JSONDecoder().decode(Plan.self, from: Data(planned.stdout.utf8))
            let folderPlan = try #require(plan.folders.first)
            let pulls = Set(folderPlan.actions.filter { $0.action == .pull }.map(\.path))
            let wanted: Set<String> = [
                "photos/2025/a.jpg", "photos/2025/b [1].jpg", "photos/2025/deep/c.jpg", "docs/!bang.txt", "docs/with space.pdf",
                "docs/café.pdf", "docs/a*b?.txt", "docs/link", "music/x.mp3", "music/y.mp3",
            ]
            // Bytes, not String ==, which calls NFC and NFD spellings equal.
            #expect(Set(pulls.map { Array($0.utf8) }) == Set(wanted.map { Array($0.utf8) }))
            #expect(pulls.contains { Array($0.utf8) == Array("docs/caf\u{E9}.pdf".utf8) })
            #expect(folderPlan.actions.filter { $0.action == .delete }.map(\.path) == ["docs/notes.txt"])
            #expect(folderPlan.conflicts.map { "\($0.kind.rawValue) \($0.path)" } == ["extraneous mine.txt"])
            #expect(folderPlan.stignore.changed)
            #expect(
                Array(folderPlan.stignore.content.utf8) == Array("""
                    (?d)*.tmp
                    !/docs/\\!bang.txt
                    !/docs/a\\*b\\?.txt
                    !/docs/café.pdf
                    !/docs/link
                    !/docs/with space.pdf
                    !/music/x.mp3
                    !/music/y.mp3
                    !/photos/2025
                    *
                    """.utf8) + [0x0A])
            #expect(plan.baseline.folders.first?.peers.first?.device == a.deviceID.description)
            #expect(plan.summary.pull == wanted.count && plan.summary.delete == 1 && plan.summary.conflicts == 1)
            // Nothing changed on disk.
            #expect(!FileManager.default.fileExists(atPath: local + "/.stignore"))
            #expect(Self.filesOnDisk(local) == ["docs/notes.txt", "mine.txt"])

            // ls shows each entry's local state.
            let ls = try kaiten(["ls", "--home", home, Self.folder, "-R", "--json"])
            #expect(ls.status == 0, "\(ls.stderr)")
            let rows = try #require(try JSONSerialization.jsonObject(with: Data(ls.stdout.utf8)) as? [[String: Any]])
            let state = Dictionary(uniqueKeysWithValues: rows.map { ($0["path"] as! String, "\($0["selected"]!) \($0["local"]!)") })
            #expect(state["photos/2025"] == "explicit absent")
            #expect(state["photos/2025/a.jpg"] == "parent absent")
            #expect(state["photos/2025/junk.tmp"] == "no absent")
            #expect(state["docs/notes.txt"] == "no in-sync")
            #expect(state["docs"] == "no in-sync")
            #expect(state["mine.txt"] == "no extraneous")

            // The saved plan is exactly what was printed; show renders it.
            let saved = try JSONDecoder().decode(Plan.self, from: Data(contentsOf: URL(fileURLWithPath: dir.file("p.plan"))))
            #expect(saved == plan)
            let shown = try kaiten(["show", "--home", home, dir.file("p.plan")])
            #expect(shown.status == 0)
            #expect(shown.stdout.contains("+ pull        photos/2025/b [1].jpg"))
            #expect(shown.stdout.contains("- delete      docs/notes.txt"))
            // The text says why, as the JSON does (issue 36, item 28).
            let deleteLine = shown.stdout.split(separator: "\n").first { $0.contains("- delete      docs/notes.txt") }
            let reason = saved.folders.flatMap(\.actions).first { $0.path == "docs/notes.txt" }?.reason
            #expect(reason != nil && deleteLine?.hasSuffix("): \(reason!)") == true, "\(deleteLine ?? "") / \(reason ?? "")")
            #expect(shown.stdout.contains("! extraneous  mine.txt"))
            #expect(shown.stdout.contains("Plan: 10 to pull"))

            // The oracle: syncthing B receives the folder with the .stignore Kaiten planned; what
            // it ends up holding is exactly what Kaiten would pull.
            try FileManager.default.createDirectory(atPath: pathB + "/.stfolder", withIntermediateDirectories: true)
            try folderPlan.stignore.content.write(toFile: pathB + "/.stignore", atomically: true, encoding: .utf8)
            try await withSyncthing(b) { b in
                try await a.addDevice(b.deviceID, name: "b", addresses: [b.address])
                try await b.addDevice(a.deviceID, name: "a", addresses: [a.address])
                try await a.addFolder(id: Self.folder, path: pathA, devices: [me, b.deviceID])
                try await b.addFolder(id: Self.folder, path: pathB, type: "receiveonly", devices: [a.deviceID])
                var stable = 0
                try await b.waitUntil("B synced its selection", timeout: 120) {
                    let s = try await Self.status(b, Self.folder)
                    let done = s["state"] as? String == "idle" && s["needTotalItems"] as? Int == 0
                        && (s["globalFiles"] as? Int ?? 0) > 0
                    stable = done ? stable + 1 : 0
                    return stable >= 5
                }
                #expect(Self.filesOnDisk(pathB) == wanted)
            }
        }
    }
}
