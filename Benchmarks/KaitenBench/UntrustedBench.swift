import Foundation
import KaitenProtocol
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Pulling from an untrusted device, the laptop-and-VPS case (issue 40): a syncthing holds the
/// folder encrypted (receive-encrypted, filled by a trusted syncthing that is then stopped, so
/// it is the only source); `kaiten apply` of a fresh home with the password, next to a fresh
/// trusted syncthing pulling the same folder from it. Both decrypt and check every block.
func runUntrustedBench(mib: Int, runs: Int) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-untrustedbench")
    defer { dir.remove() }
    log("work dir \(dir.path): \(mib) MiB as 4 random files held encrypted by an untrusted syncthing, \(runs) runs")
    let made = try SealedBenchData(in: dir, mib: mib)
    let (data, totalBytes, password, passwordFile, folderID) = (made.data, made.totalBytes, made.password, made.passwordFile, made.folderID)
    let stored = dir.file("stored")
    try FileManager.default.createDirectory(atPath: stored, withIntermediateDirectories: true)

    let trusted = try SyncthingInstance.generate(in: dir.path, name: "trusted")
    let untrusted = try SyncthingInstance.generate(in: dir.path, name: "untrusted")
    let receivers = try (1...runs).map { try SyncthingInstance.generate(in: dir.path, name: "receiver-\($0)") }
    let kaitens = try (1...runs).map { try BenchKaiten(home: dir.file("kaiten-\($0)")) }
    var ours: [SideRun] = []
    var theirs: [SideRun] = []

    try await withSyncthing(untrusted) { u in
        try await u.addDevice(trusted.deviceID, name: "trusted", addresses: [trusted.address])
        for (run, receiver) in receivers.enumerated() { try await u.addDevice(receiver.deviceID, name: "receiver-\(run + 1)", addresses: [receiver.address]) }
        for (run, bench) in kaitens.enumerated() { try await u.addDevice(bench.me, name: "kaiten-\(run + 1)") }
        try await u.addFolder(
            id: folderID, path: stored, type: "receiveencrypted", devices: [trusted.deviceID] + receivers.map(\.deviceID) + kaitens.map(\.me))
        // The trusted device fills the untrusted one, then goes: it is the only source left.
        try await withSyncthing(trusted) { t in
            try await t.addDevice(u.deviceID, name: "untrusted", addresses: [u.address])
            try await t.addFolder(
                id: folderID, path: data, type: "sendonly", devices: [u.deviceID],
                extra: ["devices": [["deviceID": t.deviceID.description], ["deviceID": u.deviceID.description, "encryptionPassword": password]]])
            try await u.waitUntil("the untrusted device stores the folder", timeout: 1800) {
                let s = try await u.get("/rest/db/status?folder=\(folderID)") as? [String: Any]
                return s?["state"] as? String == "idle" && (s?["localFiles"] as? Int ?? 0) == 4 && (s?["needFiles"] as? Int ?? 1) == 0
            }
        }
        for run in 1...runs {
            let bench = kaitens[run - 1]
            let kaitenData = dir.file("kaiten-\(run)-data")
            try bench.run(["peer", "add", u.deviceID.description, "--name", "untrusted", "--address", u.address])
            try bench.run(["folder", "add", folderID, "--path", kaitenData])
            try bench.run(["folder", "share", folderID, "untrusted", "--untrusted", "--password-file", passwordFile])
            try bench.run(["index", "sync"])
            try bench.run(["select", folderID, "big0.bin", "big1.bin", "big2.bin", "big3.bin"])
            settleFileSystem()
            let timed = try ProcessRunner.run(CommandLine.arguments[0], ["timed", KaitenCLI.executable, "apply", "--yes", "--json", "--home", bench.home])
            let f = timed.stdout.split(separator: " ").compactMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            guard timed.status == 0, f.count == 3 else { throw HarnessError("kaiten apply failed: \(timed.stderr)") }
            for i in 0..<4 where sha256(file: "\(kaitenData)/big\(i).bin") != sha256(file: "\(data)/big\(i).bin") {
                throw HarnessError("kaiten's big\(i).bin differs from the source's")
            }
            ours.append(SideRun(seconds: f[0], cpu: f[1], rss: f[2]))

            // A fresh trusted syncthing, the same password, the same untrusted source.
            let pulled = try await withSyncthing(receivers[run - 1]) { b in
                try await b.addDevice(u.deviceID, name: "untrusted", addresses: [u.address])
                try await u.waitUntil("untrusted and receiver connected", timeout: 60) {
                    let c = try await u.get("/rest/system/connections") as? [String: Any]
                    return ((c?["connections"] as? [String: Any])?[b.deviceID.description] as? [String: Any])?["connected"] as? Bool == true
                }
                let path = dir.file("receiver-\(run)-data")
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
                return try await SideRun.measure(b, folder: folderID, files: 4, "receiver") {
                    try await b.addFolder(
                        id: folderID, path: path, type: "receiveonly", devices: [u.deviceID],
                        extra: ["devices": [["deviceID": b.deviceID.description], ["deviceID": u.deviceID.description, "encryptionPassword": password]]])
                }
            }
            theirs.append(pulled)
            SideRun.say(run, kaiten: ours.last!, syncthing: pulled)
        }
    }
    SideRun.table(
        "pull of \(mib) MiB (4 files) from an untrusted syncthing (ciphertext only), median of \(runs)", bytes: totalBytes,
        kaiten: ("kaiten apply:", ours), syncthing: ("syncthing receiver:", theirs),
        why: "both decrypt every block and check its SHA-256; the untrusted syncthing shares the 2 cores")
}

/// The SHA-256 of a file, hex (nil when unreadable).
/// What both untrusted benches start from: M MiB as 4 random files, and the password in a file.
private struct SealedBenchData {
    let data: String
    let totalBytes: Double
    let password = "bench password"
    let passwordFile: String
    let folderID = "bench"

    init(in dir: TemporaryDirectory, mib: Int) throws {
        data = dir.file("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        for i in 0..<4 { try TestFiles.random("\(data)/big\(i).bin", size: (mib / 4) << 20) }
        totalBytes = Double(directorySize(data))
        passwordFile = dir.file("password")
        try password.write(toFile: passwordFile, atomically: true, encoding: .utf8)
    }
}

private func sha256(file path: String) -> String? {
    let result = try? ProcessRunner.run("/usr/bin/sha256sum", [path])
    return result?.stdout.split(separator: " ").first.map(String.init)
}

/// Holding a folder as the untrusted device (issue 40, item 3), the rented-server case: a
/// trusted syncthing shares M MiB encrypted; a fresh Kaiten (`receiveencrypted`, `kaiten
/// apply` after `index sync`) next to a fresh syncthing (receive-encrypted) storing the same
/// from it. Neither can check a block (no password): both write ciphertext and its trailer.
func runUntrustedHoldingBench(mib: Int, runs: Int) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-holdbench")
    defer { dir.remove() }
    log("work dir \(dir.path): \(mib) MiB as 4 random files, shared encrypted by a trusted syncthing, \(runs) runs")
    let made = try SealedBenchData(in: dir, mib: mib)
    let (data, totalBytes, password, passwordFile, folderID) = (made.data, made.totalBytes, made.password, made.passwordFile, made.folderID)

    let trusted = try SyncthingInstance.generate(in: dir.path, name: "trusted")
    let holders = try (1...runs).map { try SyncthingInstance.generate(in: dir.path, name: "holder-\($0)") }
    let kaitens = try (1...runs).map { try BenchKaiten(home: dir.file("kaiten-\($0)")) }
    var ours: [SideRun] = []
    var theirs: [SideRun] = []

    try await withSyncthing(trusted) { t in
        for (run, holder) in holders.enumerated() { try await t.addDevice(holder.deviceID, name: "holder-\(run + 1)", addresses: [holder.address]) }
        for (run, bench) in kaitens.enumerated() { try await t.addDevice(bench.me, name: "kaiten-\(run + 1)") }
        let sealedFor = (holders.map(\.deviceID) + kaitens.map(\.me)).map { ["deviceID": $0.description, "encryptionPassword": password] }
        try await t.addFolder(
            id: folderID, path: data, type: "sendonly", devices: [],
            extra: ["devices": [["deviceID": t.deviceID.description]] + sealedFor])
        try await t.waitUntil("the trusted device scanned", timeout: 600) {
            let s = try await t.get("/rest/db/status?folder=\(folderID)") as? [String: Any]
            return s?["state"] as? String == "idle" && (s?["localFiles"] as? Int ?? 0) == 4
        }
        for run in 1...runs {
            let bench = kaitens[run - 1]
            let stored = dir.file("kaiten-\(run)-stored")
            try bench.run(["peer", "add", t.deviceID.description, "--name", "trusted", "--address", t.address])
            try bench.run(["folder", "add", folderID, "--path", stored, "--type", "receiveencrypted", "--share", "trusted"])
            try bench.run(["index", "sync"])
            settleFileSystem()
            let timed = try ProcessRunner.run(CommandLine.arguments[0], ["timed", KaitenCLI.executable, "apply", "--yes", "--json", "--home", bench.home])
            let f = timed.stdout.split(separator: " ").compactMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            guard timed.status == 0, f.count == 3 else { throw HarnessError("kaiten apply failed: \(timed.stderr)") }
            let verified = try ProcessRunner.run(KaitenCLI.executable, ["decrypt", stored, "--password-file", passwordFile, "--verify-only"])
            guard verified.status == 0, verified.stdout.contains("4 verified, 0 failed") else {
                throw HarnessError("kaiten decrypt of Kaiten's store: \(verified.stdout)\(verified.stderr)")
            }
            ours.append(SideRun(seconds: f[0], cpu: f[1], rss: f[2]))

            let held = try await withSyncthing(holders[run - 1]) { h in
                // The folder first, the trusted device paused: a receive-encrypted syncthing
                // learns the token only from a ClusterConfig the trusted one sends after it has
                // the folder (one sent before is not looked at again), so the connection starts
                // after. The clock starts when the device is resumed.
                try await h.put(
                    "/rest/config/devices/\(t.deviceID)",
                    json: ["deviceID": t.deviceID.description, "name": "trusted", "addresses": [t.address], "paused": true])
                let path = dir.file("holder-\(run)-stored")
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
                try await h.addFolder(id: folderID, path: path, type: "receiveencrypted", devices: [t.deviceID])
                return try await SideRun.measure(h, folder: folderID, files: 4, "holder") {
                    try await h.put(
                        "/rest/config/devices/\(t.deviceID)",
                        json: ["deviceID": t.deviceID.description, "name": "trusted", "addresses": [t.address], "paused": false])
                }
            }
            theirs.append(held)
            SideRun.say(run, kaiten: ours.last!, syncthing: held)
        }
    }
    SideRun.table(
        "holding \(mib) MiB (4 files) as the untrusted device, from a trusted syncthing, median of \(runs)", bytes: totalBytes,
        kaiten: ("kaiten apply:", ours), syncthing: ("syncthing holder:", theirs),
        why: "neither can check a block: ciphertext and trailer written; the trusted syncthing shares the 2 cores")
}

/// One side's run of a transfer measured beside the other's: wall time, CPU-seconds, peak RSS (MiB).
struct SideRun {
    var seconds: Double
    var cpu: Double
    var rss: Double

    /// A syncthing's side: from `start` (what begins its transfer) until `folder` is idle with
    /// `files` files and nothing needed.
    static func measure(
        _ st: SyncthingInstance, folder: String, files: Int, _ what: String, start: () async throws -> Void
    ) async throws -> SideRun {
        guard let pid = pidOf(home: st.home) else { throw HarnessError("no \(what) pid") }
        settleFileSystem()
        let cpu0 = ProcStat.cpuSeconds(pid: pid)
        let begin = now()
        try await start()
        try await st.waitUntil("\(what) done", timeout: 1800) {
            let s = try await st.get("/rest/db/status?folder=\(folder)") as? [String: Any] ?? [:]
            return (s["localFiles"] as? Int ?? 0) == files && (s["needFiles"] as? Int ?? 1) == 0 && s["state"] as? String == "idle"
        }
        return SideRun(seconds: now() - begin, cpu: ProcStat.cpuSeconds(pid: pid) - cpu0, rss: ProcStat.peakRSS(pid: pid))
    }

    static func say(_ run: Int, kaiten ours: SideRun, syncthing theirs: SideRun) {
        log(String(
            format: "run %d: kaiten %.2f s, %.2f CPU-s, %.1f MiB; syncthing %.2f s, %.2f CPU-s, %.1f MiB: %.2f×", run, ours.seconds, ours.cpu,
            ours.rss, theirs.seconds, theirs.cpu, theirs.rss, theirs.seconds / ours.seconds))
    }

    /// The medians of both sides and their ratios, under `title`.
    static func table(_ title: String, bytes: Double, kaiten ours: (String, [SideRun]), syncthing theirs: (String, [SideRun]), why: String) {
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        func row(_ name: String, _ runs: [SideRun]) -> String {
            let seconds = median(runs.map(\.seconds))
            return String(
                format: "%@ %6.2f s (%.2f–%.2f)  %7.1f MB/s  %5.2f CPU-s  %6.1f MiB peak RSS",
                name.padding(toLength: 20, withPad: " ", startingAt: 0) as NSString, seconds, runs.map(\.seconds).min()!,
                runs.map(\.seconds).max()!, bytes / seconds / 1e6, median(runs.map(\.cpu)), median(runs.map(\.rss)))
        }
        print("")
        print("== \(title) ==")
        print(row(ours.0, ours.1))
        print(row(theirs.0, theirs.1))
        print(String(
            format: "ratio kaiten/syncthing: throughput %.2f×, CPU %.2f×, RSS %.2f×   (%@)",
            median(theirs.1.map(\.seconds)) / median(ours.1.map(\.seconds)), median(ours.1.map(\.cpu)) / max(median(theirs.1.map(\.cpu)), 0.001),
            median(ours.1.map(\.rss)) / max(median(theirs.1.map(\.rss)), 0.001), why as NSString))
    }
}
