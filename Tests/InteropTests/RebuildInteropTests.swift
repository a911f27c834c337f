import Foundation
import KaitenIndex
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// `kaiten index rebuild` repairs whatever log it names as damaged (issue 36, item 8), against
/// a real syncthing peer.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct RebuildInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    /// A flipped byte in this device's own index (`index/F.local`): every verb names it and
    /// the remedy, and the remedy works: the rebuild drops it with the global log, both come
    /// back (the local one under a new index ID), the files stay, and the peer sees Kaiten whole.
    @Test func aDamagedLocalIndexIsRebuilt() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-rebuild")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        for n in 0..<20 { try TestFiles.write(world.peerData + "/docs/f\(n).txt", "file \(n) from the peer\n") }
        try await withSyncthing(st) { st in
            try await world.share(st, files: 20)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            let applied = try world.kaiten("apply", "--yes")
            #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
            #expect(try world.kaiten("index", "sync").status == 0)

            let localPath = world.home + "/index/\(Self.folder).local"
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: localPath)))
            bytes[bytes.count / 2] ^= 0x5A
            try Data(bytes).write(to: URL(fileURLWithPath: localPath))
            let broken = try world.kaiten("index", "sync")
            #expect(broken.status != 0)
            #expect(broken.stderr.contains("\(Self.folder).local") && broken.stderr.contains("kaiten index rebuild \(Self.folder)"), "\(broken.stderr)")

            let rebuilt = try world.kaiten("index", "rebuild", Self.folder)
            #expect(rebuilt.status == 0, "\(rebuilt.stdout)\(rebuilt.stderr)")
            #expect(rebuilt.stderr.contains("new index ID"), "\(rebuilt.stderr)")
            let reopened = try IndexLog.open(path: localPath, folderID: Self.folder, readOnly: true)
            reopened.close()
            let globalLog = try IndexLog.open(path: world.home + "/index/\(Self.folder).log", folderID: Self.folder, readOnly: true)
            #expect(globalLog.index.totals().files == 20)
            globalLog.close()
            for n in 0..<20 {
                #expect(try String(contentsOfFile: world.local + "/docs/f\(n).txt", encoding: .utf8) == "file \(n) from the peer\n")
            }
            let plan = try world.kaiten("plan", "--detailed-exitcode")
            #expect(plan.status == 0, "in sync after the rebuild: \(plan.stdout)\(plan.stderr)")
            #expect(try world.kaiten("index", "sync").status == 0)
            try await FullDeviceInteropTests.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten whole again after the rebuild")
        }
    }
}
