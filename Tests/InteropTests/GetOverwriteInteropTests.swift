import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// `kaiten get` never replaces what is already at its target unless told (issue 36, item 5),
/// against a real syncthing peer.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct GetOverwriteInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    static func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

    @Test func existingFilesAreKeptUnlessForced() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-get-n")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/a.txt", "a from the peer\n")
        try TestFiles.write(world.peerData + "/docs/b.txt", "b from the peer\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)

            // -o naming an existing file.
            let out = dir.file("out.txt")
            try TestFiles.write(out, "mine\n")
            let one = try world.kaiten("get", Self.folder, "docs/a.txt", "-o", out)
            #expect(one.status == 1, "\(one.stdout)\(one.stderr)")
            #expect(one.stderr.contains("\(out) already exists; not replaced"), "\(one.stderr)")
            #expect(Self.read(out) == "mine\n")

            // A directory target holding one of the files: that one kept, the other written.
            let tree = dir.file("tree")
            try TestFiles.write(tree + "/a.txt", "my a\n")
            let many = try world.kaiten("get", Self.folder, "docs", "-o", tree)
            #expect(many.status == 1, "\(many.stdout)\(many.stderr)")
            #expect(many.stderr.contains("a.txt already exists"), "\(many.stderr)")
            #expect(Self.read(tree + "/a.txt") == "my a\n")
            #expect(Self.read(tree + "/b.txt") == "b from the peer\n")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: tree).filter { $0.hasPrefix(".") }
            #expect(leftovers.isEmpty, "temp files left: \(leftovers)")

            // A directory where the file would go is never replaced, even with --force.
            let blocking = dir.file("blocking")
            try FileManager.default.createDirectory(atPath: blocking + "/a.txt", withIntermediateDirectories: true)
            let intoDirectory = try world.kaiten("get", Self.folder, "docs", "-o", blocking, "--force")
            #expect(intoDirectory.status == 1 && intoDirectory.stderr.contains("is a directory; not replaced"), "\(intoDirectory.stderr)")

            // --force replaces files.
            let forced = try world.kaiten("get", Self.folder, "docs/a.txt", "-o", out, "--force")
            #expect(forced.status == 0, "\(forced.stderr)")
            #expect(Self.read(out) == "a from the peer\n")
        }
    }
}
