import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenSync
import KaitenReconcile
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Wrong results a user of several devices met (issue 19, items 5 to 8), against real syncthing.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct WrongResultsInteropTests {
    static let folder = "f"
    typealias World = ApplyInteropTests.World

    static func mode(_ path: String) -> mode_t {
        var info = stat()
        lstat(path, &info)
        return info.st_mode & 0o7777
    }

    /// Permission changes on the peer are planned (a mode-only `chmod` action) and applied, for
    /// files and directories (a 0555 directory is made 0555, after its files are in).
    @Test func permissionsFollowThePeer() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-perms")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        let p = world.peerData
        try TestFiles.write(p + "/p755", "was 0755\n")
        try TestFiles.write(p + "/p644", "was 0644\n")
        try TestFiles.write(p + "/ro/a.txt", "inside a read-only directory\n")
        chmod(p + "/p755", 0o755)
        chmod(p + "/p644", 0o644)
        chmod(p + "/ro", 0o555)
        try await withSyncthing(st) { st in
            try await world.connect(st)
            try await st.addFolder(id: Self.folder, path: p, devices: [world.me])
            try await ApplyInteropTests.waitScanned(st, files: 3)
            try world.addFolder(sharedWith: [st.deviceID])
            // copyOwnershipFromParent (issue 19, item 11): files take the folder's owner (root can).
            let configPath = world.home + "/config.xml"
            let config = try String(contentsOfFile: configPath, encoding: .utf8)
            try config.replacingOccurrences(
                of: "<copyOwnershipFromParent>false</copyOwnershipFromParent>", with: "<copyOwnershipFromParent>true</copyOwnershipFromParent>"
            ).write(toFile: configPath, atomically: true, encoding: .utf8)
            let owner: uid_t = getuid() == 0 ? 65534 : getuid()
            if getuid() == 0 { chown(world.local, owner, owner) }
            #expect(try world.kaiten("index", "sync").status == 0)
            #expect(try world.kaiten("select", Self.folder, "p755", "p644", "ro").status == 0)
            let first = try world.kaiten("apply", "--yes")
            #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
            for name in ["p755", "p644", "ro", "ro/a.txt"] {
                #expect(Self.mode(world.local + "/" + name) == Self.mode(p + "/" + name), "\(name)")
            }
            var info = stat()
            #expect(lstat(world.local + "/p755", &info) == 0 && info.st_uid == owner, "owner \(info.st_uid)")

            chmod(p + "/p755", 0o700)
            chmod(p + "/p644", 0o755)
            chmod(p + "/ro", 0o750)
            try await ApplyInteropTests.rescan(st)
            let plan = try world.kaiten("plan")
            #expect(plan.stdout.contains("~ chmod       p644 (permissions 0644 → 0755)"), "\(plan.stdout)")
            #expect(plan.stdout.contains("~ chmod       p755 (permissions 0755 → 0700)"), "\(plan.stdout)")
            #expect(plan.stdout.contains("~ chmod       ro/"), "\(plan.stdout)")
            let second = try world.kaiten("apply", "--yes")
            #expect(second.status == 0, "\(second.stdout)\(second.stderr)")
            #expect(Self.mode(world.local + "/p755") == 0o700)
            #expect(Self.mode(world.local + "/p644") == 0o755)
            #expect(Self.mode(world.local + "/ro") == 0o750)
            #expect(try world.kaiten("plan", "--detailed-exitcode").status == 0)
        }
    }

    /// A file the peer replaced by a directory, and a directory it replaced by a file, are
    /// settled in one apply each when the local side is what Kaiten synced.
    @Test func aFileReplacedByADirectoryAndADirectoryByAFile() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-swap")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        let p = world.peerData
        try TestFiles.write(p + "/swap", "a file first\n")
        try TestFiles.write(p + "/back/x.txt", "inside a directory first\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            #expect(try world.kaiten("select", Self.folder, "swap", "back").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)

            try FileManager.default.removeItem(atPath: p + "/swap")
            try TestFiles.write(p + "/swap/in.txt", "now a directory\n")
            try FileManager.default.removeItem(atPath: p + "/back")
            try TestFiles.write(p + "/back", "now a file\n")
            try await ApplyInteropTests.rescan(st)

            let apply = try world.kaiten("apply", "--yes", "--max-delete", "100%")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            #expect(try String(contentsOfFile: world.local + "/swap/in.txt", encoding: .utf8) == "now a directory\n")
            #expect(try String(contentsOfFile: world.local + "/back", encoding: .utf8) == "now a file\n")
            let after = try world.kaiten("plan", "--detailed-exitcode")
            #expect(after.status == 0, "\(after.stdout)")
        }
    }

    /// Names no `.stignore` line can spell are refused with a reason (never another file
    /// selected); `ls` quotes them; selecting their directory brings each, byte for byte. A
    /// `.stignore` Kaiten cannot manage is pending in plan (exit 2) and a brake in apply (exit 4).
    @Test func oddNamesAndAnUnmanagedStIgnore() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-odd")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        let p = world.peerData
        try TestFiles.write(p + "/odd/trail.txt ", "with a trailing space\n")
        try TestFiles.write(p + "/odd/trail.txt", "without\n")
        try TestFiles.write(p + "/odd/new\nline.txt", "a line break in the name\n")
        try TestFiles.write(p + "/line.txt", "at the root: must never be pulled by mistake\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 4)

            for name in ["odd/trail.txt ", "odd/new\nline.txt"] {
                let refused = try world.kaiten("select", Self.folder, name)
                #expect(refused.status != 0, "\(name): \(refused.stdout)")
                #expect(refused.stderr.contains("cannot be selected by name"), "\(refused.stderr)")
            }
            let selectionText = (try? String(contentsOfFile: world.home + "/selections/f.txt", encoding: .utf8)) ?? ""
            #expect(selectionText.isEmpty, "\(selectionText)")

            let ls = try world.kaiten("ls", Self.folder, "odd")
            #expect(ls.stdout.contains("'new'$'\\n''line.txt'"), "\(ls.stdout)")
            #expect(ls.stdout.contains("'trail.txt '"), "\(ls.stdout)")
            #expect(!ls.stdout.contains("new\nline"), "\(ls.stdout)")
            // ls -l: the type as ls shows it (d, -, l), not "dire"/"syml" (issue 10, item 20).
            let long = try world.kaiten("ls", "-l", Self.folder)
            #expect(long.stdout.split(separator: "\n").contains { $0.hasPrefix("d  ") && $0.hasSuffix("]") && $0.contains("odd/") }, "\(long.stdout)")
            #expect(!long.stdout.contains("dire") && !long.stdout.contains("syml"), "\(long.stdout)")
            // A file operand prints its own entry, as ls(1) does (issue 10, item 20).
            let one = try world.kaiten("ls", Self.folder, "odd/trail.txt")
            #expect(one.status == 0 && one.stdout == "odd/trail.txt\n", "\(one.stdout)\(one.stderr)")
            let oneLong = try world.kaiten("ls", "-l", Self.folder, "line.txt")
            #expect(oneLong.stdout.hasPrefix("-  - absent"), "\(oneLong.stdout)")
            #expect(oneLong.stdout.contains("  line.txt  [a]"), "\(oneLong.stdout)")
            let oneJSON = try world.kaiten("ls", "--json", Self.folder, "line.txt")
            let rows = try JSONSerialization.jsonObject(with: Data(oneJSON.stdout.utf8)) as? [[String: Any]]
            #expect(rows?.map { $0["path"] as? String } == ["line.txt"], "\(oneJSON.stdout)")

            #expect(try world.kaiten("select", Self.folder, "odd").status == 0)
            let apply = try world.kaiten("apply", "--yes")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            for name in ["odd/trail.txt ", "odd/trail.txt", "odd/new\nline.txt"] {
                #expect(ApplyInteropTests.sha(world.local + "/" + name) == ApplyInteropTests.sha(p + "/" + name), "\(name)")
            }
            #expect(!FileManager.default.fileExists(atPath: world.local + "/line.txt"))

            // A .stignore Kaiten cannot manage: pending in plan, a brake in apply, left as it is.
            try TestFiles.write(world.local + "/.stignore", "#include elsewhere.txt\n")
            let plan = try world.kaiten("plan", "--detailed-exitcode")
            #expect(plan.status == 2, "\(plan.stdout)")
            #expect(plan.stdout.contains("Not applied: f"), "\(plan.stdout)")
            #expect(!plan.stdout.contains("No changes"), "\(plan.stdout)")
            let braked = try world.kaiten("apply", "--yes")
            #expect(braked.status == 4, "\(braked.stdout)\(braked.stderr)")
            #expect(braked.stdout.contains("not applied: f"), "\(braked.stdout)")
            #expect(try String(contentsOfFile: world.local + "/.stignore", encoding: .utf8) == "#include elsewhere.txt\n")
        }
    }

    /// An index sync cut off after the peer's ClusterConfig (it announced more than the log
    /// holds) leaves `status`, `ls` and `plan` saying the index is partial, until a sync completes
    /// it (issue 19, item 11).
    @Test func aPartialIndexIsSaidToBePartial() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-partial")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        for i in 0..<5 { try TestFiles.write(world.peerData + "/f\(i).txt", "\(i)\n") }
        try await withSyncthing(st) { st in
            try await world.share(st, files: 5)
            #expect(!(try world.kaiten("status").stderr.contains("partial")))

            // What a sync that died after the ClusterConfig leaves: a target ahead of the log.
            let home = try KaitenHome.open(Home(path: world.home))
            let log = try PeerGenerations.openLog(home: home, folder: Self.folder, readOnly: true)
            let checkpoint = try #require(log.checkpoints[st.deviceID])
            log.close()
            IndexCompleteness.expect(
                home.home, folder: Self.folder, device: st.deviceID, indexID: checkpoint.indexID, maxSequence: checkpoint.maxSequence + 40)
            let status = try world.kaiten("status")
            #expect(status.stderr.contains("the index from a is partial (sequence \(checkpoint.maxSequence) of \(checkpoint.maxSequence + 40))"), "\(status.stderr)")
            #expect(try world.kaiten("ls", Self.folder).stderr.contains("is partial"))
            #expect(try world.kaiten("plan", "--offline").stderr.contains("is partial"))

            // A completed sync replaces the target with what the peer holds: no word any more.
            // (Its JSON is snake_case like every other: issue 10, item 20.)
            let sync = try world.kaiten("index", "sync", "--json")
            #expect(sync.status == 0)
            #expect(sync.stdout.contains("\"device_id\"") && sync.stdout.contains("\"files_received\""), "\(sync.stdout)")
            #expect(!sync.stdout.contains("deviceID"), "\(sync.stdout)")
            #expect(!(try world.kaiten("status").stderr.contains("partial")))
        }
    }

    /// Issue 10, item 1: a symlink (dangling too) plans, applies, deselects and deletes like a
    /// file; the apply after that has nothing left to do.
    @Test func symlinksDeselectAndDeleteLikeFiles() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-links")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        let p = world.peerData
        try TestFiles.write(p + "/links/target.txt", "pointed at\n")
        try FileManager.default.createSymbolicLink(atPath: p + "/links/link", withDestinationPath: "target.txt")
        try FileManager.default.createSymbolicLink(atPath: p + "/links/dangling", withDestinationPath: "nowhere/at/all")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            #expect(try world.kaiten("select", Self.folder, "links/link", "links/dangling").status == 0)
            let first = try world.kaiten("apply", "--yes")
            #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
            #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: world.local + "/links/dangling")) == "nowhere/at/all")

            #expect(try world.kaiten("deselect", Self.folder, "links/link", "links/dangling").status == 0)
            let gone = try world.kaiten("apply", "--yes", "--max-delete", "100%")
            #expect(gone.status == 0, "\(gone.stdout)\(gone.stderr)")
            #expect(gone.stdout.contains("deleted links/link"), "\(gone.stdout)")
            #expect(gone.stdout.contains("deleted links/dangling"), "\(gone.stdout)")
            var info = stat()
            #expect(lstat(world.local + "/links/link", &info) != 0)
            #expect(lstat(world.local + "/links/dangling", &info) != 0)
            let again = try world.kaiten("apply", "--yes", "--max-delete", "100%")
            #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
            #expect(try world.kaiten("plan", "--detailed-exitcode").status == 0)
        }
    }

    /// Issue 10, item 2: a saved plan whose `.stignore` text or actions were edited is refused
    /// (exit 3, the first difference named) and nothing is written.
    @Test func anEditedSavedPlanIsRefused() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-edited")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/small.txt", "small\n")
        try TestFiles.write(world.peerData + "/large.txt", String(repeating: "large ", count: 1000))
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            #expect(try world.kaiten("select", Self.folder, "small.txt", "large.txt").status == 0)
            let planPath = dir.file("p.plan")
            #expect(try world.kaiten("plan", "--out", planPath).status == 0)
            let original = try String(contentsOfFile: planPath, encoding: .utf8)

            func refused(_ edited: String, _ what: String) throws {
                try edited.write(toFile: planPath, atomically: true, encoding: .utf8)
                let result = try world.kaiten("apply", planPath)
                #expect(result.status == 3, "\(what): \(result.stdout)\(result.stderr)")
                #expect(result.stderr.contains("not what a fresh plan from its baseline says"), "\(what): \(result.stderr)")
                #expect(!FileManager.default.fileExists(atPath: world.local + "/.stignore"), "\(what)")
                #expect(!FileManager.default.fileExists(atPath: world.local + "/small.txt"), "\(what)")
            }
            // The .stignore text replaced.
            var object = try #require(try JSONSerialization.jsonObject(with: Data(original.utf8)) as? [String: Any])
            var folders = try #require(object["folders"] as? [[String: Any]])
            var stignore = try #require(folders[0]["stignore"] as? [String: Any])
            stignore["content"] = "#include /etc/passwd\n*\n"
            folders[0]["stignore"] = stignore
            object["folders"] = folders
            try refused(String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self), ".stignore")

            // Two pull actions' paths swapped.
            object = try #require(try JSONSerialization.jsonObject(with: Data(original.utf8)) as? [String: Any])
            folders = try #require(object["folders"] as? [[String: Any]])
            var actions = try #require(folders[0]["actions"] as? [[String: Any]])
            let pulls = actions.indices.filter { actions[$0]["action"] as? String == "pull" }
            #expect(pulls.count == 2)
            let first = actions[pulls[0]]["path"]
            actions[pulls[0]]["path"] = actions[pulls[1]]["path"]
            actions[pulls[1]]["path"] = first
            folders[0]["actions"] = actions
            object["folders"] = folders
            try refused(String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self), "swapped paths")

            // The plan as saved applies.
            try original.write(toFile: planPath, atomically: true, encoding: .utf8)
            let applied = try world.kaiten("apply", planPath)
            #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
            #expect(try String(contentsOfFile: world.local + "/small.txt", encoding: .utf8) == "small\n")
        }
    }

    /// Issue 10, item 14: Ctrl-C stops an apply between blocks, says what was done, exits 130
    /// and leaves the temp file; the next apply keeps its verified blocks and fetches only the
    /// rest (interrupted at half of a 256 MiB file: at most ~55 % fetched again).
    /// The bytes a process has written so far (`/proc/PID/io`'s wchar): a pull's progress, as its
    /// temp file is allocated whole up front and its size says nothing.
    static func bytesWritten(by process: Process) -> Int {
        let io = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/io", encoding: .utf8)) ?? ""
        let line = io.split(separator: "\n").first { $0.hasPrefix("wchar:") } ?? ""
        return Int(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) ?? 0
    }

    @Test func ctrlCStopsBetweenBlocksAndTheNextApplyResumes() async throws {
        try await Self.withBigFileSelected(prefix: "kaiten-sigint") { dir, world, _ in
            let size = Self.bigFileSize
            let temp = world.local + "/.syncthing.big.bin.tmp"
            let process = try Self.startApply(world, output: dir.file("out"))
            // Wait until half the file is written.
            let deadline = Date().addingTimeInterval(120)
            while process.isRunning && Date() < deadline && Self.bytesWritten(by: process) < size / 2 { usleep(2_000) }
            try #require(process.isRunning, "the apply finished before it could be interrupted at half")
            kill(process.processIdentifier, SIGINT)
            try process.waitForExit(timeout: 300, what: "kaiten")
            let out = (try? String(contentsOfFile: dir.file("out"), encoding: .utf8)) ?? ""
            #expect(process.terminationStatus == 130, "\(out)")
            let summary = ApplyInteropTests.json(out).last ?? [:]
            #expect(summary["interrupted_by"] as? Int == Int(SIGINT), "\(summary)")
            #expect(summary["not_done"] as? Int ?? 0 >= 1, "\(summary)")
            #expect(FileManager.default.fileExists(atPath: temp), "the temp file stays for the next apply")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/big.bin"))

            try Self.expectTheNextApplyResumes(world)
            #expect(!FileManager.default.fileExists(atPath: temp))
        }
    }

    /// `kaiten apply --yes --json` started in the background, its stdout in `output`: a test
    /// interrupts it.
    static func startApply(_ world: World, output: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: KaitenCLI.executable)
        process.arguments = ["apply", "--home", world.home, "--yes", "--json"]
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        process.standardError = FileHandle.nullDevice
        try process.runAlone()
        return process
    }

    /// The size of the file the interrupted-apply tests pull: syncthing uses 256 KiB blocks
    /// from 250 MiB up, so 1,024 blocks.
    static let bigFileSize = 256 << 20

    /// A syncthing peer (stopped after `body`) sharing one random file `big.bin` of
    /// ``bigFileSize``, selected in Kaiten and not yet pulled.
    static func withBigFileSelected(
        prefix: String, _ body: (TemporaryDirectory, World, SyncthingInstance) async throws -> Void
    ) async throws {
        let dir = try TemporaryDirectory(prefix: prefix)
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.random(world.peerData + "/big.bin", size: bigFileSize)
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            #expect(try world.kaiten("select", Self.folder, "big.bin").status == 0)
            try await body(dir, world, st)
        }
    }

    /// After an apply interrupted at half of `big.bin`: the next apply keeps the verified
    /// blocks of the temp file (at most ~55 % fetched again) and ends with the peer's bytes.
    static func expectTheNextApplyResumes(_ world: World) throws {
        let totalBlocks = bigFileSize / (256 << 10)
        let resumed = try world.kaiten("apply", "--yes", "--json")
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        let second = ApplyInteropTests.json(resumed.stdout).last ?? [:]
        let fetched = second["blocks_fetched"] as? Int ?? -1
        let local = second["blocks_copied_locally"] as? Int ?? -1
        #expect(fetched + local == totalBlocks, "\(second)")
        #expect(Double(fetched) <= Double(totalBlocks) * 0.55, "fetched \(fetched) of \(totalBlocks) again: \(second)")
        #expect(ApplyInteropTests.sha(world.local + "/big.bin") == ApplyInteropTests.sha(world.peerData + "/big.bin"))
    }

    /// Whether this run may mount a small tmpfs (root in CI); elsewhere the full-disk test is skipped.
    static let canMountTmpfs: Bool = {
        guard getuid() == 0, let dir = try? TemporaryDirectory(prefix: "kaiten-tmpfs-probe") else { return false }
        defer { dir.remove() }
        let mounted = (try? ProcessRunner.run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", dir.path]))?.status == 0
        if mounted { _ = try? ProcessRunner.run("/bin/umount", [dir.path]) }
        return mounted
    }()

    /// Issue 10, item 6: a folder on a 30 MiB file system with 61 MiB selected. The plan warns;
    /// apply honours minDiskFree, lands what fits (every small file, one big one), fails the
    /// rest naming the shortfall (never "Success" or a wrong errno), exits 5, and leaves no temp
    /// file behind.
    @Test(.enabled(if: canMountTmpfs, "needs root to mount a small tmpfs"))
    func aFullDiskLandsWhatFitsAndSaysWhatIsMissing() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-full")
        defer { dir.remove() }
        let world = try World(dir)
        try FileManager.default.createDirectory(atPath: world.local, withIntermediateDirectories: true)
        #expect(try ProcessRunner.run("/bin/mount", ["-t", "tmpfs", "-o", "size=30m", "tmpfs", world.local]).status == 0)
        defer { _ = try? ProcessRunner.run("/bin/umount", ["-l", world.local]) }
        try FileManager.default.createDirectory(atPath: world.local + "/.stfolder", withIntermediateDirectories: true)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        for i in 0..<3 { try TestFiles.random(world.peerData + "/big\(i).bin", size: 20 << 20) }
        for i in 0..<10 { try TestFiles.random(world.peerData + "/small/s\(i).bin", size: 100_000) }
        try await withSyncthing(st) { st in
            try await world.share(st, files: 13)
            #expect(try world.kaiten("select", Self.folder, "big0.bin", "big1.bin", "big2.bin", "small").status == 0)

            let plan = try world.kaiten("plan")
            #expect(plan.stdout.contains("the pulls need"), "\(plan.stdout)\(plan.stderr)")

            let apply = try world.kaiten("apply", "--yes")
            #expect(apply.status == 5, "\(apply.stdout)\(apply.stderr)")
            for i in 0..<10 {
                let name = "small/s\(i).bin"
                #expect(ApplyInteropTests.sha(world.local + "/" + name) == ApplyInteropTests.sha(world.peerData + "/" + name), "\(name)")
            }
            let bigs = (0..<3).filter { FileManager.default.fileExists(atPath: world.local + "/big\($0).bin") }
            #expect(bigs.count == 1, "one 20 MiB file fits in 30 MiB: \(bigs)")
            for i in bigs {
                #expect(ApplyInteropTests.sha(world.local + "/big\(i).bin") == ApplyInteropTests.sha(world.peerData + "/big\(i).bin"))
            }
            let all = apply.stdout + apply.stderr
            #expect(all.contains("not enough free space") || all.contains("no space left"), "\(all)")
            #expect(!all.contains("Success") && !all.contains("No such file"), "\(all)")
            let temps = try FileManager.default.subpathsOfDirectory(atPath: world.local).filter { $0.contains(".syncthing.") }
            #expect(temps.isEmpty, "\(temps)")
        }
    }

    /// A selected file renamed on the peer (issue 10, item 21): the plan says where its content
    /// went instead of only deleting it; `apply --follow-renames` selects the new name, and the
    /// file ends up there (its blocks copied from the local copy), the old name gone.
    @Test func aFileRenamedOnThePeerCanBeFollowed() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-rename")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.random(world.peerData + "/photos/a.jpg", size: 300_000)
        try TestFiles.write(world.peerData + "/other.txt", "other\n")
        let original = ApplyInteropTests.sha(world.peerData + "/photos/a.jpg")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            #expect(try world.kaiten("select", Self.folder, "photos/a.jpg").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)

            try FileManager.default.createDirectory(atPath: world.peerData + "/photos/2024", withIntermediateDirectories: true)
            try FileManager.default.moveItem(atPath: world.peerData + "/photos/a.jpg", toPath: world.peerData + "/photos/2024/a.jpg")
            try await ApplyInteropTests.rescan(st)
            try await st.waitUntil("the peer saw the rename", timeout: 60) {
                let file = try await st.get("/rest/db/file?folder=\(Self.folder)&file=photos%2Fa.jpg") as? [String: Any]
                return (file?["global"] as? [String: Any])?["deleted"] as? Bool == true
            }
            let plan = try world.kaiten("plan", "--json")
            #expect(plan.status == 0, "\(plan.stderr)")
            let decoded = try JSONDecoder().decode(Plan.self, from: Data(plan.stdout.utf8))
            #expect(decoded.folders.first?.renames == [.init(from: "photos/a.jpg", to: "photos/2024/a.jpg")], "\(plan.stdout)")
            let text = try world.kaiten("plan")
            #expect((text.stdout + text.stderr).contains("its content is now at photos/2024/a.jpg"), "\(text.stdout)\(text.stderr)")

            let follow = try world.kaiten("apply", "--yes", "--follow-renames", "--json")
            #expect(follow.status == 0, "\(follow.stdout)\(follow.stderr)")
            #expect(follow.stderr.contains("following photos/a.jpg → photos/2024/a.jpg"), "\(follow.stderr)")
            let selection = try String(contentsOfFile: world.home + "/selections/f.txt", encoding: .utf8)
            #expect(selection.split(separator: "\n") == ["photos/2024/a.jpg"], "\(selection)")
            #expect(ApplyInteropTests.sha(world.local + "/photos/2024/a.jpg") == original)
            #expect(!FileManager.default.fileExists(atPath: world.local + "/photos/a.jpg"))
            let summary = ApplyInteropTests.json(follow.stdout).last ?? [:]
            #expect(summary["blocks_fetched"] as? Int == 0, "the content came from the local copy: \(summary)")
            let after = try world.kaiten("plan", "--offline", "--detailed-exitcode")
            #expect(after.status == 0, "\(after.stdout)")
        }
    }

    /// Issue 10, item 13: progress moves by bytes while a big file is pulled, a few times a
    /// second, not only when a whole file completes. The peer sends at most 16 MB/s (syncthing's
    /// own rate limit, on the LAN too), so the 32 MiB pull takes about 2 s whatever the machine.
    @Test func progressMovesByBytesWithinABigFile() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-progress")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        let size = 32 << 20
        try TestFiles.random(world.peerData + "/big.bin", size: size)
        try TestFiles.random(world.peerData + "/big2.bin", size: size)
        try await withSyncthing(st) { st in
            var options = try #require(try await st.get("/rest/config/options") as? [String: Any])
            options["maxSendKbps"] = 16_000
            options["limitBandwidthInLan"] = true
            _ = try await st.put("/rest/config/options", json: options)
            try await world.share(st, files: 2)
            #expect(try world.kaiten("select", Self.folder, "big.bin").status == 0)
            let apply = try world.kaiten("apply", "--yes", "--json")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            let events = ApplyInteropTests.json(apply.stdout)
            let doneAt = try #require(events.firstIndex { $0["type"] as? String == "action_done" && $0["path"] as? String == "big.bin" })
            let during = events[..<doneAt].filter { $0["type"] as? String == "progress" }.compactMap { $0["bytes_done"] as? Int }
            #expect(during.count >= 3, "progress events before the file completed: \(during)")
            #expect(during.contains { $0 > 0 && $0 < size }, "\(during)")
            #expect(zip(during, during.dropFirst()).allSatisfy { $0 <= $1 }, "never backwards: \(during)")
            let last = events.last { $0["type"] as? String == "progress" }
            #expect(last?["bytes_done"] as? Int == size && last?["bytes_total"] as? Int == size, "\(String(describing: last))")
            #expect(ApplyInteropTests.sha(world.local + "/big.bin") == ApplyInteropTests.sha(world.peerData + "/big.bin"))

            // On a terminal: one line redrawn in place, with the share done by bytes.
            #expect(try world.kaiten("select", Self.folder, "big2.bin").status == 0)
            let terminal = try ProcessRunner.run(
                "/usr/bin/script", ["-q", "-e", "-c", "'\(KaitenCLI.executable)' apply --yes --home '\(world.home)'", "/dev/null"])
            #expect(terminal.status == 0, "\(terminal.stdout)")
            let shares = terminal.stdout.split(separator: "\r").compactMap { line -> Int? in
                guard let open = line.range(of: " of "), let percent = line[open.upperBound...].range(of: " %)") else { return nil }
                let digits = line[..<percent.lowerBound].reversed().prefix { $0.isNumber }
                return Int(String(digits.reversed()))
            }
            #expect(shares.contains { $0 > 0 && $0 < 100 }, "\(shares) in \(terminal.stdout.debugDescription.prefix(2000))")
            // The line names the file being pulled while it is pulled, not once it is done.
            let midway = terminal.stdout.split(separator: "\r").filter { line in
                guard let open = line.range(of: " of "), let percent = line[open.upperBound...].range(of: " %)") else { return false }
                let share = Int(String(line[..<percent.lowerBound].reversed().prefix { $0.isNumber }.reversed())) ?? 0
                return share > 0 && share < 100
            }
            #expect(midway.contains { $0.contains("big2.bin") }, "\(midway)")
            #expect(ApplyInteropTests.sha(world.local + "/big2.bin") == ApplyInteropTests.sha(world.peerData + "/big2.bin"))
        }
    }
}
