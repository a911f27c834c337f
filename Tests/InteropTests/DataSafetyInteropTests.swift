import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Data safety across peers that go offline or hold older histories, against real syncthing
/// (issue 19, items 1 and 2): no last copy deleted, no older version written.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct DataSafetyInteropTests {
    static let folder = "f"
    typealias World = ApplyInteropTests.World

    /// Two syncthing peers a and b sharing the folder with each other and with Kaiten, with
    /// `files` written on a and synced to b (so both hold the same versions).
    struct Pair {
        let a: SyncthingInstance
        let b: SyncthingInstance
        let dataA: String
        let dataB: String

        init(_ dir: TemporaryDirectory, world: World) throws {
            a = try SyncthingInstance.generate(in: dir.path, name: "a")
            b = try SyncthingInstance.generate(in: dir.path, name: "b")
            dataA = world.peerData
            dataB = dir.file("peer-b")
            try FileManager.default.createDirectory(atPath: dataB, withIntermediateDirectories: true)
        }

        /// Introduces everyone to everyone and waits until b holds what a holds.
        func wire(_ world: World, files: Int) async throws {
            try await world.connect(a, name: "a")
            try await world.connect(b, name: "b")
            try await a.addDevice(b.deviceID, name: "b", addresses: [b.address])
            try await b.addDevice(a.deviceID, name: "a", addresses: [a.address])
            try await a.addFolder(id: DataSafetyInteropTests.folder, path: dataA, devices: [world.me, b.deviceID])
            try await b.addFolder(id: DataSafetyInteropTests.folder, path: dataB, devices: [world.me, a.deviceID])
            try await ApplyInteropTests.waitScanned(b, files: files)
            try world.addFolder(sharedWith: [a.deviceID, b.deviceID])
        }
    }

    /// Both peers that hold a deselected file are offline: apply keeps it, says why, exits 4
    /// (also with --require-peers 2, which counted offline peers before). `plan --offline` may
    /// show the deletion; apply re-checks with the peers it reaches. Once a holder is back, the
    /// copy goes.
    @Test func aDeselectedFileIsKeptWhileItsHoldersAreOffline() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-offline")
        defer { dir.remove() }
        let world = try World(dir)
        let pair = try Pair(dir, world: world)
        try TestFiles.write(world.peerData + "/old.txt", "the NAS died overnight\n")
        try TestFiles.write(world.peerData + "/keep.txt", "stays selected\n")

        try await pair.a.start()
        defer { pair.a.stop() }
        try await pair.b.start()
        defer { pair.b.stop() }
        try await pair.wire(world, files: 2)
        #expect(try world.kaiten("index", "sync").status == 0)
        #expect(try world.kaiten("select", Self.folder, "old.txt", "keep.txt").status == 0)
        let pulled = try world.kaiten("apply", "--yes")
        #expect(pulled.status == 0, "\(pulled.stdout)\(pulled.stderr)")
        let plan0 = try world.kaiten("plan", "--json")
        #expect(plan0.status == 0)

        // Both holders go offline; the file is deselected.
        pair.a.stop()
        pair.b.stop()
        #expect(try world.kaiten("deselect", Self.folder, "old.txt").status == 0)

        let offlinePlan = try world.kaiten("plan", "--offline")
        #expect(offlinePlan.stdout.contains("- delete      old.txt"), "\(offlinePlan.stdout)")

        let online = try world.kaiten("plan", "--timeout", "5")
        #expect(online.stdout.contains("holders-offline old.txt"), "\(online.stdout)\(online.stderr)")
        #expect(!online.stdout.contains("- delete"), "\(online.stdout)")

        for extra in [[], ["--require-peers", "2"]] {
            let apply = try KaitenCLI.run(["apply", "--yes", "--max-delete", "100%", "--timeout", "5", "--home", world.home] + extra)
            #expect(apply.status == 4, "\(extra): \(apply.stdout)\(apply.stderr)")
            #expect(!apply.stdout.contains("deleted old.txt"), "\(apply.stdout)")
            #expect(apply.stdout.contains("are connected now"), "\(apply.stdout)")
            #expect(FileManager.default.fileExists(atPath: world.local + "/old.txt"))
        }

        // A plan saved offline shows the deletion; applied while the peers are away, the
        // deletion is re-checked live and held back (exit 4), the file stays.
        let saved = dir.file("offline.plan")
        #expect(try world.kaiten("plan", "--offline", "--out", saved).status == 0)
        let replay = try KaitenCLI.run(["apply", saved, "--max-delete", "100%", "--timeout", "5", "--home", world.home])
        #expect(replay.status == 4, "\(replay.stdout)\(replay.stderr)")
        #expect(FileManager.default.fileExists(atPath: world.local + "/old.txt"))

        // One holder back: the default --require-peers 1 is met, --require-peers 2 is not.
        try await pair.a.start()
        let two = try world.kaiten("apply", "--yes", "--max-delete", "100%", "--require-peers", "2", "--timeout", "10")
        #expect(two.status == 4, "\(two.stdout)\(two.stderr)")
        #expect(FileManager.default.fileExists(atPath: world.local + "/old.txt"))
        let one = try world.kaiten("apply", "--yes", "--max-delete", "100%", "--timeout", "10")
        #expect(one.status == 0, "\(one.stdout)\(one.stderr)")
        #expect(one.stdout.contains("deleted old.txt"), "\(one.stdout)")
        #expect(!FileManager.default.fileExists(atPath: world.local + "/old.txt"))
        #expect(FileManager.default.fileExists(atPath: world.local + "/keep.txt"))
    }

    /// a and b hold reg.txt at V2; b goes offline; a edits it (V3) and Kaiten applies V3; a goes
    /// offline and b (still V2) comes back; after `index rebuild` the plan and apply keep V3 and
    /// say the local copy is newer than what the peers announce.
    @Test func anOlderVersionIsNeverWrittenOverANewerOne() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-older")
        defer { dir.remove() }
        let world = try World(dir)
        let pair = try Pair(dir, world: world)
        try TestFiles.write(world.peerData + "/reg.txt", "V2: what b keeps\n")

        try await pair.a.start()
        defer { pair.a.stop() }
        try await pair.b.start()
        defer { pair.b.stop() }
        try await pair.wire(world, files: 1)
        pair.b.stop()

        try TestFiles.write(world.peerData + "/reg.txt", "V3: the newest, only on a and here\n")
        try await ApplyInteropTests.rescan(pair.a)
        // b is offline: index sync says so (exit 1) and takes a's index.
        #expect(try world.kaiten("index", "sync", "--timeout", "20").status == 1)
        #expect(try world.kaiten("select", Self.folder, "reg.txt").status == 0)
        let applied = try world.kaiten("apply", "--yes")
        #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
        let v3 = "V3: the newest, only on a and here\n"
        #expect(try String(contentsOfFile: world.local + "/reg.txt", encoding: .utf8) == v3)

        pair.a.stop()
        try await pair.b.start()
        // a is offline: the rebuild says so (exit 1) and takes b's index.
        let rebuilt = try world.kaiten("index", "rebuild", Self.folder, "--timeout", "20")
        #expect(rebuilt.status == 1, "\(rebuilt.stdout)\(rebuilt.stderr)")
        let plan = try world.kaiten("plan", "--detailed-exitcode", "--timeout", "20")
        #expect(plan.status == 0, "\(plan.stdout)\(plan.stderr)")
        #expect(plan.stderr.contains("newer than any version the peers announce") || plan.stdout.contains("newer than any version the peers announce"), "\(plan.stdout)")
        #expect(!plan.stdout.contains("pull"), "\(plan.stdout)")
        let apply = try world.kaiten("apply", "--yes", "--timeout", "20")
        #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
        #expect(try String(contentsOfFile: world.local + "/reg.txt", encoding: .utf8) == v3)

        // Deselected now, it is kept: no connected peer holds V3 (b's V2 does not replace it).
        #expect(try world.kaiten("deselect", Self.folder, "reg.txt").status == 0)
        let deselect = try world.kaiten("apply", "--yes", "--max-delete", "100%", "--timeout", "20")
        #expect(!deselect.stdout.contains("deleted reg.txt"), "\(deselect.stdout)")
        #expect(try String(contentsOfFile: world.local + "/reg.txt", encoding: .utf8) == v3)
        let conflicts = try world.kaiten("conflicts")
        #expect(conflicts.stdout.contains("last-copy") && conflicts.stdout.contains("reg.txt"), "\(conflicts.stdout)")
    }
}

/// Promises of Docs/apply.md that had no test (issue 18, items 3 and 4).
@Suite(.ownThread, .serialized, .timeLimit(.minutes(5)))
struct ApplyPromiseInteropTests {
    static let folder = "f"
    typealias World = ApplyInteropTests.World

    /// The start both tests share: the peer holds doomed.txt and stays.txt, both applied here,
    /// then doomed.txt deselected (not applied yet); `body` runs with the peer still up.
    static func withDoomedFileDeselected(_ world: World, _ body: (SyncthingInstance) async throws -> Void) async throws {
        let st = try SyncthingInstance.generate(in: world.dir.path, name: "a")
        try TestFiles.write(world.peerData + "/doomed.txt", "deselected later\n")
        try TestFiles.write(world.peerData + "/stays.txt", "selected\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            #expect(try world.kaiten("select", Self.folder, "doomed.txt", "stays.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(try world.kaiten("deselect", Self.folder, "doomed.txt").status == 0)
            try await body(st)
        }
    }

    /// A deletion is re-checked the moment it runs: a file edited after the plan was shown (the
    /// apply waiting at its prompt) is kept, and the action fails saying why.
    @Test func aFileEditedBetweenPlanAndDeleteIsKept() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-recheck")
        defer { dir.remove() }
        let world = try World(dir)
        try await Self.withDoomedFileDeselected(world) { st in

            // On a terminal apply shows the plan (delete doomed.txt) and waits.
            let apply = try await world.applyAtPrompt(st, ["--max-delete", "100%"], output: dir.file("out"))
            #expect(apply.output.contains("- delete      doomed.txt"))
            try TestFiles.write(world.local + "/doomed.txt", "edited here after the plan was shown\n")
            let status = apply.answer("yes")
            let output = apply.output
            #expect(status == 5, "\(output)")
            #expect(output.contains("changed locally since the plan"), "\(output)")
            #expect(try String(contentsOfFile: world.local + "/doomed.txt", encoding: .utf8) == "edited here after the plan was shown\n")
        }
    }

    /// A saved plan is refused (exit 3, naming what moved, nothing done) when anything it was
    /// made from moved: the selection file, `.stignore`, config.xml, a local file it touches,
    /// or the home itself (a plan made by another home).
    @Test func aSavedPlanIsRefusedWhenAnythingMoved() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-stale-plan")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        for name in ["a.txt", "b.txt", "d.txt"] { try TestFiles.write(world.peerData + "/" + name, "\(name) on the peer\n") }
        try await withSyncthing(st) { st in
            try await world.share(st, files: 3)
            #expect(try world.kaiten("select", Self.folder, "a.txt", "d.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(try world.kaiten("deselect", Self.folder, "d.txt").status == 0)
            #expect(try world.kaiten("select", Self.folder, "b.txt").status == 0)
            let plan = dir.file("p.plan")
            let made = try world.kaiten("plan", "--out", plan)
            #expect(made.status == 0, "\(made.stdout)\(made.stderr)")
            #expect(made.stdout.contains("b.txt") && made.stdout.contains("d.txt"), "\(made.stdout)")

            /// Applies the saved plan expecting exit 3 with `why`, and nothing done.
            func expectRefused(_ why: String, home: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws {
                let result = try KaitenCLI.run(["apply", plan, "--yes", "--max-delete", "100%", "--home", home ?? world.home])
                #expect(result.status == 3, "\(result.stdout)\(result.stderr)", sourceLocation: sourceLocation)
                #expect(result.stderr.contains(why), "\(result.stderr)", sourceLocation: sourceLocation)
                #expect(!FileManager.default.fileExists(atPath: world.local + "/b.txt"), sourceLocation: sourceLocation)
                #expect(FileManager.default.fileExists(atPath: world.local + "/d.txt"), sourceLocation: sourceLocation)
            }
            /// Changes `path`, expects the refusal, then puts the bytes back.
            func whileChanged(_ path: String, to text: String, _ why: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
                let before = try Data(contentsOf: URL(fileURLWithPath: path))
                try Data(text.utf8).write(to: URL(fileURLWithPath: path))
                try expectRefused(why, sourceLocation: sourceLocation)
                try before.write(to: URL(fileURLWithPath: path))
            }

            let selection = Home(path: world.home).selectionPath(folderID: Self.folder)
            try whileChanged(selection, to: String(decoding: try Data(contentsOf: URL(fileURLWithPath: selection)), as: UTF8.self) + "c.txt\n",
                "\(Self.folder): the selection file changed")
            let stignore = world.local + "/.stignore"
            try whileChanged(stignore, to: String(decoding: try Data(contentsOf: URL(fileURLWithPath: stignore)), as: UTF8.self) + "// a note\n",
                "\(Self.folder): .stignore changed")
            let config = world.home + "/config.xml"
            let configText = String(decoding: try Data(contentsOf: URL(fileURLWithPath: config)), as: UTF8.self)
            try whileChanged(config, to: configText.replacingOccurrences(of: "<configuration", with: "<!-- edited -->\n<configuration"),
                "config.xml changed")

            // Another home (its own lineage and device).
            let other = dir.file("other")
            #expect(try KaitenCLI.run(["init", "--home", other, "--name", "o"]).status == 0)
            try expectRefused("the plan was made by another Kaiten home", home: other)

            // A local file the plan deletes, edited (last: its mtime cannot be put back exactly).
            try TestFiles.write(world.local + "/d.txt", "edited here\n")
            try expectRefused("\(Self.folder): local files the plan touches changed")
            #expect(try String(contentsOfFile: world.local + "/d.txt", encoding: .utf8) == "edited here\n")

            // Nothing else moved: a fresh plan from the same state applies.
            try TestFiles.write(world.local + "/d.txt", "d.txt on the peer\n")
            #expect(try world.kaiten("plan", "--out", plan).status == 0)
            let exact = try world.kaiten("apply", plan, "--yes", "--max-delete", "100%")
            #expect(exact.status == 0, "\(exact.stdout)\(exact.stderr)")
            #expect(FileManager.default.fileExists(atPath: world.local + "/b.txt"))
            #expect(!FileManager.default.fileExists(atPath: world.local + "/d.txt"))
        }
    }

    /// What timers and scripts rely on (issue 18, item 5): `apply --fail-on-conflict` exits 2
    /// after doing its work; `index sync` exits 1 when a peer fails even though another synced;
    /// `resolve --select` selects and keeps the local file; `index compact` changes nothing a
    /// plan sees; `index rebuild` with files in the folder leaves every one of them untouched.
    @Test func exitCodesAndIndexMaintenance() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-exit-codes")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        for name in ["a.txt", "b.txt", "sub/c.txt"] { try TestFiles.write(world.peerData + "/" + name, "\(name) on the peer\n") }
        try await withSyncthing(st) { st in
            try await world.share(st, files: 3)
            #expect(try world.kaiten("select", Self.folder, "a.txt", "sub").status == 0)
            try TestFiles.write(world.local + "/mine.txt", "only here\n")

            let failing = try world.kaiten("apply", "--yes", "--fail-on-conflict")
            #expect(failing.status == 2, "\(failing.stdout)\(failing.stderr)")
            #expect(FileManager.default.fileExists(atPath: world.local + "/a.txt"), "the work is done before exit 2")
            #expect(try world.kaiten("apply", "--yes").status == 0, "without the flag an open conflict is not a failure")

            // resolve --select: the extraneous file is selected and kept as it is.
            let resolved = try world.kaiten("resolve", Self.folder, "mine.txt", "--select")
            #expect(resolved.status == 0, "\(resolved.stdout)\(resolved.stderr)")
            let selection = try String(contentsOfFile: Home(path: world.home).selectionPath(folderID: Self.folder), encoding: .utf8)
            #expect(selection.split(separator: "\n").contains("mine.txt"), "\(selection)")
            #expect(try String(contentsOfFile: world.local + "/mine.txt", encoding: .utf8) == "only here\n")
            let conflicts = try world.kaiten("conflicts")
            #expect(conflicts.status == 0 && !conflicts.stdout.contains("extraneous  mine.txt"), "\(conflicts.stdout)")

            // index compact: the same listing and the same (empty) plan afterwards.
            let listingBefore = try world.kaiten("ls", "-l", "-R", Self.folder)
            #expect(listingBefore.status == 0 && listingBefore.stdout.contains("sub/c.txt"), "\(listingBefore.stdout)\(listingBefore.stderr)")
            let compacted = try world.kaiten("index", "compact", Self.folder)
            #expect(compacted.status == 0, "\(compacted.stdout)\(compacted.stderr)")
            #expect(try world.kaiten("ls", "-l", "-R", Self.folder).stdout == listingBefore.stdout)
            let planAfterCompact = try world.kaiten("plan", "--offline")
            #expect(planAfterCompact.status == 0 && planAfterCompact.stdout.contains("Plan: 0 to pull"), "\(planAfterCompact.stdout)")

            // index rebuild: every local file keeps its bytes, mode and mtime.
            func snapshot() throws -> [String: String] {
                var out: [String: String] = [:]
                for name in try FileManager.default.subpathsOfDirectory(atPath: world.local).sorted() {
                    var info = stat()
                    lstat(world.local + "/" + name, &info)
                    let sha = Self.sha(world.local + "/" + name) ?? "-"
                    out[name] = "\(info.st_mode) \(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec) \(sha)"
                }
                return out
            }
            let before = try snapshot()
            #expect(before.keys.contains("sub/c.txt") && before.keys.contains("mine.txt"))
            let rebuilt = try world.kaiten("index", "rebuild", Self.folder, "--timeout", "20")
            #expect(rebuilt.status == 0, "\(rebuilt.stdout)\(rebuilt.stderr)")
            #expect(try snapshot() == before)
            let planAfterRebuild = try world.kaiten("plan")
            #expect(planAfterRebuild.status == 0 && planAfterRebuild.stdout.contains("Plan: 0 to pull"), "\(planAfterRebuild.stdout)")

            // index sync exits 1 when one peer fails, though the other synced.
            let absent = try KaitenDevice(in: dir.path, name: "absent")
            #expect(try world.kaiten("peer", "add", absent.deviceID.description, "--name", "absent", "--address", "tcp://127.0.0.1:1").status == 0)
            #expect(try world.kaiten("folder", "share", Self.folder, absent.deviceID.description).status == 0)
            let sync = try world.kaiten("index", "sync", "--timeout", "10")
            #expect(sync.status == 1, "\(sync.stdout)\(sync.stderr)")
            #expect((sync.stdout + sync.stderr).contains("absent"), "\(sync.stdout)\(sync.stderr)")
            #expect(sync.stdout.contains("a (\(st.deviceID.shortDescription))"), "\(sync.stdout)")
        }
    }

    static func sha(_ path: String) -> String? { ApplyInteropTests.sha(path) }

    /// `.stignore` is written before any deletion, and when that write fails nothing else
    /// happens in the folder: a deselected file stays.
    @Test func aFailedStIgnoreWriteStopsTheFolderBeforeAnyDeletion() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-stignore-first")
        defer { dir.remove() }
        let world = try World(dir)
        try await Self.withDoomedFileDeselected(world) { st in

            // Something in the way of the new .stignore: a directory under its name.
            try FileManager.default.removeItem(atPath: world.local + "/.stignore")
            try FileManager.default.createDirectory(atPath: world.local + "/.stignore/in-the-way", withIntermediateDirectories: true)
            let apply = try world.kaiten("apply", "--yes", "--max-delete", "100%")
            #expect(apply.status == 5, "\(apply.stdout)\(apply.stderr)")
            #expect(apply.stderr.contains(".stignore"), "\(apply.stderr)")
            #expect(!apply.stdout.contains("deleted doomed.txt"), "\(apply.stdout)")
            #expect(FileManager.default.fileExists(atPath: world.local + "/doomed.txt"), "nothing is deleted without the allowlist in place")
        }
    }
}
