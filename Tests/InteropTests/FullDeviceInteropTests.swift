import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenTestSupport
import Testing

/// Kaiten as a full device (issue 11): the index it announces, as real syncthing sees it.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct FullDeviceInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    /// What the peer computes for Kaiten's copy of the folder.
    static func completion(_ st: SyncthingInstance, of device: DeviceID) async throws -> (percent: Double, needItems: Int) {
        let reply = try await st.get("/rest/db/completion?device=\(device)&folder=\(folder)") as? [String: Any] ?? [:]
        return ((reply["completion"] as? NSNumber)?.doubleValue ?? -1, reply["needItems"] as? Int ?? -1)
    }

    static func waitCompletion(_ st: SyncthingInstance, of device: DeviceID, _ want: (Double, Int) -> Bool, _ what: String) async throws {
        try await st.waitUntil(what, timeout: 30) {
            let (percent, need) = try await completion(st, of: device)
            return want(percent, need)
        }
    }

    /// The peer reports Kaiten at 100 % once it holds every selected file (the rest announced
    /// as "not wanted here", invalid at the global version); a newly selected file, and a new
    /// file on the peer, bring it below 100 % until Kaiten has taken them in.
    @Test func thePeerSeesKaitenCompleteForWhatItSelected() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-completion")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/a.txt", "selected\n")
        try TestFiles.write(world.peerData + "/b.txt", "not selected at first\n")
        try TestFiles.write(world.peerData + "/dir/c.txt", "selected through its directory\n")
        try TestFiles.write(world.peerData + "/other/d.txt", "never selected\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 4)
            #expect(try world.kaiten("select", Self.folder, "a.txt", "dir").status == 0)
            let apply = try world.kaiten("apply", "--yes")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            try await Self.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten at 100 %")

            func remoteNeed() async throws -> [String] {
                let reply = try await st.get("/rest/db/remoteneed?folder=\(Self.folder)&device=\(world.me)") as? [String: Any]
                let files = (reply?["files"] as? [[String: Any]] ?? []) + (reply?["progress"] as? [[String: Any]] ?? [])
                    + (reply?["queued"] as? [[String: Any]] ?? [])
                return files.compactMap { $0["name"] as? String }.sorted()
            }
            #expect(try await remoteNeed() == [])

            // Newly selected: needed until applied.
            #expect(try world.kaiten("select", Self.folder, "b.txt").status == 0)
            #expect(try world.kaiten("index", "sync").status == 0)
            try await Self.waitCompletion(st, of: world.me, { $0 < 100 && $1 == 1 }, "Kaiten needs b.txt")
            #expect(try await remoteNeed() == ["b.txt"])
            #expect(try world.kaiten("apply", "--yes").status == 0)
            try await Self.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten back at 100 %")

            // A new file on the peer: needed until Kaiten says it does not want it.
            try TestFiles.write(world.peerData + "/new.txt", "new on the peer\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitCompletion(st, of: world.me, { percent, _ in percent < 100 }, "Kaiten behind after a new file")
            #expect(try world.kaiten("index", "sync").status == 0)
            try await Self.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "new.txt announced as not wanted")

            // Nothing changed: another sync announces nothing new (no sequence spent).
            let local = try IndexLog.open(path: Home(path: world.home).localIndexPath(folderID: Self.folder), folderID: Self.folder, readOnly: true)
            let before = local.checkpoints[world.me]?.maxSequence ?? -1
            local.close()
            #expect(try world.kaiten("index", "sync").status == 0)
            let again = try IndexLog.open(path: Home(path: world.home).localIndexPath(folderID: Self.folder), folderID: Self.folder, readOnly: true)
            #expect(again.checkpoints[world.me]?.maxSequence == before)
            again.close()
            #expect(before > 0)
        }
    }
}
