import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// "Nothing is written or deleted through a symlink, nothing outside the folder"
/// (Docs/apply.md; issue 18, item 1). Each test keeps sentinel files outside the folder and
/// checks them byte for byte at the end.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct EscapeInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    /// A directory beside the folder holding one sentinel file; `check()` says it is untouched.
    struct Outside {
        let path: String
        init(_ dir: TemporaryDirectory, name: String = "outside") throws {
            path = dir.file(name)
            try TestFiles.write(path + "/x.txt", "sentinel: must never change\n")
        }
        func expectUntouched(_ context: String, sourceLocation: SourceLocation = #_sourceLocation) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            #expect(names == ["x.txt"], "\(context): \(names)", sourceLocation: sourceLocation)
            let bytes = FileManager.default.contents(atPath: path + "/x.txt").map { Array($0) }
            #expect(bytes == Array("sentinel: must never change\n".utf8), "\(context)", sourceLocation: sourceLocation)
        }
    }

    /// A deselected file whose parent directory is replaced by a symlink to a directory outside
    /// the folder after the plan was shown (apply waiting at its prompt): the file behind the
    /// link has the very content the plan expects, so only the no-symlink rule keeps it.
    @Test func nothingIsDeletedThroughASymlinkedParent() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-symlinked-parent")
        defer { dir.remove() }
        let world = try World(dir)
        let outside = try Outside(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        // The peer's d/x.txt has the sentinel's very bytes.
        try TestFiles.write(world.peerData + "/d/x.txt", "sentinel: must never change\n")
        try TestFiles.write(world.peerData + "/stays.txt", "selected\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            #expect(try world.kaiten("select", Self.folder, "d", "stays.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(FileManager.default.fileExists(atPath: world.local + "/d/x.txt"))
            #expect(try world.kaiten("deselect", Self.folder, "d").status == 0)

            let apply = try await world.applyAtPrompt(st, ["--max-delete", "100%"], output: dir.file("out"))
            #expect(apply.output.contains("d/x.txt"), "\(apply.output)")
            // Swap the directory for a link to the outside one (same name, same content inside).
            try FileManager.default.removeItem(atPath: world.local + "/d")
            try FileManager.default.createSymbolicLink(atPath: world.local + "/d", withDestinationPath: outside.path)
            let status = apply.answer("yes")
            #expect(status == 5, "\(apply.output)")
            #expect(apply.output.contains("symlink"), "\(apply.output)")
            outside.expectUntouched("after the apply")
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: world.local + "/d") == outside.path)
        }
    }

    /// A selected file whose parent directory is replaced by a symlink to a directory outside
    /// the folder after the plan was shown: the pull refuses to write through the link.
    @Test func nothingIsWrittenThroughASymlinkedParent() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-symlinked-pull")
        defer { dir.remove() }
        let world = try World(dir)
        let outside = try Outside(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/d/a.txt", "first\n")
        try TestFiles.write(world.peerData + "/d/b.txt", "selected later\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            #expect(try world.kaiten("select", Self.folder, "d/a.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(try world.kaiten("select", Self.folder, "d/b.txt").status == 0)

            let apply = try await world.applyAtPrompt(st, [], output: dir.file("out"))
            #expect(apply.output.contains("d/b.txt"), "\(apply.output)")
            try FileManager.default.removeItem(atPath: world.local + "/d")
            try FileManager.default.createSymbolicLink(atPath: world.local + "/d", withDestinationPath: outside.path)
            let status = apply.answer("yes")
            #expect(status == 5, "\(apply.output)")
            #expect(apply.output.contains("is a symlink; nothing is written through it"), "\(apply.output)")
            outside.expectUntouched("after the apply")
            let temps = try FileManager.default.contentsOfDirectory(atPath: world.local).filter { $0.hasPrefix(".syncthing.") }
            #expect(temps.isEmpty)
        }
    }

    /// A peer's names never take a write outside the folder: a name with `..` is refused at
    /// intake (the peer is named, nothing enters the log); a symlink announced with a file
    /// "inside" it is not written through. (A log holding such a name is refused as damaged:
    /// IndexLogTests; apply refuses one in a plan: SafePathTests.)
    @Test func aPeerCannotReachOutsideTheFolder() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-escape")
        defer { dir.remove() }
        let world = try World(dir)
        let outside = try Outside(dir)
        try FileManager.default.createDirectory(atPath: world.local + "/.stfolder", withIntermediateDirectories: true)
        let payload = Data("written by a hostile peer\n".utf8)
        let peer = try await ScriptedPeer(in: dir.path, folder: Self.folder, contents: [:], allowed: world.me)
        defer { Task { await peer.stop() } }
        #expect(try await world.kaitenDetached("peer", "add", peer.deviceID.description, "--name", "scripted", "--address", peer.address).status == 0)
        try world.addFolder(sharedWith: [peer.deviceID])

        // 1. `../outside/x.txt` in the index: the connection is closed, the peer named, nothing kept.
        let ok = peer.file("ok.txt", Data("fine\n".utf8), sequence: 1)
        peer.serve("ok.txt", Data("fine\n".utf8))
        peer.serve("../outside/x.txt", payload)
        peer.announce([ok, peer.file("../outside/x.txt", payload, sequence: 2)])
        let sync = try await world.kaitenDetached("index", "sync")
        #expect(sync.status == 1, "\(sync.stdout)\(sync.stderr)")
        let said = sync.stdout + sync.stderr
        #expect(said.contains("scripted (\(peer.deviceID.shortDescription))"), "\(said)")
        #expect(said.contains("\"../outside/x.txt\" is absolute or escapes the folder"), "\(said)")
        let ls = try await world.kaitenDetached("ls", Self.folder)
        #expect(!ls.stdout.contains("outside"), "\(ls.stdout)")
        outside.expectUntouched("after index sync")

        // 2. A symlink `link` → the outside directory, applied; then the peer announces
        //    `link/x.txt` as if the link were a directory.
        let link = peer.symlink("link", to: outside.path, sequence: 3)
        peer.announce([ok, link])
        #expect(try await world.kaitenDetached("index", "sync").status == 0)
        #expect(try await world.kaitenDetached("select", Self.folder, "ok.txt", "link").status == 0)
        let first = try await world.kaitenDetached("apply", "--yes")
        #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
        #expect(try String(contentsOfFile: world.local + "/ok.txt", encoding: .utf8) == "fine\n")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: world.local + "/link") == outside.path)

        peer.serve("link/x.txt", payload)
        peer.announce([ok, link, peer.file("link/x.txt", payload, sequence: 4)])
        #expect(try await world.kaitenDetached("index", "sync").status == 0)
        let apply = try await world.kaitenDetached("apply", "--yes")
        // The plan sees the local symlink where the peer has a directory: a conflict, no pull.
        #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
        #expect(apply.stdout.contains("1 conflict open"), "\(apply.stdout)")
        let conflicts = try await world.kaitenDetached("conflicts", Self.folder)
        #expect(conflicts.stdout.contains("link"), "\(conflicts.stdout)")
        outside.expectUntouched("after apply with a symlinked parent")

        // 3. The same with a combining mark after the slash ("/\u{301}" is one Character to
        //    Swift's String, two path parts to the file system): still the symlink's inside.
        let hidden = "link/\u{301}x.txt"
        peer.serve(hidden, payload)
        peer.announce([ok, link, peer.file("link/x.txt", payload, sequence: 4), peer.file(hidden, payload, sequence: 5)])
        #expect(try await world.kaitenDetached("index", "sync").status == 0)
        let again = try await world.kaitenDetached("apply", "--yes")
        #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
        outside.expectUntouched("after apply with a combining mark after the symlink's name")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: world.local + "/link") == outside.path)

        // 4. `../\u{301}x` at intake is `..` followed by a name: refused, the peer named.
        peer.announce([ok, link, peer.file("../\u{301}x.txt", payload, sequence: 6)])
        let escaping = try await world.kaitenDetached("index", "sync")
        #expect(escaping.status == 1, "\(escaping.stdout)\(escaping.stderr)")
        #expect((escaping.stdout + escaping.stderr).contains("is absolute or escapes the folder"), "\(escaping.stdout)\(escaping.stderr)")
        outside.expectUntouched("after a peer announced ../\u{301}x.txt")

        #expect(!peer.requests.withLockedValue { $0 }.contains { $0.contains("..") }, "an escaping name is never even requested")
    }
}
