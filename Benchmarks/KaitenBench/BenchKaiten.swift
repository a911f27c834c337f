import Foundation
import KaitenProtocol
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A Kaiten home made for one benchmark, and its command line.
struct BenchKaiten {
    let home: String
    let me: DeviceID

    /// `kaiten init` in `home`, listening on a free loopback port.
    init(home: String) throws {
        self.home = home
        let created = try KaitenCLI.run(["init", "--home", home, "--name", "kaiten", "--listen", "tcp://127.0.0.1:0"])
        me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Runs a verb on this home; a failure ends the benchmark with its stderr.
    @discardableResult
    func run(_ args: [String]) throws -> ProcessResult {
        let result = try KaitenCLI.run(args + ["--home", home])
        guard result.status == 0 else { throw HarnessError("kaiten \(args.joined(separator: " ")) failed: \(result.stderr)") }
        return result
    }

    /// Starts `kaiten serve` on a free loopback port (its output discarded); the caller stops it
    /// with ``stop(_:)``.
    func startServe() throws -> (process: Process, port: Int) {
        let port = try FreePort.next()
        let server = Process()
        server.executableURL = URL(fileURLWithPath: KaitenCLI.executable)
        server.arguments = ["serve", "--home", home, "--listen", "127.0.0.1:\(port)"]
        server.standardError = FileHandle.nullDevice
        server.standardOutput = FileHandle.nullDevice
        try server.run()
        return (server, port)
    }

    func stop(_ server: Process) {
        kill(server.processIdentifier, SIGTERM)
        server.waitUntilExit()
    }
}

extension SyncthingInstance {
    /// Shares `path` as the send-only folder `folderID` with `devices`, and waits until this
    /// syncthing has scanned its `files` files (the first step of every benchmark with a source).
    func shareScanned(_ folderID: String, path: String, devices: [DeviceID], files: Int) async throws {
        try await addFolder(id: folderID, path: path, type: "sendonly", devices: devices)
        try await waitUntil("source scanned", timeout: 1800) {
            let s = try await self.get("/rest/db/status?folder=\(folderID)") as? [String: Any]
            return s?["state"] as? String == "idle" && (s?["localFiles"] as? Int ?? 0) == files
        }
    }
}
