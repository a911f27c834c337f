import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// CPU seconds and peak RSS of this process's waited-for children so far.
func childrenUsage() -> (cpu: Double, maxRSSMiB: Double) {
    var usage = rusage()
    getrusage(RUSAGE_CHILDREN.rawValue, &usage)
    let cpu = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec)
        + Double(usage.ru_stime.tv_usec) / 1e6
    return (cpu, Double(usage.ru_maxrss) / 1024)
}

/// `kaiten apply` pulling a folder from a syncthing peer, next to a second syncthing pulling the
/// same folder from the same peer, in the same run.
func runApplyBench(mib: Int, files: Int, directories: Int) async throws {
    if mib > 0 {
        try await applyComparison(label: "\(mib) MiB as 4 random files", expectedFiles: 4) { data in
        for i in 0..<4 { try TestFiles.random("\(data)/big\(i).bin", size: (mib / 4) << 20) }
    }
    }
    guard files > 0 else { return }
    try await applyComparison(label: "\(files) files of 4 KiB in \(directories) directories", expectedFiles: files) { data in
        try makeFourKiBFiles(data, files: files, directories: directories)
    }
}

func applyComparison(label: String, expectedFiles: Int, make: (String) throws -> Void) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-applybench")
    defer { dir.remove() }
    log("work dir \(dir.path): \(label)")
    let data = dir.file("data")
    try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
    try make(data)
    let totalBytes = Double(directorySize(data))
    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let receiver = try SyncthingInstance.generate(in: dir.path, name: "receiver")
    let kaitenData = dir.file("kaiten-data")
    let folderID = "bench"
    let bench = try BenchKaiten(home: dir.file("kaiten"))
    let kaitenHome = bench.home
    let me = bench.me
    func kaiten(_ args: [String]) throws -> ProcessResult { try bench.run(args) }

    try await withSyncthing(source) { a in
        try await a.addDevice(receiver.deviceID, name: "receiver", addresses: [receiver.address])
        try await a.addDevice(me, name: "kaiten")
        try await a.shareScanned(folderID, path: data, devices: [receiver.deviceID, me], files: expectedFiles)
        _ = try kaiten(["peer", "add", a.deviceID.description, "--name", "source", "--address", a.address])
        _ = try kaiten(["folder", "add", folderID, "--path", kaitenData, "--share", a.deviceID.description])
        _ = try kaiten(["index", "sync"])
        let top = try FileManager.default.contentsOfDirectory(atPath: data).filter { !$0.hasPrefix(".st") }
        _ = try kaiten(["select", folderID] + top)

        // Kaiten: everything from connecting to the last rename, in its own process.
        let before = childrenUsage()
        let start = now()
        // KAITEN_BENCH_PERF="ARGS" runs the apply under `perf ARGS` ("record -g -o FILE",
        // "record -e page-faults -g -o FILE", "stat -e page-faults"), started with no signal
        // blocked (perf would inherit the bench's blocked SIGCHLD and never end).
        let applied: ProcessResult
        if let perfArguments = ProcessInfo.processInfo.environment["KAITEN_BENCH_PERF"] {
            let perf = perfCommand(
                perfArguments.split(separator: " ").map(String.init) + [KaitenCLI.executable, "apply", "--yes", "--json", "--home", kaitenHome])
            applied = try ProcessRunner.run(perf.executable, perf.arguments)
        } else {
            applied = try kaiten(["apply", "--yes", "--json"])
        }
        let kaitenSeconds = now() - start
        let after = childrenUsage()
        let summary = applied.stdout.split(separator: "\n").last.map(String.init) ?? ""
        let kaitenFiles = (try? FileManager.default.subpathsOfDirectory(atPath: kaitenData).filter { !$0.hasPrefix(".st") }.count) ?? 0
        log("kaiten summary: \(summary) (\(kaitenFiles) entries on disk)")

        // A fresh syncthing receiving the same folder from the same peer.
        let theirs = try await withSyncthing(receiver) { b in
            try await syncthingPull(source: a, receiver: b, folderID: folderID, folderPath: dir.file("receiver-data")) { s in
                (s["localFiles"] as? Int ?? 0) == expectedFiles && (s["needFiles"] as? Int ?? 1) == 0 && s["state"] as? String == "idle"
            }
        }
        let ourCPU = after.cpu - before.cpu
        print("")
        print("== pull of \(label) (\(String(format: "%.0f", totalBytes / 1_048_576)) MiB) from one syncthing peer ==")
        print(
            String(
                format: "kaiten apply:        %6.2f s  %7.1f MB/s  %8.0f files/s  %5.2f CPU-s  %6.1f MiB peak RSS (goal for 1 GiB as 4 files: ≤ 64)", kaitenSeconds,
                totalBytes / kaitenSeconds / 1e6, Double(expectedFiles) / kaitenSeconds, ourCPU, after.maxRSSMiB))
        print(
            String(
                format: "syncthing receiver:  %6.2f s  %7.1f MB/s  %8.0f files/s  %5.2f CPU-s  %6.1f MiB peak RSS", theirs.seconds,
                totalBytes / theirs.seconds / 1e6, Double(expectedFiles) / theirs.seconds, theirs.cpu, theirs.rss))
        print(
            String(
                format: "ratio kaiten/syncthing: throughput %.2f×, CPU %.2f×", theirs.seconds / kaitenSeconds,
                ourCPU / max(theirs.cpu, 0.001)))
        print("(kaiten: index exchange, verified pulls, fsync before every rename; syncthing: the same, from adding the folder)")
    }
}

/// A running syncthing `receiver` pulls `folderID` from `source` into `folderPath`, from adding
/// the folder until `done` holds for its `/rest/db/status`; returns time, CPU and peak RSS.
func syncthingPull(
    source a: SyncthingInstance, receiver b: SyncthingInstance, folderID: String, folderPath: String, stignore: String? = nil,
    until done: @escaping ([String: Any]) -> Bool
) async throws -> (seconds: Double, cpu: Double, rss: Double) {
    try await b.addDevice(a.deviceID, name: "source", addresses: [a.address])
    try FileManager.default.createDirectory(atPath: folderPath, withIntermediateDirectories: true)
    if let stignore { try stignore.write(toFile: folderPath + "/.stignore", atomically: true, encoding: .utf8) }
    try await a.waitUntil("source and receiver connected", timeout: 60) {
        let c = try await a.get("/rest/system/connections") as? [String: Any]
        let conns = c?["connections"] as? [String: Any]
        return (conns?[b.deviceID.description] as? [String: Any])?["connected"] as? Bool == true
    }
    guard let pid = pidOf(home: b.home) else { throw HarnessError("no receiver pid") }
    let cpu0 = ProcStat.cpuSeconds(pid: pid)
    let start = now()
    try await b.addFolder(id: folderID, path: folderPath, type: "receiveonly", devices: [a.deviceID])
    try await b.waitUntil("receiver done", timeout: 1800) {
        done(try await b.get("/rest/db/status?folder=\(folderID)") as? [String: Any] ?? [:])
    }
    return (now() - start, ProcStat.cpuSeconds(pid: pid) - cpu0, ProcStat.peakRSS(pid: pid))
}
