import Foundation
import KaitenProtocol
import KaitenTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten run` answers syncthing's REST API on config.xml's `<gui>` address: the real
/// `syncthing cli` of the generation under test reads it as it reads syncthing, every
/// endpoint has the keys the real syncthing beside it answers with, and who may ask is
/// decided as syncthing decides it (each refusal compared with the real one).
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct RESTInteropTests {
    typealias World = ApplyInteropTests.World
    typealias Running = RunInteropTests.Running
    static let folder = ApplyInteropTests.folder

    /// A Kaiten running beside the real syncthing that shares the folder with it, connected;
    /// `body` gets Kaiten's REST base URL and API key.
    static func withKaitenBesideSyncthing(
        _ prefix: String, runArguments: [String] = [], _ body: (World, SyncthingInstance, _ base: String, _ apiKey: String) async throws -> Void
    ) async throws {
        try await RunInteropTests.withDocsSelected(prefix) { world, st, dir in
            let run = try Running.start(home: world.home, logPath: dir.file("run.log"), runArguments)
            defer { run.stop() }
            let recordPath = world.home + "/state/service.json"
            var base = ""
            try await RunInteropTests.waitFor("the REST API listening", log: run) {
                let record = FileManager.default.contents(atPath: recordPath).flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
                base = record?["rest_url"] as? String ?? ""
                return !base.isEmpty
            }
            let config = try String(contentsOfFile: world.home + "/config.xml", encoding: .utf8)
            let key = try #require(config.firstMatch(of: /<apikey>([^<]+)<\/apikey>/)).1
            let stID = st.deviceID.description
            try await RunInteropTests.waitFor("syncthing connected, as Kaiten's REST API says", log: run) {
                let connections = try? Self.json(Self.curl(base + "/rest/system/connections", headers: ["X-API-Key: \(key)"]).body)
                return ((connections?["connections"] as? [String: Any])?[stID] as? [String: Any])?["connected"] as? Bool == true
            }
            try await body(world, st, base, String(key))
        }
    }

    /// `curl` with its status code: what a client sends, Host header included, byte for byte.
    static func curl(
        _ url: String, method: String = "GET", headers: [String] = [], bodyFile: String? = nil, insecure: Bool = false, cookieJar: String? = nil
    ) throws -> (status: Int, body: String) {
        var arguments = ["-sS", "-m", "30", "-X", method, "-w", "\n%{http_code}", url] + headers.flatMap { ["-H", $0] }
        if let bodyFile { arguments += ["--data-binary", "@" + bodyFile] }
        // The home's self-signed certificate.
        if insecure { arguments.append("-k") }
        if let cookieJar { arguments += ["-b", cookieJar, "-c", cookieJar] }
        let result = try ProcessRunner.run("/usr/bin/curl", arguments, environment: ["PATH": "/usr/bin:/bin"], timeout: 60)
        var lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.popLast() ?? "") ?? 0
        return (status, lines.joined(separator: "\n"))
    }

    /// Once the first pulls of the selection (docs/a.txt, docs/b.txt) are said done: the events
    /// until then, so that a test's `since` comes after them.
    static func firstPullsSaid(_ base: String, key: String) async throws -> [[String: Any]] {
        var events: [[String: Any]] = []
        try await RunInteropTests.waitFor("the first pulls said done") {
            let answer = try curl(base + "/rest/events?since=0&timeout=0", headers: ["X-API-Key: \(key)"])
            events = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [[String: Any]] ?? []
            let finished = Set(events.compactMap { event -> String? in
                guard event["type"] as? String == "ItemFinished" else { return nil }
                return (event["data"] as? [String: Any])?["item"] as? String
            })
            return finished.isSuperset(of: ["docs/a.txt", "docs/b.txt"])
        }
        return events
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "not a JSON object: \(text.prefix(300))")
    }

    /// `syncthing cli` of the generation under test, pointed at `base`.
    static func cli(_ base: String, key: String, _ arguments: [String], home: String) throws -> ProcessResult {
        let binary = try #require(SyncthingInstance.binary)
        let address = String(base.dropFirst("http://".count))
        return try ProcessRunner.run(
            binary, ["cli", "--gui-address", address, "--gui-apikey", key] + arguments, environment: ["PATH": "/usr/bin:/bin", "HOME": home],
            timeout: 60)
    }

    /// Requests that go through the service (a plan) arriving together, as the page sends them:
    /// each is answered. (They once asked who answered on the control socket with a blocking
    /// exchange on the threads that answer it: two at once, on two cores, and nothing answered
    /// again, the service's own stop included.)
    @Test func requestsThroughTheServiceArrivingTogetherAreAllAnswered() async throws {
        try await Self.withKaitenBesideSyncthing("kaiten-rest-together") { world, st, base, key in
            let processes = try (0..<8).map { n -> Process in
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
                let path = n % 2 == 0 ? "/rest/kaiten/plan?folder=\(ApplyInteropTests.folder)" : "/rest/kaiten/conflicts?folder=\(ApplyInteropTests.folder)"
                process.arguments = ["-sS", "-m", "60", "-o", "/dev/null", "-w", "%{http_code}", "-H", "X-API-Key: \(key)", base + path]
                process.standardOutput = Pipe()
                try process.runAlone()
                return process
            }
            for process in processes {
                try process.waitForExit(timeout: 90, what: "curl")
                let code = String(decoding: (process.standardOutput as! Pipe).fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                #expect(code == "200", "\(code)")
            }
        }
    }

    @Test func syncthingsOwnCLIReadsKaitenAsItReadsSyncthing() async throws {
        try await Self.withKaitenBesideSyncthing("kaiten-rest-cli") { world, st, base, key in
            let home = world.dir.file("cli-home")
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
            func cli(_ arguments: String...) throws -> ProcessResult { try Self.cli(base, key: key, arguments, home: home) }

            let system = try cli("show", "system")
            #expect(system.status == 0, "\(system.stdout)\(system.stderr)")
            #expect(try Self.json(system.stdout)["myID"] as? String == world.me.description)
            let connections = try cli("show", "connections")
            #expect(connections.status == 0, "\(connections.stderr)")
            let peer = (try Self.json(connections.stdout)["connections"] as? [String: Any])?[st.deviceID.description] as? [String: Any]
            #expect(peer?["connected"] as? Bool == true && (peer?["clientVersion"] as? String)?.hasPrefix(SyncthingInstance.versionTag) == true, "\(connections.stdout)")
            let version = try cli("show", "version")
            let versionJSON = try Self.json(version.stdout)
            #expect(version.status == 0 && (versionJSON["longVersion"] as? String)?.hasPrefix("kaiten ") == true, "\(version.stdout)")
            let folders = try cli("config", "folders", "list")
            #expect(folders.status == 0 && folders.stdout.split(separator: "\n").contains(Substring(Self.folder)), "\(folders.stdout)\(folders.stderr)")
            let devices = try cli("config", "devices", "list")
            #expect(devices.status == 0, "\(devices.stderr)")
            #expect(Set(devices.stdout.split(separator: "\n").map(String.init)) == [world.me.description, st.deviceID.description], "\(devices.stdout)")
            let errors = try cli("errors", "show")
            let errorsJSON = try Self.json(errors.stdout)
            #expect(errors.status == 0 && errorsJSON.keys.contains("errors"), "\(errors.stdout)\(errors.stderr)")
            // An override has no meaning here (the selection and the plan decide what is sent):
            // refused, with a non-zero exit, and the folder as it was.
            let selections = world.home + "/selections"
            func selected() throws -> [String: Data] {
                let names = try FileManager.default.subpathsOfDirectory(atPath: selections)
                return Dictionary(uniqueKeysWithValues: names.compactMap { name in FileManager.default.contents(atPath: selections + "/" + name).map { (name, $0) } })
            }
            let before = try selected()
            let override = try cli("operations", "folder-override", Self.folder)
            #expect(override.status != 0, "\(override.stdout)\(override.stderr)")
            #expect(try selected() == before && !before.isEmpty)
            // A folder that does not exist is refused by the client itself, as with syncthing.
            #expect(try cli("operations", "folder-override", "no-such-folder").status != 0)
        }
    }

    /// Keys only one generation has; Kaiten answers with both generations' keys.
    static let keysOfOneGeneration: Set<String> = [
        // 1.19.2 only
        "disableTempIndexes", "weakHashThresholdPct", "debugging", "cacheIgnoredFiles", "databaseTuning", "insecureAllowOldTLSVersions",
        "restartOnWakeup",
        // 2.x only
        "blockIndexing", "fsWatcherTimeoutS", "group", "pullerDelayS", "sendOwnership", "sendXattrs", "syncOwnership", "syncXattrs",
        "xattrFilter", "numConnections", "metricsWithoutAuth", "sendBasicAuthPrompt", "sessionCookieDurationS", "sessionCookiePath",
        "auditEnabled", "auditFile", "connectionPriorityQuicLan", "connectionPriorityQuicWan", "connectionPriorityRelay",
        "connectionPriorityTcpLan", "connectionPriorityTcpWan", "connectionPriorityUpgradeThreshold", "container", "extra", "isLocal", "primary",
        "error", "receiveOnlyChangedBytes", "receiveOnlyChangedDeletes", "receiveOnlyChangedDirectories", "receiveOnlyChangedFiles",
        "receiveOnlyChangedSymlinks", "receiveOnlyTotalItems", "remoteSequence", "watchError", "remoteState", "blocksHash", "platform",
        "previousBlocksHash",
        // 1.19.2 only (db/file)
        "mtime",
    ]

    /// Where the two answers' keys differ: a key syncthing has and Kaiten lacks anywhere, or one
    /// Kaiten has that neither generation has. Maps keyed by IDs or addresses compare their
    /// entries' shapes; lists compare their first elements.
    static func keyDifferences(kaiten: Any, syncthing: Any, at path: String = "") -> [String] {
        switch (kaiten, syncthing) {
        case (let k as [String: Any], let s as [String: Any]):
            let dynamic = { (keys: Dictionary<String, Any>.Keys) in keys.contains { $0.contains(":") || $0.contains("-") && $0.count > 50 } }
            if dynamic(k.keys) || dynamic(s.keys) || path.hasSuffix(".params") {
                guard let kv = k.values.first, let sv = s.values.first else { return [] }
                return keyDifferences(kaiten: kv, syncthing: sv, at: path + ".*")
            }
            var differences: [String] = []
            for key in s.keys.sorted() {
                if let kv = k[key] {
                    differences += keyDifferences(kaiten: kv, syncthing: s[key]!, at: path + "." + key)
                } else {
                    differences.append("missing \(path).\(key)")
                }
            }
            for key in k.keys.sorted() where s[key] == nil && !keysOfOneGeneration.contains(key) { differences.append("extra \(path).\(key)") }
            return differences
        case (let k as [Any], let s as [Any]):
            guard let kv = k.first, let sv = s.first else { return [] }
            return keyDifferences(kaiten: kv, syncthing: sv, at: path + "[]")
        default:
            return []
        }
    }

    @Test func everyEndpointHasTheKeysTheRealSyncthingAnswersWith() async throws {
        try await Self.withKaitenBesideSyncthing("kaiten-rest-keys") { world, st, base, key in
            try await st.waitUntil("syncthing sees Kaiten connected") {
                let connections = try await st.get("/rest/system/connections") as? [String: Any]
                return ((connections?["connections"] as? [String: Any])?[world.me.description] as? [String: Any])?["connected"] as? Bool == true
            }
            var endpoints = [
                "/rest/system/ping", "/rest/system/status", "/rest/system/version", "/rest/system/connections", "/rest/system/error",
                "/rest/system/discovery", "/rest/config", "/rest/system/config", "/rest/config/restart-required", "/rest/config/options",
                "/rest/config/gui", "/rest/config/ldap", "/rest/config/defaults/folder", "/rest/config/defaults/device",
                "/rest/config/folders/\(Self.folder)",
            ]
            // 1.19.2 has neither (404).
            if SyncthingInstance.majorVersion >= 2 { endpoints += ["/rest/noauth/health", "/rest/system/paths"] }
            for endpoint in endpoints {
                var theirs = try await st.get(endpoint)
                let answer = try Self.curl(base + endpoint, headers: ["X-API-Key: \(key)"])
                #expect(answer.status == 200, "\(endpoint): \(answer.status) \(answer.body)")
                var ours: Any = try JSONSerialization.jsonObject(with: Data(answer.body.utf8))
                if endpoint == "/rest/system/connections" {
                    // Each side's entry for the other: both connected.
                    ours = ((ours as? [String: Any])?["connections"] as? [String: Any])?[st.deviceID.description] as Any
                    theirs = ((theirs as? [String: Any])?["connections"] as? [String: Any])?[world.me.description] as Any
                }
                let differences = Self.keyDifferences(kaiten: ours, syncthing: theirs)
                #expect(differences.isEmpty, "\(endpoint) (syncthing \(SyncthingInstance.versionTag)): \(differences)")
            }
            // The list endpoints: the same folder, the same devices.
            let folders = try JSONSerialization.jsonObject(with: Data(try Self.curl(base + "/rest/config/folders", headers: ["X-API-Key: \(key)"]).body.utf8)) as? [[String: Any]]
            #expect(folders?.map { $0["id"] as? String } == [Self.folder])
        }
    }

    @Test func whoMayAskIsDecidedAsSyncthingDecidesIt() async throws {
        try await Self.withKaitenBesideSyncthing("kaiten-rest-auth") { world, st, base, key in
            let theirBase = "http://127.0.0.1:\(st.guiPort)"
            let cases: [(String, String, [String])] = [
                ("no key", "/rest/system/config", []),
                ("a wrong key", "/rest/system/config", ["X-API-Key: not-the-key"]),
                ("the key in the query string", "/rest/system/config?apikey=KEY&api_key=KEY", []),
                ("a wrong bearer token", "/rest/system/status", ["Authorization: Bearer not-the-key"]),
                ("a foreign Host with the key", "/rest/system/config", ["Host: evil.example:8384", "X-API-Key: KEY"]),
                ("a browser's POST without the CSRF token", "/rest/system/shutdown", ["Origin: http://evil.example"]),
            ]
            for (what, path, headers) in cases {
                let ours = try Self.curl(
                    base + path.replacingOccurrences(of: "KEY", with: key), method: path.hasSuffix("shutdown") ? "POST" : "GET",
                    headers: headers.map { $0.replacingOccurrences(of: "KEY", with: key) })
                let theirs = try Self.curl(
                    theirBase + path.replacingOccurrences(of: "KEY", with: st.apiKey), method: path.hasSuffix("shutdown") ? "POST" : "GET",
                    headers: headers.map { $0.replacingOccurrences(of: "KEY", with: st.apiKey) })
                #expect(ours.status == theirs.status && ours.status == 403, "\(what): Kaiten \(ours.status), syncthing \(theirs.status)")
                #expect(ours.body.trimmingCharacters(in: .whitespacesAndNewlines) == theirs.body.trimmingCharacters(in: .whitespacesAndNewlines), "\(what)")
                // Nothing of the configuration in a refusal.
                #expect(!ours.body.contains(Self.folder) && !ours.body.contains(st.deviceID.description) && !ours.body.contains(key), "\(what)")
            }
            #expect(try Self.curl(base + "/rest/system/ping", headers: ["Authorization: Bearer \(key)"]).status == 200)
            // The service is still up after the refused shutdown.
            #expect(try Self.curl(base + "/rest/system/ping", headers: ["X-API-Key: \(key)"]).body.contains("pong"))
            _ = world
        }
    }

    @Test func anEventPollSeesThePeerAndAChangedSelectedFileArriveAndSinceNeverReplays() async throws {
        try await Self.withKaitenBesideSyncthing("kaiten-rest-events", runArguments: ["--apply", "all"]) { world, st, base, key in
            func poll(_ query: String, path: String = "/rest/events") throws -> [[String: Any]] {
                let answer = try Self.curl(base + path + "?" + query, headers: ["X-API-Key: \(key)"])
                #expect(answer.status == 200, "\(answer.body)")
                return try #require(try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [[String: Any]], "\(answer.body)")
            }
            func data(_ event: [String: Any]) -> [String: Any] { event["data"] as? [String: Any] ?? [:] }
            let past = try await Self.firstPullsSaid(base, key: key)
            let types = past.map { $0["type"] as? String ?? "" }
            #expect(types.first == "Starting" && types.contains("StartupComplete"), "\(types)")
            #expect(past.contains { $0["type"] as? String == "DeviceConnected" && data($0)["id"] as? String == st.deviceID.description }, "\(past)")
            var since = try #require(past.last?["id"] as? Int)

            // The peer changes a selected file: its index arrives, the file is pulled.
            try TestFiles.write(world.peerData + "/docs/a.txt", "a, changed on the peer\n")
            try await ApplyInteropTests.rescan(st)
            var seen: [[String: Any]] = []
            let deadline = Date().addingTimeInterval(90)
            while Date() < deadline, !seen.contains(where: { $0["type"] as? String == "ItemFinished" && data($0)["item"] as? String == "docs/a.txt" }) {
                let events = try poll("since=\(since)&timeout=5")
                // Only what came after `since`, in order, each once.
                let ids = events.compactMap { $0["id"] as? Int }
                #expect(ids.allSatisfy { $0 > since } && ids == ids.sorted() && Set(ids).count == ids.count, "since \(since): \(ids)")
                since = ids.last ?? since
                seen += events
            }
            let finished = seen.first { $0["type"] as? String == "ItemFinished" && data($0)["item"] as? String == "docs/a.txt" }
            #expect(finished.map(data)?["action"] as? String == "update" && finished.map(data)?["error"] is NSNull, "\(seen)")
            #expect(seen.contains { $0["type"] as? String == "ItemStarted" && data($0)["item"] as? String == "docs/a.txt" })
            #expect(seen.contains {
                $0["type"] as? String == "RemoteIndexUpdated" && data($0)["device"] as? String == st.deviceID.description
                    && data($0)["folder"] as? String == Self.folder
            }, "\(seen.map { $0["type"] ?? "" })")
            #expect(RunInteropTests.content(world.local + "/docs/a.txt") == "a, changed on the peer\n")
            // The round that pulled it says the folder's new summary and the peer's completion.
            func said(_ type: String, _ match: ([String: Any]) -> Bool) async throws {
                try await RunInteropTests.waitFor("\(type) said") {
                    if seen.contains(where: { $0["type"] as? String == type && match(data($0)) }) { return true }
                    let events = try poll("since=\(since)&timeout=2")
                    since = (events.last?["id"] as? Int) ?? since
                    seen += events
                    return events.contains { $0["type"] as? String == type && match(data($0)) }
                }
            }
            try await said("FolderSummary") { $0["folder"] as? String == Self.folder && ($0["summary"] as? [String: Any])?["needFiles"] as? Int == 0 }
            try await said("FolderCompletion") {
                $0["device"] as? String == st.deviceID.description && $0["folder"] as? String == Self.folder && $0["completion"] as? Double == 100
            }
            // A file made here, in the selected docs/: found, announced, said as a local change.
            try TestFiles.write(world.local + "/docs/made-here.txt", "made on this device\n")
            try await said("LocalIndexUpdated") { ($0["filenames"] as? [String])?.contains("docs/made-here.txt") == true }
            let local = try poll("since=0&timeout=0", path: "/rest/events/disk")
            #expect(local.contains {
                $0["type"] as? String == "LocalChangeDetected" && data($0)["path"] as? String == "docs/made-here.txt"
                    && data($0)["action"] as? String == "added" && data($0)["modifiedBy"] as? String == world.me.shortDescription
            }, "\(local)")
            // The change as /rest/events/disk says it; not in the default stream.
            let disk = try poll("since=0&timeout=0", path: "/rest/events/disk")
            #expect(disk.contains { $0["type"] as? String == "RemoteChangeDetected" && data($0)["path"] as? String == "docs/a.txt" }, "\(disk)")
            #expect(!seen.contains { $0["type"] as? String == "RemoteChangeDetected" })
            // A filter: only what was asked for.
            let filtered = try poll("since=0&timeout=0&events=DeviceConnected")
            #expect(!filtered.isEmpty && filtered.allSatisfy { $0["type"] as? String == "DeviceConnected" })

            // The peer goes away.
            st.stop()
            var gone = false
            let goneBy = Date().addingTimeInterval(60)
            while !gone && Date() < goneBy {
                let events = try poll("since=\(since)&timeout=5")
                since = (events.last?["id"] as? Int) ?? since
                gone = events.contains { $0["type"] as? String == "DeviceDisconnected" && data($0)["id"] as? String == st.deviceID.description }
            }
            #expect(gone)
        }
    }

    /// promtool from Debian's prometheus package (scripts/test unpacks it: KAITEN_PROMTOOL).
    static let promtool: String? = {
        if let path = ProcessInfo.processInfo.environment["KAITEN_PROMTOOL"], FileManager.default.isExecutableFile(atPath: path) { return path }
        return ProcessRunner.which("promtool")
    }()

    /// The value of the sample whose line starts with `prefix` (a name and its labels, as written).
    static func sample(_ text: String, _ prefix: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    @Test(.enabled(if: RESTInteropTests.promtool != nil, "no promtool (scripts/test unpacks Debian's: KAITEN_PROMTOOL)"))
    func metricsPassPromtoolAndMoveWhenFilesMove() async throws {
        try await Self.withKaitenBesideSyncthing("kaiten-rest-metrics", runArguments: ["--apply", "all"]) { world, st, base, key in
            let promtool = try #require(Self.promtool)
            func scrape() throws -> String {
                let answer = try Self.curl(base + "/metrics", headers: ["X-API-Key: \(key)"])
                #expect(answer.status == 200)
                let check = try ProcessRunner.run(promtool, ["check", "metrics"], environment: ["PATH": "/usr/bin:/bin"], stdin: answer.body, timeout: 60)
                #expect(check.status == 0, "promtool: \(check.stdout)\(check.stderr)\n\(answer.body)")
                return answer.body
            }
            #expect(try Self.curl(base + "/metrics").status == 403)
            let stID = st.deviceID.description
            let pulled = "kaiten_plan_actions_total{folder=\"\(Self.folder)\",action=\"pull\",outcome=\"done\"}"
            let received = "syncthing_protocol_recv_bytes_total{device=\"\(stID)\"}"
            // The docs/ selection is pulled by the first rounds: wait for them to be counted.
            try await RunInteropTests.waitFor("the first pulls counted") { (Self.sample(try scrape(), pulled) ?? 0) >= 2 }
            let before = try scrape()
            #expect(Self.sample(before, "syncthing_connections_active{device=\"\(stID)\"}") == 1)
            #expect(before.contains("syncthing_config_folder_info{folder=\"\(Self.folder)\""))
            // The round that pulled docs/ ends with nothing needed: everything here came from the
            // peer (no last copy), and docs/ is what is selected.
            var figures = ""
            try await RunInteropTests.waitFor("a round's figures with nothing needed") {
                figures = try scrape()
                return Self.sample(figures, "kaiten_folder_items{folder=\"\(Self.folder)\",scope=\"need\",type=\"files\"}") == 0
            }
            let copies = try Self.curl(base + "/rest/kaiten/lastcopies", headers: ["X-API-Key: \(key)"]).body
            #expect(Self.sample(figures, "kaiten_last_copy_files{folder=\"\(Self.folder)\"}") == 0, "\(copies)")
            #expect(Self.sample(figures, "kaiten_selected_bytes{folder=\"\(Self.folder)\"}") == Double("a, first\n".utf8.count + "b\n".utf8.count))
            #expect(Self.sample(figures, "kaiten_folder_items{folder=\"\(Self.folder)\",scope=\"global\",type=\"files\"}") == 3)

            // A selected file changes on the peer: pulled, and the numbers move.
            try TestFiles.write(world.peerData + "/docs/b.txt", String(repeating: "b, much longer now\n", count: 5000))
            try await ApplyInteropTests.rescan(st)
            try await RunInteropTests.waitFor("the change pulled") {
                RunInteropTests.content(world.local + "/docs/b.txt")?.count == 19 * 5000
            }
            // The pull is counted as it is done, the round once it ends (a moment later).
            let rounds = "kaiten_apply_rounds_total"
            try await RunInteropTests.waitFor("the pull and its round counted") {
                let now = try scrape()
                return (Self.sample(now, pulled) ?? 0) > (Self.sample(before, pulled) ?? 0) && (Self.sample(now, rounds) ?? 0) > (Self.sample(before, rounds) ?? 0)
            }
            let after = try scrape()
            #expect((Self.sample(after, received) ?? 0) >= (Self.sample(before, received) ?? 0) + 19 * 5000 / 10, "\(after)")
        }
    }

    @Test func aHundredWaitingPollsDoNotHoldUpTheSyncAndAllWake() async throws {
        try await Self.withKaitenBesideSyncthing("kaiten-rest-polls", runArguments: ["--apply", "all"]) { world, st, base, key in
            let latest = try await Self.firstPullsSaid(base, key: key)
            let since = try #require(latest.last?["id"] as? Int)
            // A hundred clients waiting at once, each on a connection of its own.
            let out = world.dir.file("polls")
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            let script = "for i in $(seq 100); do curl -sS -m 120 -H 'X-API-Key: \(key)' -o '\(out)/'$i -w '%{http_code}' "
                + "'\(base)/rest/events?since=\(since)&timeout=90&events=ItemFinished' > '\(out)/'$i.status & done; wait"
            let polls = Process()
            polls.executableURL = URL(fileURLWithPath: "/bin/bash")
            polls.arguments = ["-c", script]
            try polls.runAlone()
            defer { if polls.isRunning { kill(polls.processIdentifier, SIGKILL) } }
            try await RunInteropTests.waitFor("a hundred polls connected") {
                let ss = try ProcessRunner.run("/usr/bin/ss", ["-Htn", "state", "established", "dport", "= :\(base.split(separator: ":").last!)"],
                    environment: ["PATH": "/usr/bin:/bin"], timeout: 30)
                return ss.stdout.split(separator: "\n").count >= 100
            }
            // The API and the sync go on: a ping answers, a peer's change is pulled.
            let started = Date()
            #expect(try Self.curl(base + "/rest/system/ping", headers: ["X-API-Key: \(key)"]).body.contains("pong"))
            #expect(Date().timeIntervalSince(started) < 10)
            try TestFiles.write(world.peerData + "/docs/a.txt", "a, changed while a hundred wait\n")
            try await ApplyInteropTests.rescan(st)
            try await RunInteropTests.waitFor("the change pulled") { RunInteropTests.content(world.local + "/docs/a.txt") == "a, changed while a hundred wait\n" }
            // Every poll woke with it.
            try await RunInteropTests.waitFor("the polls answered", timeout: 120) { !polls.isRunning }
            for i in 1...100 {
                let status = RunInteropTests.content(out + "/\(i).status")
                let body = RunInteropTests.content(out + "/\(i)") ?? ""
                #expect(status == "200" && body.contains("\"item\":\"docs/a.txt\""), "poll \(i): \(status ?? "-") \(body.prefix(200))")
            }
        }
    }

    @Test func folderStatusAndCompletionMeanWhatTheSelectionAsksFor() async throws {
        // Nothing applied on its own: what the selection asks for stays needed until `apply`.
        try await Self.withKaitenBesideSyncthing("kaiten-rest-db", runArguments: ["--apply", "none"]) { world, st, base, key in
            func get(_ path: String) throws -> [String: Any] {
                let answer = try Self.curl(base + path, headers: ["X-API-Key: \(key)"])
                #expect(answer.status == 200, "\(path): \(answer.status) \(answer.body)")
                return try Self.json(answer.body)
            }
            let folder = Self.folder
            let wanted = Int64("a, first\n".utf8.count + "b\n".utf8.count)
            // docs/a.txt and docs/b.txt are selected, other/c.txt is not: two files and their
            // directory needed.
            var status = try get("/rest/db/status?folder=\(folder)")
            #expect(status["globalFiles"] as? Int == 3 && status["needFiles"] as? Int == 2 && status["needDirectories"] as? Int == 1, "\(status)")
            #expect((status["needBytes"] as? NSNumber)?.int64Value == wanted, "\(status)")
            var completion = try get("/rest/db/completion?folder=\(folder)")
            #expect(completion["needItems"] as? Int == 3 && (completion["completion"] as? Double ?? 100) < 100, "\(completion)")
            // The peer holds everything.
            let theirs = try get("/rest/db/completion?folder=\(folder)&device=\(st.deviceID)")
            #expect(theirs["completion"] as? Double == 100 && theirs["needItems"] as? Int == 0 && theirs["remoteState"] as? String == "valid", "\(theirs)")
            // Keys as syncthing's.
            for path in ["/rest/db/status?folder=\(folder)", "/rest/db/completion?folder=\(folder)&device=\(world.me)"] {
                let real = try await st.get(path)
                let ours = try get(path.replacingOccurrences(of: world.me.description, with: st.deviceID.description))
                let differences = Self.keyDifferences(kaiten: ours, syncthing: real)
                #expect(differences.isEmpty, "\(path) (syncthing \(SyncthingInstance.versionTag)): \(differences)")
            }
            #expect(try Self.curl(base + "/rest/db/status?folder=nope", headers: ["X-API-Key: \(key)"]).status == 404)

            // Applied: nothing needed any more.
            let applied = try world.kaiten("apply", "--yes")
            #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
            try await RunInteropTests.waitFor("the need gone") { (try get("/rest/db/status?folder=\(folder)"))["needFiles"] as? Int == 0 }
            status = try get("/rest/db/status?folder=\(folder)")
            #expect(status["localFiles"] as? Int == 2 && status["needBytes"] as? Int == 0, "\(status)")
            completion = try get("/rest/db/completion?folder=\(folder)")
            #expect(completion["completion"] as? Double == 100 && completion["needItems"] as? Int == 0, "\(completion)")
            // Selecting more makes it needed again.
            #expect(try world.kaiten("select", folder, "other").status == 0)
            try await RunInteropTests.waitFor("other/c.txt needed") { (try get("/rest/db/status?folder=\(folder)"))["needFiles"] as? Int == 1 }
        }
    }
}
