import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// What Kaiten announces is what is on its disk (issue 36, item 10), as a real syncthing sees it.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct AnnouncementInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    /// A file the peer deleted, still on disk here (the deletion not applied, as under `--apply
    /// safe` or before an apply): the peer sees Kaiten needing the deletion, not holding it;
    /// once applied, Kaiten is whole again.
    @Test func aDeletionKeptHereIsNotAnnouncedAsHeld() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-announce-disk")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/a.txt", "a\n")
        try TestFiles.write(world.peerData + "/docs/b.txt", "b, deleted on the peer later\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(try world.kaiten("index", "sync").status == 0)
            try await FullDeviceInteropTests.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten whole")

            try FileManager.default.removeItem(atPath: world.peerData + "/docs/b.txt")
            try await ApplyInteropTests.rescan(st)
            #expect(try world.kaiten("index", "sync").status == 0)
            #expect(FileManager.default.fileExists(atPath: world.local + "/docs/b.txt"), "not applied yet")
            var last: [String: Any] = [:]
            do {
                try await st.waitUntil("Kaiten needing the deletion it has not applied", timeout: 30) {
                    last = try await st.get("/rest/db/completion?device=\(world.me)&folder=\(Self.folder)") as? [String: Any] ?? [:]
                    // syncthing counts a pending deletion in needDeletes (and shows 95 %).
                    return ((last["completion"] as? NSNumber)?.doubleValue ?? 100) < 100 && (last["needDeletes"] as? Int) == 1
                }
            } catch {
                Issue.record("completion of Kaiten as the peer sees it: \(last)")
                throw error
            }

            let applied = try world.kaiten("apply", "--yes", "--max-delete", "100%")
            #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/docs/b.txt"))
            #expect(try world.kaiten("index", "sync").status == 0)
            try await FullDeviceInteropTests.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten whole after the deletion")
        }
    }
}
