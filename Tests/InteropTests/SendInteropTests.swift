import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Kaiten sends what changes on this machine (issue 11, item 3), as real syncthing receives it.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct SendInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    /// The global version of `path` on `st`, as `SHORTID:value` strings.
    static func globalVersion(_ st: SyncthingInstance, _ path: String) async throws -> [String] {
        let reply = try await st.get("/rest/db/file?folder=\(folder)&file=\(path)") as? [String: Any]
        let global = reply?["global"] as? [String: Any]
        return global?["version"] as? [String] ?? []
    }

    static func shortID(_ device: DeviceID) -> String { String(device.description.prefix(7)) }

    /// An edit, a new file, a new directory with a file and a deletion made in a selected
    /// directory of a sendreceive folder reach the peer, with Kaiten's counter in each version
    /// vector above the peer's; apply waits until the peer holds them; the peer sees Kaiten at
    /// 100 % and a fresh plan proposes nothing. `.stignore` never leaves this machine.
    @Test func localChangesReachThePeer() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-send")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/a.txt", "version one\n")
        try TestFiles.write(world.peerData + "/docs/b.txt", "to be deleted on Kaiten\n")
        try TestFiles.write(world.peerData + "/other.txt", "not selected\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 3)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            let before = try await Self.globalVersion(st, "docs/a.txt")

            try TestFiles.write(world.local + "/docs/a.txt", "version two, edited on Kaiten\n")
            try TestFiles.random(world.local + "/docs/new.bin", size: 300_000)
            try TestFiles.write(world.local + "/docs/sub/n.txt", "in a new directory\n")
            try FileManager.default.removeItem(atPath: world.local + "/docs/b.txt")
            try TestFiles.write(world.local + "/loose.txt", "outside the selection: never sent\n")

            let plan = try world.kaiten("plan", "--json")
            let actions = (try JSONSerialization.jsonObject(with: Data(plan.stdout.utf8)) as? [String: Any]).flatMap {
                ($0["folders"] as? [[String: Any]])?.first?["actions"] as? [[String: Any]]
            } ?? []
            let proposed = actions.map { "\($0["action"] as? String ?? "?") \($0["path"] as? String ?? "?")" }.sorted()
            #expect(
                proposed == ["send docs/a.txt", "send docs/new.bin", "send docs/sub", "send docs/sub/n.txt", "send-delete docs/b.txt"],
                "\(plan.stdout)")
            let human = try world.kaiten("plan")
            #expect(human.stdout.contains("+ send        docs/a.txt"), "\(human.stdout)")
            #expect(human.stdout.contains("- send-delete docs/b.txt"), "\(human.stdout)")
            #expect(human.stdout.contains("extraneous  loose.txt"), "\(human.stdout)")

            let apply = try world.kaiten("apply", "--yes", "--max-delete", "100%")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            #expect(apply.stdout.contains("is held by \(st.deviceID.description.prefix(7))"), "\(apply.stdout)")
            // Held means pulled: the bytes are on the peer as soon as apply returns.
            for name in ["docs/a.txt", "docs/new.bin", "docs/sub/n.txt"] {
                #expect(ApplyInteropTests.sha(world.peerData + "/" + name) == ApplyInteropTests.sha(world.local + "/" + name), "\(name)")
            }
            #expect(!FileManager.default.fileExists(atPath: world.peerData + "/docs/b.txt"))
            #expect(!FileManager.default.fileExists(atPath: world.peerData + "/loose.txt"))
            #expect(!FileManager.default.fileExists(atPath: world.peerData + "/.stignore"), "Kaiten's .stignore never travels")

            // The version vector: the peer's counter kept, Kaiten's added above it.
            let after = try await Self.globalVersion(st, "docs/a.txt")
            let mine = Self.shortID(world.me)
            #expect(after.contains { $0.hasPrefix(mine + ":") }, "\(before) → \(after)")
            for counter in before { #expect(after.contains(counter), "\(before) → \(after)") }
            #expect(try await Self.globalVersion(st, "docs/new.bin").first?.hasPrefix(mine + ":") == true)
            let deleted = try await st.get("/rest/db/file?folder=\(Self.folder)&file=docs/b.txt") as? [String: Any]
            #expect((deleted?["global"] as? [String: Any])?["deleted"] as? Bool == true)

            // The directory the peer made for docs/sub/n.txt is announced as held at the next sync.
            #expect(try world.kaiten("index", "sync").status == 0)
            try await FullDeviceInteropTests.waitCompletion(st, of: world.me, { $0 == 100 && $1 == 0 }, "Kaiten at 100 % after sending")
            let again = try world.kaiten("plan", "--detailed-exitcode")
            #expect(again.status == 2, "only loose.txt, a conflict, is left: \(again.stdout)")
            #expect(!again.stdout.contains("+ send") && !again.stdout.contains("- send-delete"), "\(again.stdout)")
        }
    }

    /// With the peer away, apply sends, waits --send-timeout for it, and exits 5 naming what is
    /// not held. With the peer back, the next plan says the send is still pending, and the next
    /// apply delivers it (serving its blocks until the peer holds it) without announcing a new
    /// version: one version per local change.
    @Test func aSendNoPeerTakesExitsFiveAndTheNextApplyDeliversIt() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-send-offline")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/a.txt", "one\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            // The peer stops pulling (paused folder): it stays connected but takes nothing.
            try await st.post("/rest/db/scan?folder=\(Self.folder)")
            var config = try await st.get("/rest/config/folders/\(Self.folder)") as? [String: Any] ?? [:]
            config["paused"] = true
            _ = try await st.put("/rest/config/folders/\(Self.folder)", json: config)
            try TestFiles.write(world.local + "/docs/a.txt", "two, from Kaiten\n")
            try TestFiles.random(world.local + "/docs/new.bin", size: 200_000)
            let apply = try world.kaiten("apply", "--yes", "--send-timeout", "3")
            #expect(apply.status == 5, "\(apply.stdout)\(apply.stderr)")
            #expect(apply.stderr.contains("docs/a.txt NOT YET HELD"), "\(apply.stderr)")
            let announced = apply.stdout.split(separator: "\n").first { $0.contains("sent docs/a.txt") }.map(String.init) ?? ""
            config["paused"] = false
            _ = try await st.put("/rest/config/folders/\(Self.folder)", json: config)
            // Still pending, and said so: the same versions, waited on rather than sent again.
            let plan = try world.kaiten("plan", "--json")
            let actions = (try JSONSerialization.jsonObject(with: Data(plan.stdout.utf8)) as? [String: Any]).flatMap {
                ($0["folders"] as? [[String: Any]])?.first?["actions"] as? [[String: Any]]
            } ?? []
            let pending = actions.map { "\($0["action"] as? String ?? "?") \($0["path"] as? String ?? "?") \($0["cause"] as? String ?? "?")" }
            #expect(pending.sorted() == ["send docs/a.txt not-yet-held", "send docs/new.bin not-yet-held"], "\(plan.stdout)")
            let delivered = try world.kaiten("apply", "--yes", "--send-timeout", "60")
            #expect(delivered.status == 0, "\(delivered.stdout)\(delivered.stderr)")
            #expect(delivered.stdout.contains("is held by \(st.deviceID.description.prefix(7))"), "\(delivered.stdout)")
            for name in ["docs/a.txt", "docs/new.bin"] {
                #expect(ApplyInteropTests.sha(world.peerData + "/" + name) == ApplyInteropTests.sha(world.local + "/" + name), "\(name)")
            }
            // The version the peer holds is the one the first apply announced.
            let version = try await Self.globalVersion(st, "docs/a.txt")
            #expect(!version.isEmpty && version.allSatisfy { announced.contains($0) }, "\(announced) vs \(version)")
            // Held now: nothing pending.
            let after = try world.kaiten("plan")
            #expect(!after.stdout.contains("send"), "\(after.stdout)")
        }
    }

    /// A sendonly folder sends what is made here and never takes what the peers change.
    @Test func aSendOnlyFolderSendsAndNeverTakes() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-sendonly")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/theirs.txt", "on the peer\n")
        try TestFiles.write(world.local + "/docs/mine.txt", "made on Kaiten\n")
        try FileManager.default.createDirectory(atPath: world.local + "/.stfolder", withIntermediateDirectories: true)
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1, type: "sendonly")
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            let plan = try world.kaiten("plan")
            #expect(plan.stdout.contains("+ send        docs/mine.txt"), "\(plan.stdout)")
            #expect(!plan.stdout.contains("+ pull"), "\(plan.stdout)")
            #expect(plan.stdout.contains("sendonly folder"), "\(plan.stdout)")
            let apply = try world.kaiten("apply", "--yes")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            #expect(ApplyInteropTests.sha(world.peerData + "/docs/mine.txt") == ApplyInteropTests.sha(world.local + "/docs/mine.txt"))
            #expect(!FileManager.default.fileExists(atPath: world.local + "/docs/theirs.txt"), "sendonly never pulls")

            // The peer edits what Kaiten sent: not taken back.
            try TestFiles.write(world.peerData + "/docs/mine.txt", "edited on the peer\n")
            try await ApplyInteropTests.rescan(st)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(try String(contentsOfFile: world.local + "/docs/mine.txt", encoding: .utf8) == "made on Kaiten\n")
        }
    }

    /// A file changed on two devices at once ends as it does between two syncthing 1.19.2
    /// devices: the newer change everywhere, the older one kept as
    /// `NAME.sync-conflict-DATE-TIME-WINNER.EXT` on both devices (made on the device that held
    /// it, then synced). Run once with each side newer; the reference pair runs in the same test.
    @Test(arguments: [(true, false), (false, false), (false, true)])
    func concurrentEditsEndAsBetweenTwoSyncthings(thisSideNewer: Bool, json: Bool) async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-conflict")
        defer { dir.remove() }
        let now = Date()
        let (thisTime, peerTime) = thisSideNewer
            ? (now.addingTimeInterval(-50), now.addingTimeInterval(-100)) : (now.addingTimeInterval(-100), now.addingTimeInterval(-50))
        func edit(_ path: String, _ text: String, _ time: Date) throws {
            try TestFiles.write(path, text)
            try FileManager.default.setAttributes([.modificationDate: time], ofItemAtPath: path)
        }
        /// A device's folder as `path → content`, the conflict copies' time stamps blanked and
        /// their winner IDs named by role.
        func tree(_ root: String, roles: [String: String]) throws -> [String: String] {
            var out: [String: String] = [:]
            for path in try FileManager.default.subpathsOfDirectory(atPath: root) {
                if path.hasPrefix(".st") { continue }
                var isDirectory: ObjCBool = false
                guard FileManager.default.fileExists(atPath: root + "/" + path, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
                var name = path.replacingOccurrences(of: #"sync-conflict-\d{8}-\d{6}-"#, with: "sync-conflict-*-", options: .regularExpression)
                for (id, role) in roles { name = name.replacingOccurrences(of: "-" + id + ".", with: "-" + role + ".") }
                out[name] = try String(contentsOfFile: root + "/" + path, encoding: .utf8)
            }
            return out
        }
        func hasConflictCopy(_ root: String) -> Bool {
            ((try? FileManager.default.subpathsOfDirectory(atPath: root)) ?? []).contains { $0.contains(".sync-conflict-") }
        }

        // The reference: two syncthing devices, "this" stopped while both edit.
        let a = try SyncthingInstance.generate(in: dir.path, name: "ref-a")
        let b = try SyncthingInstance.generate(in: dir.path, name: "ref-b")
        let dataA = dir.file("ref-a-data")
        let dataB = dir.file("ref-b-data")
        try TestFiles.write(dataA + "/docs/c.txt", "base\n")
        try FileManager.default.createDirectory(atPath: dataB, withIntermediateDirectories: true)
        var reference: (peer: [String: String], this: [String: String]) = ([:], [:])
        try await withSyncthing(a) { a in
            try await withSyncthing(b) { b in
                try await a.addDevice(b.deviceID, name: "b", addresses: [b.address])
                try await b.addDevice(a.deviceID, name: "a", addresses: [a.address])
                try await a.addFolder(id: Self.folder, path: dataA, devices: [b.deviceID])
                try await b.addFolder(id: Self.folder, path: dataB, devices: [a.deviceID])
                try await b.waitUntil("B has the base", timeout: 60) { (try? String(contentsOfFile: dataB + "/docs/c.txt", encoding: .utf8)) == "base\n" }
                try await b.waitIdle(folder: Self.folder)
                b.stop()
                try edit(dataB + "/docs/c.txt", "edited on this side\n", thisTime)
                try edit(dataA + "/docs/c.txt", "edited on the peer\n", peerTime)
                try await ApplyInteropTests.rescan(a)
                try await b.start()
                try await a.waitUntil("the conflict settles on both", timeout: 60) {
                    hasConflictCopy(dataA) && hasConflictCopy(dataB)
                        && (try? String(contentsOfFile: dataA + "/docs/c.txt", encoding: .utf8)) == (try? String(contentsOfFile: dataB + "/docs/c.txt", encoding: .utf8))
                }
                try await a.waitIdle(folder: Self.folder)
                try await b.waitIdle(folder: Self.folder)
                let roles = [Self.shortID(a.deviceID): "PEER", Self.shortID(b.deviceID): "THIS"]
                reference = (try tree(dataA, roles: roles), try tree(dataB, roles: roles))
            }
        }
        #expect(reference.peer == reference.this, "the two syncthings agree: \(reference)")
        #expect(reference.peer.count == 2, "\(reference.peer)")

        // Kaiten as "this side".
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/docs/c.txt", "base\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            #expect(try world.kaiten("select", Self.folder, "docs").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            try edit(world.local + "/docs/c.txt", "edited on this side\n", thisTime)
            try edit(world.peerData + "/docs/c.txt", "edited on the peer\n", peerTime)
            try await ApplyInteropTests.rescan(st)
            let apply = json ? try world.kaiten("apply", "--yes", "--json") : try world.kaiten("apply", "--yes")
            #expect(apply.status == 0, "\(apply.stdout)\(apply.stderr)")
            if json {
                // One schema: the envelope on every event, and a start that counts what the
                // summary says was done (the copy moved aside is sent too).
                let events = ApplyInteropTests.json(apply.stdout)
                #expect(events.allSatisfy { $0["v"] as? Int == 1 && $0["time"] is String && $0["type"] is String && $0["@timestamp"] == nil })
                let start = events.first { $0["type"] as? String == "apply_start" }?["actions"] as? Int ?? -1
                let summary = events.last { $0["type"] as? String == "summary" } ?? [:]
                #expect(start == (summary["done"] as? Int ?? 0) + (summary["failed"] as? Int ?? 0), "\(apply.stdout)")
                #expect(events.contains { $0["type"] as? String == "conflict_copy" && ($0["copy"] as? String ?? "").hasPrefix("docs/c.sync-conflict-") })
            } else if thisSideNewer {
                // The peer moves its copy aside and announces it; the next apply takes it.
                try await st.waitUntil("the peer's conflict copy", timeout: 60) { hasConflictCopy(world.peerData) }
                try await st.waitIdle(folder: Self.folder)
                let second = try world.kaiten("apply", "--yes")
                #expect(second.status == 0, "\(second.stdout)\(second.stderr)")
            } else {
                #expect(apply.stdout.contains("the local copy is now docs/c.sync-conflict-"), "\(apply.stdout)")
            }
            try await st.waitUntil("the conflict settles on both", timeout: 60) { hasConflictCopy(world.peerData) && hasConflictCopy(world.local) }
            let roles = [Self.shortID(st.deviceID): "PEER", Self.shortID(world.me): "THIS"]
            #expect(try tree(world.peerData, roles: roles) == reference.peer)
            #expect(try tree(world.local, roles: roles) == reference.this)
            // Kaiten lists its copy for the user, as the conflict copy it is.
            #expect(try world.kaiten("conflicts").stdout.contains("conflict-copy"), "the copy is listed")
        }
    }
}
