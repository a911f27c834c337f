import Foundation
import KaitenProtocol
import KaitenTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten run`'s REST API beyond reading the system: the index (`/rest/db/…`), stats, the
/// configuration's writes (with `syncthing cli config … set`, which sends the whole
/// configuration back), Kaiten's own endpoints, pause, restart and shutdown, and a browser's
/// login over HTTPS. Shapes are compared with the real syncthing beside it.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct RESTDatabaseInteropTests {
    typealias REST = RESTInteropTests
    static let folder = ApplyInteropTests.folder

    /// `curl` with a body and its status.
    static func send(
        _ url: String, method: String, key: String, body: String, headers: [String] = [], insecure: Bool = false, cookieJar: String? = nil
    ) throws -> (status: Int, body: String) {
        let file = NSTemporaryDirectory() + "/kaiten-rest-body-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try Data(body.utf8).write(to: URL(fileURLWithPath: file))
        defer { unlink(file) }
        let given = headers.contains { $0.lowercased().hasPrefix("content-type:") } ? headers : headers + ["Content-Type: application/json"]
        return try REST.curl(url, method: method, headers: (key.isEmpty ? [] : ["X-API-Key: \(key)"]) + given, bodyFile: file, insecure: insecure, cookieJar: cookieJar)
    }

    static func get(_ base: String, _ path: String, key: String) throws -> Any {
        let answer = try REST.curl(base + path, headers: ["X-API-Key: \(key)"])
        #expect(answer.status == 200, "\(path): \(answer.status) \(answer.body)")
        return try JSONSerialization.jsonObject(with: Data(answer.body.utf8), options: [.fragmentsAllowed])
    }

    @Test func theIndexAndStatsAnswerInSyncthingsShapesWithKaitensMeaning() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-rest-index", runArguments: ["--apply", "none"]) { world, st, base, key in
            let folder = Self.folder
            func get(_ path: String) throws -> Any { try Self.get(base, path, key: key) }
            func object(_ path: String) throws -> [String: Any] { try #require(try get(path) as? [String: Any], "\(path)") }

            // What the selection asks for (docs) and is not here: the directory and its two files.
            let need = try object("/rest/db/need?folder=\(folder)")
            let rest = try #require(need["rest"] as? [[String: Any]])
            #expect(rest.compactMap { $0["name"] as? String } == ["docs", "docs/a.txt", "docs/b.txt"], "\(need)")
            #expect(need["page"] as? Int == 1 && (need["progress"] as? [Any])?.isEmpty == true)
            let paged = try object("/rest/db/need?folder=\(folder)&page=2&perpage=2")
            #expect((paged["rest"] as? [[String: Any]])?.compactMap { $0["name"] as? String } == ["docs/b.txt"], "\(paged)")
            // The peer holds everything.
            #expect((try object("/rest/db/remoteneed?folder=\(folder)&device=\(st.deviceID)")["files"] as? [Any])?.isEmpty == true)

            // Each answer's keys as the real syncthing's for the same folder (a file's version
            // object compared with syncthing's view of the same file).
            let theirFile = try #require(try await st.get("/rest/db/file?folder=\(folder)&file=docs/a.txt") as? [String: Any])
            #expect(REST.keyDifferences(kaiten: rest[1], syncthing: theirFile["global"] as Any).isEmpty, "need's files")
            let ourFile = try object("/rest/db/file?folder=\(folder)&file=docs/a.txt")
            #expect(REST.keyDifferences(kaiten: ourFile, syncthing: theirFile).isEmpty, "db/file: \(REST.keyDifferences(kaiten: ourFile, syncthing: theirFile))")
            let availability = try #require(ourFile["availability"] as? [[String: Any]], "\(ourFile)")
            #expect(availability.compactMap { $0["id"] as? String } == [st.deviceID.description])
            #expect((ourFile["global"] as? [String: Any])?["size"] as? Int == "a, first\n".utf8.count)
            for path in [
                "/rest/db/browse?folder=\(folder)", "/rest/db/browse?folder=\(folder)&prefix=docs&levels=0", "/rest/db/ignores?folder=\(folder)",
                "/rest/db/localchanged?folder=\(folder)", "/rest/stats/device", "/rest/stats/folder", "/rest/folder/errors?folder=\(folder)",
            ] {
                let theirs = try await st.get(path)
                let differences = REST.keyDifferences(kaiten: try get(path), syncthing: theirs)
                #expect(differences.isEmpty, "\(path) (syncthing \(SyncthingInstance.versionTag)): \(differences)")
            }
            let tree = try #require(try get("/rest/db/browse?folder=\(folder)") as? [[String: Any]])
            #expect(tree.compactMap { $0["name"] as? String } == ["docs", "other"])
            #expect((tree[0]["children"] as? [[String: Any]])?.compactMap { $0["name"] as? String } == ["a.txt", "b.txt"])
            let level = try #require(try get("/rest/db/browse?folder=\(folder)&prefix=docs&levels=0") as? [[String: Any]])
            #expect(level.compactMap { $0["name"] as? String } == ["a.txt", "b.txt"] && level.allSatisfy { $0["children"] == nil })
            #expect((try get("/rest/db/browse?folder=\(folder)&prefix=no/such") as? [Any])?.isEmpty == true)
            let seen = try #require(try object("/rest/stats/device")[st.deviceID.description] as? [String: Any])
            #expect((seen["lastSeen"] as? String)?.hasPrefix("1970") == false, "\(seen)")

            // What is refused, and how.
            #expect(try REST.curl(base + "/rest/db/need?folder=nope", headers: ["X-API-Key: \(key)"]).status == 404)
            #expect(try REST.curl(base + "/rest/db/file?folder=\(folder)&file=no/such", headers: ["X-API-Key: \(key)"]).status == 404)
            #expect(try REST.curl(base + "/rest/db/remoteneed?folder=\(folder)&device=xyz", headers: ["X-API-Key: \(key)"]).status == 400)
            #expect(try REST.curl(base + "/rest/db/need?folder=\(folder)&page=0", headers: ["X-API-Key: \(key)"]).status == 400)
            #expect(try REST.curl(base + "/rest/events?since=soon", headers: ["X-API-Key: \(key)"]).status == 400)
            #expect(try REST.curl(base + "/rest/events?timeout=-1", headers: ["X-API-Key: \(key)"]).status == 400)
            #expect(try REST.curl(base + "/rest/db/scan?folder=\(folder)", headers: ["X-API-Key: \(key)"]).status == 405)
            #expect(try REST.curl(base + "/rest/db/scan?folder=nope", method: "POST", headers: ["X-API-Key: \(key)"]).status == 500)
            let ignores = try Self.send(base + "/rest/db/ignores?folder=\(folder)", method: "POST", key: key, body: #"{"ignore": ["*"]}"#)
            #expect(ignores.status == 501 && ignores.body.contains("selection"), "\(ignores)")
            // A body beyond the bound is refused before it is read whole.
            let big = String(repeating: "x", count: 5 << 20)
            #expect(try Self.send(base + "/rest/system/config", method: "POST", key: key, body: big).status == 413)

            // Applied: nothing needed; the scan asked through the API is a round.
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(try REST.curl(base + "/rest/db/scan?folder=\(folder)", method: "POST", headers: ["X-API-Key: \(key)"]).status == 200)
            try await RunInteropTests.waitFor("the need gone") {
                ((try object("/rest/db/need?folder=\(folder)"))["rest"] as? [Any])?.isEmpty == true
            }
            let scanned = try #require(try object("/rest/stats/folder")[folder] as? [String: Any])
            #expect((scanned["lastScan"] as? String)?.hasPrefix("0001") == false, "\(scanned)")
        }
    }

    @Test func configurationWritesGoThroughKaitensChecksAndSyncthingsCLISetsValues() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-rest-config") { world, st, base, key in
            let home = world.dir.file("cli-home")
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
            let configPath = world.home + "/config.xml"
            func config() throws -> String { try String(contentsOfFile: configPath, encoding: .utf8) }

            // syncthing cli reads the whole configuration, changes one value and sends it all back.
            let label = try REST.cli(base, key: key, ["config", "folders", Self.folder, "label", "set", "Documents"], home: home)
            #expect(label.status == 0, "\(label.stdout)\(label.stderr)")
            #expect(try config().contains("label=\"Documents\""))
            let name = try REST.cli(base, key: key, ["config", "devices", st.deviceID.description, "name", "set", "the-peer"], home: home)
            #expect(name.status == 0, "\(name.stdout)\(name.stderr)")
            #expect(try config().contains("name=\"the-peer\""))
            let read = try REST.cli(base, key: key, ["config", "folders", Self.folder, "label", "get"], home: home)
            #expect(read.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "Documents")

            // Refused as `kaiten folder`/`kaiten peer` refuse, the file unchanged.
            let before = try config()
            let folderURL = base + "/rest/config/folders/\(Self.folder)"
            for (body, status) in [
                (#"{"type": "receiveencrypted"}"#, 400), (#"{"path": "/somewhere/else"}"#, 400), (#"{"rescanIntervalS": "hourly"}"#, 400),
                (#"{"label": "#, 400),
            ] {
                let answer = try Self.send(folderURL, method: "PATCH", key: key, body: body)
                #expect(answer.status == status, "\(body): \(answer.status) \(answer.body)")
            }
            #expect(try Self.send(base + "/rest/config/folders/nope", method: "PATCH", key: key, body: "{}").status == 404)
            let newPeer = try DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")
            let badAddress = try Self.send(
                base + "/rest/config/devices/\(newPeer)", method: "PUT", key: key,
                body: #"{"deviceID": "\#(newPeer)", "name": "x", "addresses": ["ftp://nowhere"]}"#)
            #expect(badAddress.status == 400 && badAddress.body.contains("ftp://nowhere"), "\(badAddress)")
            #expect(try config() == before)

            // A device added, changed, removed; a folder PATCHed.
            #expect(try Self.send(base + "/rest/config/devices/\(newPeer)", method: "PUT", key: key, body: #"{"deviceID": "\#(newPeer)", "name": "new"}"#).status == 200)
            #expect(try config().contains(newPeer.description))
            #expect(try Self.send(base + "/rest/config/devices/\(newPeer)", method: "PATCH", key: key, body: #"{"addresses": ["tcp://127.0.0.1:1"]}"#).status == 200)
            #expect(try config().contains("<address>tcp://127.0.0.1:1</address>"))
            #expect(try REST.curl(base + "/rest/config/devices/\(newPeer)", method: "DELETE", headers: ["X-API-Key: \(key)"]).status == 200)
            #expect(try !config().contains(newPeer.description))
            #expect(try Self.send(folderURL, method: "PATCH", key: key, body: #"{"maxConflicts": 3}"#).status == 200)
            #expect(try config().contains("<maxConflicts>3</maxConflicts>"))

            // Pausing the peer is a configuration change: it disconnects, and comes back on resume.
            let stID = st.deviceID.description
            func connected() -> Bool? {
                let connections = try? REST.json(REST.curl(base + "/rest/system/connections", headers: ["X-API-Key: \(key)"]).body)
                return ((connections?["connections"] as? [String: Any])?[stID] as? [String: Any])?["connected"] as? Bool
            }
            #expect(try REST.curl(base + "/rest/system/pause?device=\(stID)", method: "POST", headers: ["X-API-Key: \(key)"]).status == 200)
            try await RunInteropTests.waitFor("the paused peer disconnected") { connected() == false }
            #expect(try config().contains("<paused>true</paused>"))
            let resume = try REST.cli(base, key: key, ["config", "devices", stID, "paused", "set", "false"], home: home)
            #expect(resume.status == 0, "\(resume.stdout)\(resume.stderr)")
            try await RunInteropTests.waitFor("the resumed peer connected again", timeout: 90) { connected() == true }
            #expect(try REST.curl(base + "/rest/system/resume", method: "POST", headers: ["X-API-Key: \(key)"]).status == 200)
            #expect(try REST.curl(base + "/rest/system/pause?device=xyz", method: "POST", headers: ["X-API-Key: \(key)"]).status == 400)
            #expect(try REST.curl(base + "/rest/system/pause?device=\(newPeer)", method: "POST", headers: ["X-API-Key: \(key)"]).status == 404)
        }
    }

    @Test func kaitensOwnEndpointsAreTheVerbsWithTheirChecks() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-rest-own", runArguments: ["--apply", "none"]) { world, st, base, key in
            let folder = Self.folder
            let selectionURL = base + "/rest/kaiten/selection?folder=\(folder)"
            let selectionFile = world.home + "/selections/\(folder).txt"
            let selection = try #require(try Self.get(base, "/rest/kaiten/selection?folder=\(folder)", key: key) as? [String: Any])
            #expect(selection["paths"] as? [String] == ["docs"], "\(selection)")
            let before = try String(contentsOfFile: selectionFile, encoding: .utf8)
            // A path the index does not have is refused and named, as `kaiten select` refuses it.
            let typo = try Self.send(selectionURL, method: "PUT", key: key, body: "docs\nothr\n", headers: ["Content-Type: text/plain"])
            #expect(typo.status == 400 && typo.body.contains("othr"), "\(typo)")
            let broken = try Self.send(selectionURL, method: "PUT", key: key, body: "docs\n../escape\n", headers: ["Content-Type: text/plain"])
            #expect(broken.status == 400, "\(broken)")
            #expect(try String(contentsOfFile: selectionFile, encoding: .utf8) == before)
            let replaced = try Self.send(selectionURL, method: "PUT", key: key, body: #"{"text": "docs\nother\n"}"#)
            let replacedPaths = try REST.json(replaced.body)["paths"] as? [String]
            #expect(replaced.status == 200 && replacedPaths == ["docs", "other"], "\(replaced)")
            // The plan that selection makes, as `kaiten plan --json` prints it.
            let plan = try #require(try Self.get(base, "/rest/kaiten/plan?folder=\(folder)", key: key) as? [String: Any])
            let actions = ((plan["folders"] as? [[String: Any]])?.first?["actions"] as? [[String: Any]]) ?? []
            #expect(actions.contains { $0["path"] as? String == "other/c.txt" && $0["action"] as? String == "pull" }, "\(plan)")
            let deselected = try Self.send(base + "/rest/kaiten/deselect?folder=\(folder)", method: "POST", key: key, body: #"{"paths": ["other"]}"#)
            #expect(deselected.status == 200 && deselected.body.contains("\"deselected\""), "\(deselected)")
            let refused = try Self.send(base + "/rest/kaiten/select?folder=\(folder)", method: "POST", key: key, body: #"{"paths": ["nothing/here"]}"#)
            #expect(refused.status == 400, "\(refused)")
            #expect((try Self.get(base, "/rest/kaiten/conflicts", key: key) as? [Any])?.isEmpty == true)
            let resolve = try Self.send(base + "/rest/kaiten/resolve?folder=\(folder)", method: "POST", key: key, body: #"{"path": "docs/a.txt", "choice": "keep"}"#)
            #expect(resolve.status == 400 && resolve.body.contains("no open conflict"), "\(resolve)")

            // A file only here is a last copy until a peer holds it.
            #expect(try world.kaiten("apply", "--yes").status == 0)
            try TestFiles.write(world.local + "/docs/mine.txt", "only here\n")
            #expect(try REST.curl(base + "/rest/db/scan?folder=\(folder)", method: "POST", headers: ["X-API-Key: \(key)"]).status == 200)
            try await RunInteropTests.waitFor("the local file listed as a last copy") {
                let copies = try Self.get(base, "/rest/kaiten/lastcopies?folder=\(folder)", key: key) as? [[String: Any]]
                return (copies?.first?["files"] as? [[String: Any]])?.contains { $0["path"] as? String == "docs/mine.txt" } == true
            }
            // Only it: the files pulled are held by the peer.
            let copies = try #require(try Self.get(base, "/rest/kaiten/lastcopies?folder=\(folder)", key: key) as? [[String: Any]])
            let listed = (copies.first?["files"] as? [[String: Any]])?.compactMap { $0["path"] as? String }
            #expect(listed == ["docs/mine.txt"], "\(copies)")
            let cache = try #require(try Self.get(base, "/rest/kaiten/cache", key: key) as? [String: Any])
            #expect(Set(cache.keys) == ["bytes", "limit", "blocks", "fetchedBlocks"])
            _ = st
        }
    }

    @Test func restartReadsTheConfigurationAgainAndShutdownStopsTheService() async throws {
        try await RunInteropTests.withDocsSelected("kaiten-rest-stop") { world, st, dir in
            let run = try RunInteropTests.Running.start(home: world.home, logPath: dir.file("run.log"))
            defer { run.stop() }
            var base = ""
            try await RunInteropTests.waitFor("the REST API listening", log: run) {
                let record = FileManager.default.contents(atPath: world.home + "/state/service.json").flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
                base = record?["rest_url"] as? String ?? ""
                return !base.isEmpty
            }
            let key = String(try #require(try String(contentsOfFile: world.home + "/config.xml", encoding: .utf8).firstMatch(of: /<apikey>([^<]+)<\/apikey>/)).1)
            let home = dir.file("cli-home")
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
            let restart = try REST.cli(base, key: key, ["operations", "restart"], home: home)
            #expect(restart.status == 0, "\(restart.stdout)\(restart.stderr)")
            try await RunInteropTests.waitFor("the configuration read again", log: run) { run.log.contains("read again") }
            try await RunInteropTests.waitFor("the REST API back", log: run) {
                (try? REST.curl(base + "/rest/system/ping", headers: ["X-API-Key: \(key)"]).status) == 200
            }
            let shutdown = try REST.cli(base, key: key, ["operations", "shutdown"], home: home)
            #expect(shutdown.status == 0, "\(shutdown.stdout)\(shutdown.stderr)")
            try await RunInteropTests.waitFor("the service ended", log: run) { !run.process.isRunning }
            #expect(run.process.terminationStatus == 0, "\(run.log)")
            _ = st
        }
    }

    @Test func aBrowserLogsInOverHTTPSAndSendsItsPagesToken() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-rest-browser") { world, st, base, key in
            // A user, a password and TLS, set as a tool sets them: syncthing stores the hash.
            let set = try Self.send(base + "/rest/config/gui", method: "PATCH", key: key, body: #"{"user": "anna", "password": "s3cret pass", "useTLS": true}"#)
            #expect(set.status == 200, "\(set)")
            let config = try String(contentsOfFile: world.home + "/config.xml", encoding: .utf8)
            #expect(config.contains("tls=\"true\"") && !config.contains("s3cret") && config.contains("<password>$2a$10$"), "\(config)")
            let https = "https://" + base.dropFirst("http://".count)
            try await RunInteropTests.waitFor("the API on HTTPS") {
                (try? REST.curl(https + "/rest/system/ping", headers: ["X-API-Key: \(key)"], insecure: true).status) == 200
            }
            // The certificate syncthing 2.x would make, in the home.
            let certificate = try ProcessRunner.run("/usr/bin/openssl", ["x509", "-in", world.home + "/https-cert.pem", "-noout", "-text"], environment: [:], timeout: 30)
            #expect(certificate.stdout.contains("prime256v1") && certificate.stdout.contains("O = Syncthing"), "\(certificate.stdout)")
            // Plain HTTP on the port is sent to HTTPS, with nothing else.
            let plain = try REST.curl(base + "/rest/system/config", headers: ["X-API-Key: \(key)"])
            #expect(plain.status == 307 && !plain.body.contains(world.me.description) && !plain.body.contains("folders"), "\(plain)")

            let jar = world.dir.file("cookies")
            let id = world.me.shortDescription
            // A wrong password gets nothing; the right one a session and the page's CSRF token.
            let wrong = try REST.curl(https + "/rest/system/config", headers: ["Authorization: Basic " + Data("anna:nope".utf8).base64EncodedString()], insecure: true)
            // A home of config version 36 (syncthing 1.x) asks the browser for the password (401); 2.x's says 403.
            #expect([401, 403].contains(wrong.status) && !wrong.body.contains(world.me.description) && !wrong.body.contains("folders"), "\(wrong)")
            let login = try Self.send(https + "/rest/noauth/auth/password", method: "POST", key: "", body: #"{"username": "anna", "password": "s3cret pass"}"#, insecure: true, cookieJar: jar)
            #expect(login.status == 204, "\(login)")
            let page = try REST.curl(https + "/", headers: [], insecure: true, cookieJar: jar)
            #expect(page.status == 200)
            let cookies = try String(contentsOfFile: jar, encoding: .utf8)
            let token = try #require(cookies.split(separator: "\n").first { $0.contains("CSRF-Token-\(id)") }?.split(separator: "\t").last.map(String.init), "\(cookies)")
            let status = try REST.curl(https + "/rest/system/status", headers: ["X-CSRF-Token-\(id): \(token)"], insecure: true, cookieJar: jar)
            #expect(status.status == 200 && status.body.contains(world.me.description), "\(status)")
            // The session without the token is not enough: a page of another site could use it.
            let forged = try REST.curl(https + "/rest/system/shutdown", method: "POST", headers: [], insecure: true, cookieJar: jar)
            #expect(forged.status == 403 && forged.body.contains("CSRF"), "\(forged)")
            #expect(try REST.curl(https + "/rest/system/ping", headers: ["X-API-Key: \(key)"], insecure: true).status == 200)
            _ = st
        }
    }
}
