import Foundation
import KaitenConfig
import KaitenProtocol

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A real syncthing running on 127.0.0.1 for a test: Debian's 1.19.2, or the binary named by
/// `KAITEN_SYNCTHING` (scripts/test runs the interop suites again with syncthing 2.x).
///
/// Everything that reaches beyond loopback is switched off in its config.xml: global and
/// local discovery, relays, NAT traversal, STUN, usage and crash reporting, upgrades. It runs
/// as one process (`STMONITORED=1`, bep-brief §8.2) so that the PID we hold is the one to stop,
/// and it is always stopped by that PID — ``withSyncthing(_:_:)`` does it even when the test
/// throws.
public final class SyncthingInstance: @unchecked Sendable {
    public let home: String
    public let listenPort: Int
    public let guiPort: Int
    public let apiKey: String
    public let deviceID: DeviceID
    private let lock = NSLock()
    private var process: Process?
    /// The network namespace it runs in (``generate(in:name:party:)``), or nil for the
    /// machine's own loopback.
    public let party: NetworkNamespaces.Party?

    /// The syncthing binary, `$KAITEN_SYNCTHING` or `syncthing` on `$PATH`.
    public static var binary: String? {
        if let env = ProcessInfo.processInfo.environment["KAITEN_SYNCTHING"], !env.isEmpty { return env }
        return ProcessRunner.which("syncthing")
    }

    /// The binary's major version (1 for Debian's 1.19.2, 2 for 2.x): the command lines differ.
    public static let majorVersion: Int = {
        // 2.x panics without $HOME, even for --version.
        guard let binary,
            let result = try? ProcessRunner.run(binary, ["--version"], environment: ["PATH": "/usr/bin:/bin", "HOME": NSTemporaryDirectory()]),
            let range = result.stdout.range(of: #"v(\d+)\."#, options: .regularExpression)
        else { return 1 }
        return Int(result.stdout[range].dropFirst().dropLast()) ?? 1
    }()

    /// The version the binary reports in its Hello, e.g. `v1.19.2` or `v2.1.3`.
    public static let versionTag: String = {
        let words = versionLine.split(separator: " ")
        guard words.count > 1 else { return "" }
        return String(words[1].split(separator: "-").first ?? words[1])
    }()

    /// How this generation logs an incoming connection from an unknown device.
    public static var unknownDeviceLogLine: String {
        majorVersion >= 2 ? "error=\"unknown device\"" : "rejected: unknown device"
    }

    /// The version line of the binary under test, for failure messages and skip notes.
    public static var versionLine: String {
        guard let binary else { return "no syncthing" }
        return (try? ProcessRunner.run(binary, ["--version"], environment: ["PATH": "/usr/bin:/bin", "HOME": NSTemporaryDirectory()]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? binary
    }

    /// Where syncthing's BEP listener is, as a `tcp://` address for config.xml.
    public var address: String { "tcp://\(party?.address ?? "127.0.0.1"):\(listenPort)" }

    private init(home: String, listenPort: Int, guiPort: Int, apiKey: String, deviceID: DeviceID, party: NetworkNamespaces.Party? = nil) {
        self.home = home
        self.listenPort = listenPort
        self.guiPort = guiPort
        self.apiKey = apiKey
        self.deviceID = deviceID
        self.party = party
    }

    /// Makes a new syncthing home with `syncthing generate` and configures it for loopback
    /// only; with `party`, for that network namespace: it listens on the party's address (port
    /// 22000, the namespace is the test's own) and its GUI on the namespace's loopback, reached
    /// through `ip netns exec … curl`. Discovery and relays stay off until the test turns them
    /// on (``setOptions(_:)``).
    public static func generate(in directory: String, name: String = "st", party: NetworkNamespaces.Party? = nil) throws
        -> SyncthingInstance
    {
        guard let binary else { throw HarnessError("syncthing is not installed; scripts/test installs it") }
        let home = (directory as NSString).appendingPathComponent(name)
        // 2.x: subcommand flags changed, and it makes no default folder.
        let arguments =
            majorVersion >= 2
            ? ["generate", "--home", home, "--no-port-probing"]
            : ["generate", "--home", home, "--no-default-folder", "--skip-port-probing"]
        let result = try ProcessRunner.run(
            binary, arguments, environment: ["STNODEFAULTFOLDER": "1", "HOME": directory, "PATH": "/usr/bin:/bin"])
        guard result.status == 0 else { throw HarnessError("syncthing generate failed: \(result.stderr)") }
        let config = try ConfigFile.load(path: (home as NSString).appendingPathComponent("config.xml"))
        let listenPort = party == nil ? try FreePort.next() : 22000
        let guiPort = party == nil ? try FreePort.next() : 8384
        let apiKey = "kaiten-test-" + UUID().uuidString.prefix(8)
        // In a namespace it listens on every address, as syncthing's default does, so that
        // what it announces is `tcp://0.0.0.0:22000` and a finder must fill in the address.
        config.setListenAddresses(["tcp://\(party == nil ? "127.0.0.1" : "0.0.0.0"):\(listenPort)"])
        for (name, value) in loopbackOnlyOptions { config.setOption(name, value) }
        config.setGUI(address: "127.0.0.1:\(guiPort)", apiKey: apiKey)
        try config.write()
        let id = try Identity.deviceID(certificatePath: (home as NSString).appendingPathComponent("cert.pem"))
        return SyncthingInstance(home: home, listenPort: listenPort, guiPort: guiPort, apiKey: apiKey, deviceID: id, party: party)
    }

    /// Sets options in config.xml before ``start(timeout:)`` (discovery on, say).
    public func setOptions(_ options: [(String, String)]) throws {
        let config = try ConfigFile.load(path: (home as NSString).appendingPathComponent("config.xml"))
        for (name, value) in options { config.setOption(name, value) }
        try config.write()
    }

    /// Uses an existing home (one made by Kaiten, say) as it is; only the GUI address and API
    /// key are given on the command line, so config.xml is not touched before syncthing reads it.
    public static func existing(home: String) throws -> SyncthingInstance {
        let config = try ConfigFile.load(path: (home as NSString).appendingPathComponent("config.xml"))
        let port = config.options.tcpListenAddresses.first.flatMap { URL(string: $0)?.port } ?? 0
        let id = try Identity.deviceID(certificatePath: (home as NSString).appendingPathComponent("cert.pem"))
        return SyncthingInstance(
            home: home, listenPort: port, guiPort: try FreePort.next(),
            apiKey: "kaiten-test-" + UUID().uuidString.prefix(8), deviceID: id)
    }

    /// Options that keep a test instance on loopback and quiet (bep-brief §8.2).
    public static let loopbackOnlyOptions: [(String, String)] = [
        ("globalAnnounceEnabled", "false"), ("localAnnounceEnabled", "false"), ("relaysEnabled", "false"),
        ("natEnabled", "false"), ("startBrowser", "false"), ("urAccepted", "-1"), ("urSeen", "3"),
        ("autoUpgradeIntervalH", "0"), ("crashReportingEnabled", "false"), ("stunKeepaliveStartS", "0"),
        ("stunKeepaliveMinS", "0"), ("announceLANAddresses", "false"), ("setLowPriority", "false"),
        ("restartOnWakeup", "false"), ("reconnectionIntervalS", "2"), ("releasesURL", ""), ("urURL", ""),
        ("crashReportingURL", ""),
    ]

    /// The syncthing log so far (for failure messages).
    public var log: String {
        (try? String(contentsOfFile: (home as NSString).appendingPathComponent("syncthing.log"), encoding: .utf8)) ?? ""
    }

    /// Starts syncthing and waits until its REST API answers.
    public func start(timeout: TimeInterval = 60) async throws {
        guard let binary = Self.binary else { throw HarnessError("syncthing is not installed") }
        let logPath = (home as NSString).appendingPathComponent("syncthing.log")
        FileManager.default.createFile(atPath: logPath, contents: nil)
        let logHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        let process = Process()
        let arguments =
            [
                "serve", "--home", home, "--no-browser", "--no-restart", "--no-upgrade",
                "--gui-address=http://127.0.0.1:\(guiPort)", "--gui-apikey=\(apiKey)",
            ] + (Self.majorVersion >= 2 ? ["--log-level=INFO"] : ["--logflags=7"])
        // `ip netns exec` execs the program in place: the PID held is syncthing's.
        let (executable, argv) = party.map { NetworkNamespaces.wrap($0, binary, arguments) } ?? (binary, arguments)
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = argv
        process.environment = [
            "STMONITORED": "1", "STNOUPGRADE": "1", "STNODEFAULTFOLDER": "1", "STNORESTART": "1",
            "HOME": (home as NSString).deletingLastPathComponent, "PATH": "/usr/bin:/bin",
        ]
        process.standardOutput = logHandle
        process.standardError = logHandle
        process.standardInput = FileHandle.nullDevice
        try process.runAlone()
        lock.withLock { self.process = process }
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if !process.isRunning {
                throw HarnessError("syncthing exited during start (status \(process.terminationStatus)):\n\(log)")
            }
            if (try? await get("/rest/system/ping")) != nil { return }
            try await Task.sleep(nanoseconds: 200_000_000)
        }
        stop()
        throw HarnessError("syncthing's REST API did not come up within \(Int(timeout)) s:\n\(log)")
    }

    /// Stops syncthing by its PID: SIGTERM, then SIGKILL after 10 s.
    /// Freezes (SIGSTOP) or thaws (SIGCONT) the running syncthing: a peer that keeps its
    /// connections open and answers nothing.
    public func freeze(_ frozen: Bool) {
        guard let pid = process?.processIdentifier else { return }
        kill(pid, frozen ? SIGSTOP : SIGCONT)
    }

    public func stop() {
        guard let process = lock.withLock({ () -> Process? in
            let p = self.process
            self.process = nil
            return p
        }) else { return }
        guard process.isRunning else { return }
        let pid = process.processIdentifier
        kill(pid, SIGTERM)
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning && Date() < deadline { usleep(50_000) }
        if process.isRunning { kill(pid, SIGKILL) }
        // SIGKILL cannot be ignored; the bound only guards against a wedged kernel task.
        try? process.waitForExit(timeout: 30, what: "syncthing (pid \(pid))")
    }

    public var isRunning: Bool { lock.withLock { process?.isRunning ?? false } }

    deinit { stop() }

    // MARK: - REST

    /// GET a REST endpoint and decode its JSON.
    public func get(_ path: String) async throws -> Any {
        try await request("GET", path, body: nil)
    }

    /// POST to a REST endpoint.
    @discardableResult
    public func post(_ path: String, json: Any? = nil) async throws -> Any {
        try await request("POST", path, body: json)
    }

    /// PUT a JSON document to a REST endpoint.
    @discardableResult
    public func put(_ path: String, json: Any) async throws -> Any {
        try await request("PUT", path, body: json)
    }

    private func request(_ method: String, _ path: String, body: Any?) async throws -> Any {
        if let party { return try namespacedRequest(method, path, body: body, party: party) }
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(guiPort)\(path)")!)
        request.httpMethod = method
        request.setValue(apiKey, forHTTPHeaderField: "X-API-Key")
        request.timeoutInterval = 30
        if let body {
            request.httpBody = try JSONSerialization.data(withJSONObject: body)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard (200..<300).contains(status) else {
            throw HarnessError("\(method) \(path): HTTP \(status): \(String(decoding: data, as: UTF8.self))")
        }
        if data.isEmpty { return [String: Any]() }
        return (try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])) ?? [String: Any]()
    }

    /// A REST call to a syncthing in a namespace: its GUI is on that namespace's loopback, so
    /// curl runs there.
    private func namespacedRequest(_ method: String, _ path: String, body: Any?, party: NetworkNamespaces.Party) throws -> Any {
        var arguments = [
            "-sS", "-m", "30", "-X", method, "-H", "X-API-Key: \(apiKey)", "-w", "\n%{http_code}",
            "http://127.0.0.1:\(guiPort)\(path)",
        ]
        var input: String?
        if let body {
            input = String(decoding: try JSONSerialization.data(withJSONObject: body), as: UTF8.self)
            arguments += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
        }
        let (executable, argv) = NetworkNamespaces.wrap(party, "/usr/bin/curl", arguments)
        let result = try ProcessRunner.run(executable, argv, environment: ["PATH": "/usr/bin:/bin"], stdin: input, timeout: 60)
        guard result.status == 0 else { throw HarnessError("\(method) \(path): curl failed: \(result.stderr)") }
        var lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.popLast() ?? "") ?? 0
        let data = Data(lines.joined(separator: "\n").utf8)
        guard (200..<300).contains(status) else {
            throw HarnessError("\(method) \(path): HTTP \(status): \(String(decoding: data, as: UTF8.self))")
        }
        if data.isEmpty { return [String: Any]() }
        return (try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])) ?? [String: Any]()
    }

    /// Adds (or replaces) a folder through the REST API, with the watcher off and hourly
    /// rescans, so that nothing changes behind a test's back.
    public func addFolder(
        id: String, path: String, type: String = "sendreceive", devices: [DeviceID], extra: [String: Any] = [:]
    ) async throws {
        var folder: [String: Any] = [
            "id": id, "label": id, "path": path, "type": type, "rescanIntervalS": 3600,
            "fsWatcherEnabled": false, "maxConflicts": 10,
            "devices": ([deviceID] + devices).map { ["deviceID": $0.description] },
        ]
        folder.merge(extra) { _, new in new }
        try await put("/rest/config/folders/\(id)", json: folder)
    }

    /// Adds (or replaces) a device through the REST API.
    public func addDevice(_ id: DeviceID, name: String, addresses: [String] = ["dynamic"], compression: String = "metadata")
        async throws
    {
        try await put(
            "/rest/config/devices/\(id)",
            json: ["deviceID": id.description, "name": name, "addresses": addresses, "compression": compression])
    }

    /// Polls until `condition` holds, or fails after `timeout` seconds.
    public func waitUntil(
        _ what: String, timeout: TimeInterval = 60, _ condition: () async throws -> Bool
    ) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if (try? await condition()) == true { return }
            try await Task.sleep(nanoseconds: 200_000_000)
        }
        throw HarnessError("timed out after \(Int(timeout)) s waiting for \(what)\n--- syncthing log ---\n\(log.suffix(3000))")
    }

    /// Waits until a folder is idle (scanned, nothing pulling).
    public func waitIdle(folder: String, timeout: TimeInterval = 60) async throws {
        try await waitUntil("folder \(folder) idle", timeout: timeout) {
            let status = try await self.get("/rest/db/status?folder=\(folder)") as? [String: Any]
            return status?["state"] as? String == "idle"
        }
    }
}

/// Starts syncthing, runs `body`, and stops syncthing by PID whatever happens.
public func withSyncthing<T>(
    _ instance: SyncthingInstance, _ body: (SyncthingInstance) async throws -> T
) async throws -> T {
    try await instance.start()
    do {
        let result = try await body(instance)
        instance.stop()
        return result
    } catch {
        instance.stop()
        throw error
    }
}

/// A failure of the test harness itself (as opposed to of Kaiten).
public struct HarnessError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension SyncthingInstance {
    /// What `syncthing serve --home HOME --device-id` prints: syncthing's own reading of cert.pem.
    public static func deviceIDAsSyncthingSees(home: String) throws -> String {
        guard let binary else { throw HarnessError("syncthing is not installed") }
        let result = try ProcessRunner.run(
            binary, majorVersion >= 2 ? ["device-id", "--home", home] : ["serve", "--home", home, "--device-id"],
            environment: ["HOME": home, "PATH": "/usr/bin:/bin", "STNOUPGRADE": "1"])
        guard result.status == 0 else {
            throw HarnessError("syncthing serve --device-id failed (\(result.status)): \(result.stderr)")
        }
        return result.stdout.split(separator: "\n").last.map(String.init) ?? ""
    }
}
