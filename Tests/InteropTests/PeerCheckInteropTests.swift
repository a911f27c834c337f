import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// `kaiten peer check` against the real syncthing.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct PeerCheckInteropTests {
    func kaiten(_ args: [String]) throws -> ProcessResult { try KaitenCLI.run(args) }

    @Test func reportsHandshakeFoldersAndEveryKindOfFailure() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-check")
        defer { dir.remove() }
        let syncthing = try SyncthingInstance.generate(in: dir.path)
        let home = dir.file("kaiten")
        let created = try kaiten(["init", "--home", home, "--name", "checker", "--listen", "tcp://127.0.0.1:0"])
        let myID = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let peer = syncthing.deviceID.description
        #expect(try kaiten(["peer", "add", "--home", home, peer, "--name", "st", "--address", syncthing.address]).status == 0)
        #expect(
            try kaiten(["folder", "add", "--home", home, "photos", "--path", dir.file("photos"), "--share", peer]).status == 0)

        try await withSyncthing(syncthing) { st in
            // The peer does not know us yet: it says Hello and hangs up.
            let unknown = try kaiten(["peer", "check", "--home", home])
            #expect(unknown.status == 1)
            #expect(unknown.stdout.contains("does not know this device"), "\(unknown.stdout)")

            try await st.addDevice(myID, name: "checker")
            try FileManager.default.createDirectory(atPath: dir.file("st-photos"), withIntermediateDirectories: true)
            try await st.addFolder(id: "photos", path: dir.file("st-photos"), devices: [myID])
            try FileManager.default.createDirectory(atPath: dir.file("st-extra"), withIntermediateDirectories: true)
            try await st.addFolder(id: "extra", path: dir.file("st-extra"), devices: [myID])
            try await st.waitIdle(folder: "photos")

            let ok = try kaiten(["peer", "check", "--home", home])
            #expect(ok.status == 0, "\(ok.stdout)\(ok.stderr)")
            #expect(ok.stdout.contains("syncthing \(SyncthingInstance.versionTag)"))
            #expect(ok.stdout.contains("photos: shared both ways"))
            #expect(ok.stdout.contains("extra: offered by the peer, not configured here"))

            let json = try kaiten(["peer", "check", "--home", home, peer, "--json"])
            let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]])
            #expect(rows.first?["ok"] as? Bool == true)
            #expect(rows.first?["shared_both_ways"] as? [String] == ["photos"])
            // snake_case, as every --json output.
            for key in rows.first?.keys ?? [:].keys { #expect(key == key.lowercased(), "\(key)") }

            // A folder we share that the peer does not.
            #expect(try kaiten(["folder", "add", "--home", home, "docs", "--path", dir.file("docs"), "--share", peer]).status == 0)
            let notShared = try kaiten(["peer", "check", "--home", home])
            #expect(notShared.status == 1)
            #expect(notShared.stdout.contains("docs: shared here, NOT by the peer"))
        }

        // Nobody listening any more.
        let unreachable = try kaiten(["peer", "check", "--home", home])
        #expect(unreachable.status == 1)
        #expect(unreachable.stdout.contains("cannot connect"), "\(unreachable.stdout)")

        // Not a configured device.
        let stranger = try kaiten(["peer", "check", "--home", home, "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2"])
        #expect(stranger.status == 1)
        #expect(stranger.stderr.contains("not configured"))
    }
}
