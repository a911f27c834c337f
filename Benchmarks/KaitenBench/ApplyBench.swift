import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import Synchronization

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
/// same folder from the same peer, in the same run; `runs` of each, medians.
func runApplyBench(mib: Int, files: Int, directories: Int, runs: Int) async throws {
    if mib > 0 {
        try await applyComparison(label: "\(mib) MiB as 4 random files", expectedFiles: 4, runs: runs) { data in
            for i in 0..<4 { try TestFiles.random("\(data)/big\(i).bin", size: (mib / 4) << 20) }
        }
    }
    guard files > 0 else { return }
    try await applyComparison(label: "\(files) files of 4 KiB in \(directories) directories", expectedFiles: files, runs: runs) { data in
        try makeFourKiBFiles(data, files: files, directories: directories)
    }
}

func applyComparison(label: String, expectedFiles: Int, runs: Int, make: (String) throws -> Void) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-applybench")
    // Every run's trees stay until the end: deleting one run's 20,000 files slows the next
    // run's file creation on some file systems (see `settleFileSystem`), whichever side it is;
    // and so does an earlier bench's clean-up.
    // KAITEN_BENCH_KEEP_TREES=1 leaves them (say where) for benches run one after another.
    waitOutEarlierCleanUp()
    defer {
        if ProcessInfo.processInfo.environment["KAITEN_BENCH_KEEP_TREES"] == "1" {
            log("kept \(dir.path) (KAITEN_BENCH_KEEP_TREES): delete it when the benches are over")
        } else {
            dir.remove()
            noteCleanUp()
        }
    }
    log("work dir \(dir.path): \(label), \(runs) runs")
    let data = dir.file("data")
    try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
    try make(data)
    let totalBytes = Double(directorySize(data))
    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let receivers = try (1...runs).map { try SyncthingInstance.generate(in: dir.path, name: "receiver-\($0)") }
    let kaitens = try (1...runs).map { try BenchKaiten(home: dir.file("kaiten-\($0)")) }
    // The same apply asked of a running `kaiten run` (its connection to the source already
    // open, as the syncthing receiver's is).
    let services = try (1...runs).map { try BenchKaiten(home: dir.file("kaiten-run-\($0)")) }
    let folderID = "bench"
    /// `sourceCPU`: what the source spent serving meanwhile (it shares the two cores).
    struct Run { var seconds: Double; var cpu: Double; var rss: Double; var sourceCPU = 0.0 }
    var ours: [Run] = []
    var beside: [Run] = []
    var theirs: [Run] = []

    try await withSyncthing(source) { a in
        for (run, receiver) in receivers.enumerated() { try await a.addDevice(receiver.deviceID, name: "receiver-\(run + 1)", addresses: [receiver.address]) }
        for (run, bench) in kaitens.enumerated() { try await a.addDevice(bench.me, name: "kaiten-\(run + 1)") }
        for (run, bench) in services.enumerated() { try await a.addDevice(bench.me, name: "kaiten-run-\(run + 1)") }
        try await a.shareScanned(
            folderID, path: data, devices: receivers.map(\.deviceID) + kaitens.map(\.me) + services.map(\.me), files: expectedFiles)
        let top = try FileManager.default.contentsOfDirectory(atPath: data).filter { !$0.hasPrefix(".st") }
        guard let sourcePID = pidOf(home: a.home) else { throw HarnessError("no source pid") }
        for run in 1...runs {
            let bench = kaitens[run - 1]
            let kaitenData = dir.file("kaiten-\(run)-data")
            try bench.run(["peer", "add", a.deviceID.description, "--name", "source", "--address", a.address])
            try bench.run(["folder", "add", folderID, "--path", kaitenData, "--share", a.deviceID.description])
            try bench.run(["index", "sync"])
            try bench.run(["select", folderID] + top)

            // Kaiten: everything from connecting to the last rename, in its own process.
            settleFileSystem()
            waitUntilQuiet(pid: sourcePID)
            freePageCache()
            // KAITEN_BENCH_PERF="ARGS" runs the apply under `perf ARGS` ("record -g -o FILE",
            // "record -e page-faults -g -o FILE", "stat -e page-faults"; RUN becomes the run's
            // number), started with no signal blocked (perf would inherit the bench's blocked
            // SIGCHLD and never end). Otherwise through `kaiten-bench timed`, whose only child it
            // is: its peak RSS is then its own, not the largest of every process waited for.
            let arguments = [KaitenCLI.executable, "apply", "--yes", "--json", "--home", bench.home]
            var kaitenRun: Run
            let sourceBefore = ProcStat.cpuSeconds(pid: sourcePID)
            if let perfArguments = ProcessInfo.processInfo.environment["KAITEN_BENCH_PERF"] {
                let before = childrenUsage()
                let start = now()
                let perf = perfCommand(
                    perfArguments.replacingOccurrences(of: "RUN", with: "\(run)").split(separator: " ").map(String.init) + arguments)
                let applied = try ProcessRunner.run(perf.executable, perf.arguments)
                guard applied.status == 0 else { throw HarnessError("kaiten apply failed: \(applied.stderr)") }
                let after = childrenUsage()
                kaitenRun = Run(seconds: now() - start, cpu: after.cpu - before.cpu, rss: after.maxRSSMiB)
            } else {
                let timed = try ProcessRunner.run(CommandLine.arguments[0], ["timed"] + arguments)
                let f = timed.stdout.split(separator: " ").compactMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
                guard timed.status == 0, f.count == 3 else { throw HarnessError("kaiten apply failed: \(timed.stderr)") }
                kaitenRun = Run(seconds: f[0], cpu: f[1], rss: f[2])
            }
            kaitenRun.sourceCPU = ProcStat.cpuSeconds(pid: sourcePID) - sourceBefore
            let kaitenSeconds = kaitenRun.seconds
            let kaitenFiles = (try? FileManager.default.subpathsOfDirectory(atPath: kaitenData).filter { !$0.hasPrefix(".st") }.count) ?? 0
            guard kaitenFiles >= expectedFiles else { throw HarnessError("kaiten apply left \(kaitenFiles) entries, not \(expectedFiles)") }
            ours.append(kaitenRun)

            let asked = try await applyBesideService(
                services[run - 1], source: a, sourcePID: sourcePID, folderID: folderID, top: top, data: dir.file("kaiten-run-\(run)-data"),
                expectedFiles: expectedFiles)
            beside.append(Run(seconds: asked.seconds, cpu: asked.cpu, rss: asked.rss, sourceCPU: asked.sourceCPU))

            // A fresh syncthing receiving the same folder from the same peer.
            let sourceBeforeTheirs = ProcStat.cpuSeconds(pid: sourcePID)
            let pulled = try await withSyncthing(receivers[run - 1]) { b in
                waitUntilQuiet(pid: sourcePID)
                return try await syncthingPull(source: a, receiver: b, folderID: folderID, folderPath: dir.file("receiver-\(run)-data")) { s in
                    (s["localFiles"] as? Int ?? 0) == expectedFiles && (s["needFiles"] as? Int ?? 1) == 0 && s["state"] as? String == "idle"
                }
            }
            theirs.append(
                Run(seconds: pulled.seconds, cpu: pulled.cpu, rss: pulled.rss, sourceCPU: ProcStat.cpuSeconds(pid: sourcePID) - sourceBeforeTheirs))
            log(
                String(
                    format: "run %d: kaiten %.2f s, %.2f CPU-s, %.1f MiB (source %.2f CPU-s); beside kaiten run %.2f s, %.2f CPU-s (source %.2f CPU-s); "
                        + "syncthing %.2f s, %.2f CPU-s, %.1f MiB (source %.2f CPU-s): %.2f×, beside kaiten run %.2f×",
                    run, kaitenSeconds, ours.last!.cpu, ours.last!.rss, ours.last!.sourceCPU, beside.last!.seconds, beside.last!.cpu,
                    beside.last!.sourceCPU, pulled.seconds, pulled.cpu, pulled.rss, theirs.last!.sourceCPU, pulled.seconds / kaitenSeconds,
                    pulled.seconds / beside.last!.seconds))
        }
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    func row(_ name: String, _ runs: [Run]) -> String {
        let seconds = median(runs.map(\.seconds))
        return String(
            format: "%@ %6.2f s (%.2f–%.2f)  %7.1f MB/s  %8.0f files/s  %5.2f CPU-s (%.2f–%.2f)  %6.1f MiB peak RSS  source %5.2f CPU-s",
            name.padding(toLength: 20, withPad: " ", startingAt: 0) as NSString, seconds, runs.map(\.seconds).min()!,
            runs.map(\.seconds).max()!, totalBytes / seconds / 1e6, Double(expectedFiles) / seconds, median(runs.map(\.cpu)),
            runs.map(\.cpu).min()!, runs.map(\.cpu).max()!, median(runs.map(\.rss)), median(runs.map(\.sourceCPU)))
    }
    let ratios = zip(ours, theirs).map { $1.seconds / $0.seconds }
    print("")
    print("== pull of \(label) (\(String(format: "%.0f", totalBytes / 1_048_576)) MiB) from one syncthing peer, median of \(runs) ==")
    print(row("kaiten apply:", ours) + (expectedFiles == 4 ? " (goal for 1 GiB as 4 files: ≤ 64)" : ""))
    print(row("beside kaiten run:", beside) + " (the service's CPU and peak RSS, with the apply command's CPU)")
    print(row("syncthing receiver:", theirs))
    // Issue 43: against syncthing 2.x the receiver's CPU ≤ 0.5× (issue 11's 0.7× against 1.19.2);
    // small files ≥ 3× syncthing's files/s.
    print(
        String(
            format: "ratio kaiten/syncthing: throughput %.2f× (runs: %@), CPU %.2f×   goal: throughput ≥ %@, CPU ≤ %@",
            median(theirs.map(\.seconds)) / median(ours.map(\.seconds)), ratios.map { String(format: "%.2f", $0) }.joined(separator: ", "),
            median(ours.map(\.cpu)) / max(median(theirs.map(\.cpu)), 0.001), expectedFiles == 4 ? "1.5×" : "3×",
            SyncthingInstance.majorVersion >= 2 ? "0.5× (syncthing 2.x)" : "0.7×"))
    let besideRatios = zip(beside, theirs).map { $1.seconds / $0.seconds }
    print(
        String(
            format: "ratio beside kaiten run/syncthing: throughput %.2f× (runs: %@), CPU %.2f×", median(theirs.map(\.seconds)) / median(beside.map(\.seconds)),
            besideRatios.map { String(format: "%.2f", $0) }.joined(separator: ", "), median(beside.map(\.cpu)) / max(median(theirs.map(\.cpu)), 0.001)))
    print("(kaiten apply: its own process, from connecting (syncthing 2.x sends its ClusterConfig a second after a connection opens) to the peer's hang-up after the last announcement; "
        + "beside kaiten run: `kaiten apply` asking a running service, whose connection is open, until the last rename; syncthing: from adding the folder on an open connection until idle. "
        + "Each verifies every block and flushes each file to disk before its rename (Kaiten's small files share a syncfs).)")
}

/// `kaiten apply --yes` asking a running `kaiten run --apply none` (connected to `source`,
/// the selection written and its round over): time from the command's start to its end, the
/// service's CPU plus the command's, the service's peak RSS.
func applyBesideService(
    _ bench: BenchKaiten, source a: SyncthingInstance, sourcePID: Int32, folderID: String, top: [String], data: String, expectedFiles: Int
) async throws -> (seconds: Double, cpu: Double, rss: Double, sourceCPU: Double) {
    try bench.run(["peer", "add", a.deviceID.description, "--name", "source", "--address", a.address])
    try bench.run(["folder", "add", folderID, "--path", data, "--share", a.deviceID.description])
    try bench.run(["index", "sync"])
    let arguments = ["run", "--apply", "none", "--home", bench.home]
    // KAITEN_BENCH_SERVICE_PERF="ARGS": the service runs as `perf ARGS kaiten run …` (perf
    // attached with -p to this many-threaded process spun on after its end); its figures are
    // then perf's.
    let service: Process
    if let perf = ProcessInfo.processInfo.environment["KAITEN_BENCH_SERVICE_PERF"] {
        service = Process()
        service.executableURL = URL(fileURLWithPath: "/usr/bin/perf")
        service.arguments = perf.split(separator: " ").map(String.init) + ["--", KaitenCLI.executable] + arguments
        service.standardError = FileHandle.nullDevice
        service.standardOutput = FileHandle.nullDevice
        try service.run()
    } else {
        service = try KaitenCLI.start(arguments, logPath: bench.home + "/run.log")
    }
    defer {
        // Under perf, the service is perf's child: it is the one to stop (perf then ends).
        let pid = service.processIdentifier
        let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
        for child in children.split(separator: " ").compactMap({ Int32($0) }) { kill(child, SIGINT) }
        kill(pid, SIGINT)
        service.waitUntilExit()
    }
    func record() -> [String: Any]? {
        guard let bytes = FileManager.default.contents(atPath: bench.home + "/state/service.json") else { return nil }
        return try? JSONSerialization.jsonObject(with: bytes) as? [String: Any]
    }
    func connected(_ record: [String: Any]) -> Bool {
        ((record["peers"] as? [[String: Any]]) ?? []).contains { $0["connected"] as? Bool == true }
    }
    try await a.waitUntil("kaiten run connected", timeout: 600) {
        guard let r = record(), r["last_round"] is [String: Any] else { return false }
        return connected(r)
    }
    try bench.run(["select", folderID] + top)
    // The round the selection starts plans the pulls and leaves them for review (--apply none).
    try await a.waitUntil("kaiten run's round planned the selection", timeout: 600) {
        guard let r = record(), let round = r["last_round"] as? [String: Any] else { return false }
        return (round["pending"] as? Int ?? 0) >= expectedFiles && connected(r)
    }
    settleFileSystem()
    waitUntilQuiet(pid: service.processIdentifier)
    waitUntilQuiet(pid: sourcePID)
    freePageCache()
    let serviceBefore = ProcStat.cpuSeconds(pid: service.processIdentifier)
    let sourceBefore = ProcStat.cpuSeconds(pid: sourcePID)
    let before = childrenUsage()
    let start = now()
    let applied = try ProcessRunner.run(KaitenCLI.executable, ["apply", "--yes", "--json", "--home", bench.home])
    let seconds = now() - start
    guard applied.status == 0 else {
        let said = (try? String(contentsOfFile: bench.home + "/run.log", encoding: .utf8)) ?? ""
        throw HarnessError(
            "kaiten apply beside kaiten run exited \(applied.status): \(applied.stderr)\n\(applied.stdout.suffix(2000))\nkaiten run said:\n\(said.suffix(3000))")
    }
    let cpu = childrenUsage().cpu - before.cpu + ProcStat.cpuSeconds(pid: service.processIdentifier) - serviceBefore
    let sourceCPU = ProcStat.cpuSeconds(pid: sourcePID) - sourceBefore
    let held = (try? FileManager.default.subpathsOfDirectory(atPath: data).filter { !$0.hasPrefix(".st") }.count) ?? 0
    guard held >= expectedFiles else { throw HarnessError("kaiten apply beside kaiten run left \(held) entries, not \(expectedFiles)") }
    return (seconds, cpu, ProcStat.peakRSS(pid: service.processIdentifier), sourceCPU)
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
    settleFileSystem()
    freePageCache()
    let cpu0 = ProcStat.cpuSeconds(pid: pid)
    let start = now()
    try await b.addFolder(id: folderID, path: folderPath, type: "receiveonly", devices: [a.deviceID])
    try await b.waitUntil("receiver done", timeout: 1800) {
        done(try await b.get("/rest/db/status?folder=\(folderID)") as? [String: Any] ?? [:])
    }
    return (now() - start, ProcStat.cpuSeconds(pid: pid) - cpu0, ProcStat.peakRSS(pid: pid))
}

/// Waits (at most 30 s) until `pid` has used less than 1 % of a core over half a second: the
/// source finishing what its scan started (2.x writes its database for a while after) took
/// CPU from whichever receiver ran first, the same side every time: Kaiten's first pull of
/// 5,000 files cost 2.0 CPU-s against 1.2–1.3 for the next two.
func waitUntilQuiet(pid: Int32) {
    let deadline = now() + 30
    var before = ProcStat.cpuSeconds(pid: pid)
    while now() < deadline {
        Thread.sleep(forTimeInterval: 0.5)
        let after = ProcStat.cpuSeconds(pid: pid)
        if after - before < 0.005 { return }
        before = after
    }
    log("the source (pid \(pid)) did not go quiet within 30 s")
}

/// Empties the page cache (as root; otherwise says once that it cannot), so that each receiver
/// writes into memory the system has used before. On a virtual machine the first touch of
/// memory the guest has not used for a while is slow (1 GiB written by `dd`: 1.05 s of system
/// time into fresh memory, 0.32 s into freed pages), and which side met fresh memory depended
/// on what the runs before had left cached: syncthing's CPU for the same pull went from 4.8 to
/// 9.6 CPU-s across the runs of one bench.
func freePageCache() {
    guard geteuid() == 0 else {
        if !freePageCacheRefusalSaid.exchange(true, ordering: .relaxed) {
            log("not root: the page cache is not emptied before each pull (CPU figures then depend on which side meets fresh memory)")
        }
        return
    }
    let fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    defer { close(fd) }
    _ = write(fd, "1", 1)
}

private let freePageCacheRefusalSaid = Atomic<Bool>(false)
