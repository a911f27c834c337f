import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenSync
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// The index log and global view against syncthing itself.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct IndexInteropTests {
    func kaiten(_ args: [String]) throws -> ProcessResult { try KaitenCLI.run(args) }

    static func status(_ st: SyncthingInstance, _ folder: String) async throws -> [String: Any] {
        try await st.get("/rest/db/status?folder=\(folder)") as? [String: Any] ?? [:]
    }

    static func settled(_ a: SyncthingInstance, _ b: SyncthingInstance, folder: String) async throws -> Bool {
        let sa = try await status(a, folder)
        let sb = try await status(b, folder)
        return sa["state"] as? String == "idle" && sb["state"] as? String == "idle"
            && sa["needTotalItems"] as? Int == 0 && sb["needTotalItems"] as? Int == 0
            && sa["globalTotalItems"] as? Int == sb["globalTotalItems"] as? Int
    }

    static func setMTime(_ path: String, _ seconds: TimeInterval) throws {
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: seconds)], ofItemAtPath: path)
    }

    /// Two syncthing peers make conflicts while apart, settle, and Kaiten's global view of every
    /// path equals syncthing A's (`/rest/db/file`), and its tree equals `/rest/db/browse`.
    @Test func globalViewEqualsSyncthingsOwn() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-oracle")
        defer { dir.remove() }
        let a = try SyncthingInstance.generate(in: dir.path, name: "a")
        let b = try SyncthingInstance.generate(in: dir.path, name: "b")
        let home = dir.file("kaiten")
        let created = try kaiten(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:0"])
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let folder = "oracle"
        let pathA = dir.file("data-a")
        let pathB = dir.file("data-b")
        for p in [pathA, pathB] { try FileManager.default.createDirectory(atPath: p, withIntermediateDirectories: true) }
        for name in ["conflict-b-newer.txt", "conflict-a-newer.txt", "edit-vs-delete.txt", "dir-to-file/inner.txt",
            "ignored-on-b.txt", "to-delete.txt", "keep/deep/file.txt"]
        {
            try TestFiles.write(pathA + "/" + name, "base \(name)\n")
        }

        try await withSyncthing(a) { a in
            try await withSyncthing(b) { b in
                try await a.addDevice(b.deviceID, name: "b", addresses: [b.address])
                try await b.addDevice(a.deviceID, name: "a", addresses: [a.address])
                try await a.addDevice(me, name: "k")
                try await b.addDevice(me, name: "k")
                try await a.addFolder(id: folder, path: pathA, devices: [b.deviceID, me])
                try await b.addFolder(id: folder, path: pathB, devices: [a.deviceID, me])
                try await a.waitUntil("initial sync", timeout: 90) {
                    let sb = try await Self.status(b, folder)
                    return try await Self.settled(a, b, folder: folder) && (sb["localFiles"] as? Int) == 7
                }

                // Apart: pause each other, then make the hard cases.
                try await a.post("/rest/system/pause?device=\(b.deviceID)")
                try await b.post("/rest/system/pause?device=\(a.deviceID)")
                let now = Date().timeIntervalSince1970
                try TestFiles.write(pathA + "/conflict-b-newer.txt", "A's edit\n")
                try Self.setMTime(pathA + "/conflict-b-newer.txt", now - 100)
                try TestFiles.write(pathB + "/conflict-b-newer.txt", "B's edit, newer\n")
                try Self.setMTime(pathB + "/conflict-b-newer.txt", now - 10)
                try TestFiles.write(pathA + "/conflict-a-newer.txt", "A's edit, newer\n")
                try Self.setMTime(pathA + "/conflict-a-newer.txt", now - 10)
                try TestFiles.write(pathB + "/conflict-a-newer.txt", "B's edit\n")
                try Self.setMTime(pathB + "/conflict-a-newer.txt", now - 100)
                try TestFiles.write(pathA + "/edit-vs-delete.txt", "edited on A\n")
                // The edit is older than the deletion (made at B's scan, now): the rules differ.
                try Self.setMTime(pathA + "/edit-vs-delete.txt", now - 100)
                try FileManager.default.removeItem(atPath: pathB + "/edit-vs-delete.txt")
                try FileManager.default.removeItem(atPath: pathA + "/dir-to-file")
                try TestFiles.write(pathA + "/dir-to-file", "now a file\n")
                try await b.post("/rest/db/ignores?folder=\(folder)", json: ["ignore": ["ignored-on-b.txt"]])
                try TestFiles.write(pathA + "/new-on-a.txt", "a\n")
                try TestFiles.write(pathB + "/new-on-b.txt", "b\n")
                try FileManager.default.removeItem(atPath: pathA + "/to-delete.txt")
                for st in [a, b] {
                    try await st.post("/rest/db/scan?folder=\(folder)")
                    try await st.waitIdle(folder: folder)
                }

                // Together again; let them settle (conflict copies included).
                try await a.post("/rest/system/resume?device=\(b.deviceID)")
                try await b.post("/rest/system/resume?device=\(a.deviceID)")
                var stableFor = 0
                try await a.waitUntil("A and B settle", timeout: 120) {
                    stableFor = try await Self.settled(a, b, folder: folder) ? stableFor + 1 : 0
                    return stableFor >= 10
                }

                // A conflict copy is announced only once its device scans it, sometimes after
                // the peers already look settled. Until a scan of both finds nothing new (their
                // sequences unmoved by it) and they agree, scan again; then Kaiten syncs once and
                // what it holds is compared as it is. A wrong first sync fails.
                var lastSeen: [Int] = []
                try await a.waitUntil("A and B quiescent", timeout: 120) {
                    for st in [a, b] {
                        try await st.post("/rest/db/scan?folder=\(folder)")
                        try await st.waitIdle(folder: folder)
                    }
                    guard try await Self.settled(a, b, folder: folder) else { return false }
                    // Connected again, and each holds all of the other's (equal counts alone can
                    // be two devices apart, each with its own changes).
                    for (st, other) in [(a, b), (b, a)] {
                        let connections = try await st.get("/rest/system/connections") as? [String: Any]
                        let peer = (connections?["connections"] as? [String: Any])?[other.deviceID.description] as? [String: Any]
                        guard peer?["connected"] as? Bool == true else { return false }
                        let completion = try await st.get("/rest/db/completion?folder=\(folder)&device=\(other.deviceID)") as? [String: Any]
                        guard (completion?["completion"] as? NSNumber)?.doubleValue == 100 else { return false }
                    }
                    let sa = try await Self.status(a, folder)
                    let sb = try await Self.status(b, folder)
                    let now = [sa["sequence"], sb["sequence"], sa["globalTotalItems"], sb["globalTotalItems"]].map { $0 as? Int ?? -1 }
                    defer { lastSeen = now }
                    return now == lastSeen
                }

                // Kaiten learns both peers' indexes, once.
                #expect(try kaiten(["peer", "add", "--home", home, a.deviceID.description, "--name", "a", "--address", a.address]).status == 0)
                #expect(try kaiten(["peer", "add", "--home", home, b.deviceID.description, "--name", "b", "--address", b.address]).status == 0)
                #expect(
                    try kaiten([
                        "folder", "add", "--home", home, folder, "--path", dir.file("k-data"), "--share", a.deviceID.description,
                        "--share", b.deviceID.description,
                    ]).status == 0)
                let sync = try kaiten(["index", "sync", "--home", home])
                #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")

                // Every path and version Kaiten holds is A's, and as many entries (deleted ones
                // included: syncthing's globalTotalItems counts them).
                let current = try IndexLog.open(path: Home(path: home).indexLogPath(folderID: folder), folderID: folder, readOnly: true)
                let held = current.index.allGlobal()
                current.close()
                for entry in held {
                    let encoded = entry.path.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? entry.path
                    let info = (try? await a.get("/rest/db/file?folder=\(folder)&file=\(encoded)")) as? [String: Any]
                    let onB = (try? await b.get("/rest/db/file?folder=\(folder)&file=\(encoded)")) as? [String: Any]
                    #expect(
                        (info?["global"] as? [String: Any])?["version"] as? [String] == entry.file.version.descriptions,
                        "\(entry.path): A \(String(describing: info)), B \(String(describing: onB)), Kaiten \(entry.file)")
                }
                let totalA = try await Self.status(a, folder)["globalTotalItems"] as? Int
                #expect(totalA == held.count)

                let kaitenHome = try KaitenHome.open(Home(path: home))
                // Opened as every verb opens it: with the conflict rule of the peers' generation.
                let log = try PeerGenerations.openLog(home: kaitenHome, folder: folder, readOnly: true)
                #expect(log.conflictRule == (SyncthingInstance.majorVersion >= 2 ? .syncthing2 : .syncthing1))
                let globals = log.index.allGlobal()
                #expect(globals.count >= 10)
                // Both directions: as many entries as syncthing counts (deleted ones included),
                // and every one of Kaiten's found at A with the same facts.
                let totals = try await Self.status(a, folder)
                #expect(totals["globalTotalItems"] as? Int == globals.count, "\(totals)")
                // syncthing writes nanoseconds; only whole seconds are compared.
                let formatter = ISO8601DateFormatter()
                formatter.formatOptions = [.withInternetDateTime]
                var compared = 0
                var mtimesCompared = 0
                for entry in globals {
                    let encoded = entry.path.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? entry.path
                    let info = try #require(try await a.get("/rest/db/file?folder=\(folder)&file=\(encoded)") as? [String: Any])
                    let theirs = try #require(info["global"] as? [String: Any], "\(entry.path)")
                    #expect(theirs["version"] as? [String] == entry.file.version.descriptions, "\(entry.path)")
                    #expect(theirs["deleted"] as? Bool == entry.file.isDeleted, "\(entry.path)")
                    if entry.file.type == .file {
                        #expect((theirs["size"] as? NSNumber)?.int64Value == entry.file.size, "\(entry.path)")
                    }
                    if !entry.file.isSymlink {
                        let text = try #require(theirs["modified"] as? String, "\(entry.path)")
                        let whole = text.replacingOccurrences(of: #"\.[0-9]+"#, with: "", options: .regularExpression)
                        let date = try #require(formatter.date(from: whole), "\(entry.path): \(text)")
                        #expect(Int64(date.timeIntervalSince1970.rounded(.down)) == entry.file.modifiedS, "\(entry.path)")
                        mtimesCompared += 1
                    }
                    compared += 1
                }
                #expect(compared == globals.count)
                #expect(mtimesCompared >= 8, "modification times were compared for \(mtimesCompared) entries")
                let byPath = Dictionary(uniqueKeysWithValues: globals.map { ($0.path, $0) })
                #expect(byPath["dir-to-file"]?.file.type == .file)
                // 1.x: an edit beats a concurrent deletion. 2.x: the later change wins, and the
                // deletion on B came after the edit on A.
                #expect(byPath["edit-vs-delete.txt"]?.file.isDeleted == (SyncthingInstance.majorVersion >= 2))
                #expect(byPath["to-delete.txt"]?.file.isDeleted == true)

                // The tree `kaiten ls -R --json` shows equals syncthing's browse of its global tree.
                let ls = try kaiten(["ls", "--home", home, folder, "-R", "--json"])
                #expect(ls.status == 0, "\(ls.stderr)")
                let rows = try #require(try JSONSerialization.jsonObject(with: Data(ls.stdout.utf8)) as? [[String: Any]])
                let ours = Dictionary(uniqueKeysWithValues: rows.map { ($0["path"] as! String, $0) })
                let browse = try #require(try await a.get("/rest/db/browse?folder=\(folder)") as? [[String: Any]])
                var theirs: [String: String] = [:]
                func walk(_ nodes: [[String: Any]], _ prefix: String) {
                    for node in nodes {
                        let name = prefix + (node["name"] as? String ?? "")
                        theirs[name] = node["type"] as? String
                        walk(node["children"] as? [[String: Any]] ?? [], name + "/")
                    }
                }
                walk(browse, "")
                #expect(Set(ours.keys) == Set(theirs.keys))
                for (path, type) in theirs {
                    let want = type == "FILE_INFO_TYPE_DIRECTORY" ? "directory" : type == "FILE_INFO_TYPE_FILE" ? "file" : "symlink"
                    #expect(ours[path]?["type"] as? String == want, "\(path)")
                }
                #expect(ours.keys.contains { $0.contains(".sync-conflict-") })
            }
        }
    }

    /// kill -9 while the log is being appended: the log loads, nothing before the torn record is
    /// lost, and the next sync completes it. A flipped byte names its offset; rebuild recovers.
    @Test func survivesKillNineAndCorruption() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-crash")
        defer { dir.remove() }
        let st = try SyncthingInstance.generate(in: dir.path)
        let home = dir.file("kaiten")
        let created = try kaiten(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:0"])
        let me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let data = dir.file("data")
        let count = 20_000
        for d in 0..<100 {
            let sub = "\(data)/d\(d)"
            try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
            for i in 0..<(count / 100) { _ = FileManager.default.createFile(atPath: "\(sub)/f\(i).txt", contents: Data("\(d)-\(i)".utf8)) }
        }
        try await withSyncthing(st) { st in
            try await st.addDevice(me, name: "k")
            try await st.addFolder(id: "big", path: data, devices: [me])
            try await st.waitUntil("scanned", timeout: 120) {
                let s = try await Self.status(st, "big")
                return s["state"] as? String == "idle" && (s["localFiles"] as? Int) == count
            }
            #expect(try kaiten(["peer", "add", "--home", home, st.deviceID.description, "--address", st.address]).status == 0)
            #expect(try kaiten(["folder", "add", "--home", home, "big", "--path", dir.file("k"), "--share", st.deviceID.description]).status == 0)
            let logPath = Home(path: home).indexLogPath(folderID: "big")

            // Start a sync and kill it once a good part of the index is in the log.
            let process = Process()
            process.executableURL = URL(fileURLWithPath: KaitenCLI.executable)
            process.arguments = ["index", "sync", "--home", home]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.runAlone()
            let deadline = Date().addingTimeInterval(60)
            var killedAt: Int64 = 0
            while Date() < deadline && process.isRunning {
                let size = (try? FileManager.default.attributesOfItem(atPath: logPath)[.size] as? Int64) ?? 0
                if size > 400_000 {
                    kill(process.processIdentifier, SIGKILL)
                    killedAt = size
                    break
                }
                usleep(2_000)
            }
            try process.waitForExit(timeout: 300, what: "kaiten")
            #expect(killedAt > 0, "the sync finished before it could be killed")

            // A kill can land inside a write (a fatal signal ends a long write short): the next
            // open cuts what it left, if anything. A power cut can also leave the last write
            // short: made so on top of whole records (the last 5 bytes gone, inside the last
            // record wherever the kill landed), the log loads, says it cut a torn tail, and
            // holds a prefix of the index.
            var afterKill: [String] = []
            try IndexLog.open(path: logPath, folderID: "big") { afterKill.append($0) }.close()
            #expect(afterKill.allSatisfy { $0.contains("(an interrupted write); cutting the log back to its last whole record") }, "\(afterKill)")
            let killedSize = try #require(try FileManager.default.attributesOfItem(atPath: logPath)[.size] as? Int64)
            #expect(truncate(logPath, off_t(killedSize - 5)) == 0)
            let status = try kaiten(["status", "--home", home, "big", "--json"])
            #expect(status.status == 0, "\(status.stderr)")
            var warnings: [String] = []
            let partial = try IndexLog.open(path: logPath, folderID: "big") { warnings.append($0) }
            #expect(warnings.count == 1 && warnings.first?.contains("the last record is incomplete") == true, "\(warnings)")
            #expect(partial.fileSize < killedSize - 5, "cut back to the last whole record")
            let held = partial.index.totals().files
            #expect(held > 0 && held < count, "held \(held)")
            // The checkpoint never claims more than the log holds. (Whole records past it are
            // fine: the kill can land between a batch's file records and its checkpoint, and the
            // next sync simply receives them again.)
            let checkpoint = partial.checkpoints[st.deviceID]?.maxSequence ?? 0
            let sequences = Set(partial.index.allGlobal().map(\.file.sequence))
            #expect(checkpoint > 0)
            #expect(checkpoint <= sequences.max() ?? 0)
            let partialFiles = Set(partial.index.allGlobal().map(\.path))
            _ = consume partial

            // The next sync completes it, as a delta.
            let resumed = try kaiten(["index", "sync", "--home", home])
            #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
            #expect(!resumed.stdout.contains("full index"))
            let complete = try IndexLog.open(path: logPath, folderID: "big", readOnly: true)
            #expect(complete.index.totals().files == count)
            #expect(partialFiles.isSubset(of: Set(complete.index.allGlobal().map(\.path))))
            _ = consume complete

            // Flip a byte in the middle: the error names the offset and the remedy.
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: logPath)))
            bytes[bytes.count / 2] ^= 0x5A
            try Data(bytes).write(to: URL(fileURLWithPath: logPath))
            let broken = try kaiten(["ls", "--home", home, "big"])
            #expect(broken.status == 1)
            #expect(broken.stderr.contains("at byte"))
            #expect(broken.stderr.contains("kaiten index rebuild big"))
            let rebuilt = try kaiten(["index", "rebuild", "--home", home, "big"])
            #expect(rebuilt.status == 0, "\(rebuilt.stdout)\(rebuilt.stderr)")
            let after = try kaiten(["status", "--home", home, "big", "--json"])
            let rows = try JSONSerialization.jsonObject(with: Data(after.stdout.utf8)) as? [[String: Any]]
            #expect(rows?.first?["global_files"] as? Int == count)
        }
    }
}
