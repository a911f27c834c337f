import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// In a folder that sends, the selection speaks of files on disk too (issue 36, items 12 and
/// 13): a pattern line selects a new local file, and `kaiten select` takes a local file by
/// name, as syncthing would send either under the same `.stignore`. Against a real syncthing.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct SelectLocalInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    @Test func patternsAndSelectSeeLocalFilesInAFolderThatSends() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-select-local")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/photos/2024/old.jpg", "an old photo\n")
        try TestFiles.write(world.peerData + "/notes/a.txt", "a note\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            let pattern = try world.kaiten("select", Self.folder, "photos/**/*.jpg")
            #expect(pattern.status == 0, "\(pattern.stderr)")
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(FileManager.default.fileExists(atPath: world.local + "/photos/2024/old.jpg"))

            // A new local file the pattern matches: planned as a send, sent, on the peer.
            try TestFiles.write(world.local + "/photos/2025/new.jpg", "taken here\n")
            let plan = try world.kaiten("plan")
            #expect(plan.stdout.contains("+ send        photos/2025/new.jpg"), "\(plan.stdout)")
            #expect(!plan.stdout.contains("extraneous  photos/2025/new.jpg"), "\(plan.stdout)")
            #expect(!(plan.stdout + plan.stderr).contains("matches nothing"), "\(plan.stdout)\(plan.stderr)")
            let sent = try world.kaiten("apply", "--yes")
            #expect(sent.status == 0, "\(sent.stdout)\(sent.stderr)")
            #expect(RunInteropTests.content(world.peerData + "/photos/2025/new.jpg") == "taken here\n")

            // select takes a file that exists only on disk, by name, without --force.
            try TestFiles.write(world.local + "/notes/mine.txt", "written here\n")
            let select = try world.kaiten("select", Self.folder, "notes/mine.txt")
            #expect(select.status == 0, "\(select.stdout)\(select.stderr)")
            let second = try world.kaiten("plan")
            #expect(second.stdout.contains("+ send        notes/mine.txt"), "\(second.stdout)")
            #expect(!(second.stdout + second.stderr).contains("matches nothing"), "\(second.stdout)\(second.stderr)")
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(RunInteropTests.content(world.peerData + "/notes/mine.txt") == "written here\n")

            // A name on neither side is still refused, in one sentence without a fake location.
            let typo = try world.kaiten("select", Self.folder, "notes/nope.txt")
            #expect(typo.status != 0, "\(typo.stdout)")
            #expect(typo.stderr.contains("is not in the global index of \(Self.folder) nor on disk"), "\(typo.stderr)")
            #expect(!typo.stderr.contains("argument:0"), "\(typo.stderr)")
        }
    }

    /// In a folder that only receives, the disk does not select: a local-only file stays
    /// extraneous and select still asks for --force.
    @Test func aReceiveOnlyFolderIgnoresTheDiskForSelection() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-select-ro")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/photos/2024/old.jpg", "an old photo\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1, type: "receiveonly")
            #expect(try world.kaiten("select", Self.folder, "photos/**/*.jpg").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            try TestFiles.write(world.local + "/photos/2025/new.jpg", "taken here\n")
            let plan = try world.kaiten("plan")
            #expect(!plan.stdout.contains("send"), "\(plan.stdout)")
            let select = try world.kaiten("select", Self.folder, "photos/2025/new.jpg")
            #expect(select.status != 0 && select.stderr.contains("--force"), "\(select.stderr)")
        }
    }
}
