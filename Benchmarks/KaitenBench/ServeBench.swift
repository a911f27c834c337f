import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenStream
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Kaiten as a source (issue 11): a fresh syncthing pulling a folder from `kaiten serve`, next to
/// a fresh syncthing pulling the same folder from a syncthing that holds it, in the same run;
/// `runs` times each, reported as medians with the spread. The sender's CPU is what is compared.
func runServeBench(mib: Int, files: Int, runs: Int) async throws {
    if mib > 0 {
        try await serveComparison(label: "\(mib) MiB as 4 random files", expectedFiles: 4, runs: runs) { data in
            for i in 0..<4 { try TestFiles.random("\(data)/big\(i).bin", size: (mib / 4) << 20) }
        }
    }
    if files > 0 {
        try await serveComparison(label: "\(files) files of 4 KiB in \(max(1, files / 100)) directories", expectedFiles: files, runs: runs) { data in
            try makeFourKiBFiles(data, files: files, directories: max(1, files / 100))
        }
    }
}

private struct SenderRun {
    var seconds: Double
    var senderCPU: Double
}

private func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

func serveComparison(label: String, expectedFiles: Int, runs: Int, make: (String) throws -> Void) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-servebench")
    defer { dir.remove() }
    log("work dir \(dir.path): \(label)")
    let data = dir.file("data")
    try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
    try make(data)
    let totalBytes = Double(directorySize(data))
    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let kaitenData = dir.file("kaiten-data")
    let folderID = "bench"
    let bench = try BenchKaiten(home: dir.file("kaiten"))
    let me = bench.me
    func kaiten(_ args: [String]) throws { try bench.run(args) }
    let done: ([String: Any]) -> Bool = { s in
        (s["localFiles"] as? Int ?? 0) == expectedFiles && (s["needFiles"] as? Int ?? 1) == 0 && s["state"] as? String == "idle"
    }

    var ours: [SenderRun] = []
    var theirs: [SenderRun] = []
    try await withSyncthing(source) { a in
        try await a.addDevice(me, name: "kaiten")
        try await a.shareScanned(folderID, path: data, devices: [me], files: expectedFiles)
        // Kaiten takes the whole folder first (not measured).
        try kaiten(["peer", "add", a.deviceID.description, "--name", "source", "--address", a.address])
        try kaiten(["folder", "add", folderID, "--path", kaitenData, "--share", a.deviceID.description])
        try kaiten(["index", "sync"])
        let top = try FileManager.default.contentsOfDirectory(atPath: data).filter { !$0.hasPrefix(".st") }
        try kaiten(["select", folderID] + top)
        try kaiten(["apply", "--yes"])

        for run in 1...runs {
            // The source is stopped while kaiten serves: serve then dials nobody else, and the
            // receiver can get the folder from kaiten alone.
            a.stop()
            // A fresh syncthing pulling from kaiten serve alone.
            let fromKaiten = try SyncthingInstance.generate(in: dir.path, name: "from-kaiten-\(run)")
            try await withSyncthing(fromKaiten) { r in
                // As on the syncthing side: the receiver is connected to the sender first, then
                // the folder is added and timed from there (the receiver's new ClusterConfig
                // shares it; the sender answers with its index, then serves the pulls).
                try await r.addDevice(me, name: "kaiten")
                try kaiten(["peer", "add", r.deviceID.description, "--name", "r\(run)", "--address", r.address])
                try kaiten(["folder", "share", folderID, "r\(run)"])
                let (server, _) = try bench.startServe()
                defer { bench.stop(server) }
                try await r.waitUntil("kaiten serve connected", timeout: 60) {
                    let c = try await r.get("/rest/system/connections") as? [String: Any]
                    let conns = c?["connections"] as? [String: Any]
                    return (conns?[me.description] as? [String: Any])?["connected"] as? Bool == true
                }
                settleFileSystem()
                let cpu0 = ProcStat.cpuSeconds(pid: server.processIdentifier)
                let start = now()
                try await r.addFolder(id: folderID, path: dir.file("from-kaiten-\(run)-data"), type: "receiveonly", devices: [me])
                // KAITEN_BENCH_PERF="ARGS" runs `perf ARGS -p PID` on the serving process while it
                // serves, e.g. "record -F 499 -g -o /tmp/serve.perf" or "stat -e page-faults"
                // (its report on stderr); RUN in ARGS becomes the run's number.
                let profiler = try ProcessInfo.processInfo.environment["KAITEN_BENCH_PERF"].map { arguments in
                    // "record -a …" profiles the whole machine (threads started after perf,
                    // dispatch's workers, included); `perf report --comm kaiten` picks serve.
                    let command = perfCommand(
                        arguments.replacingOccurrences(of: "RUN", with: "\(run)").split(separator: " ").map(String.init)
                            + (arguments.contains(" -a") ? [] : ["-p", "\(server.processIdentifier)"]))
                    let perf = Process()
                    perf.executableURL = URL(fileURLWithPath: command.executable)
                    perf.arguments = command.arguments
                    try perf.run()
                    return perf
                }
                try await r.waitUntil("receiver done from kaiten", timeout: 1800) {
                    done(try await r.get("/rest/db/status?folder=\(folderID)") as? [String: Any] ?? [:])
                }
                let seconds = now() - start
                let senderCPU = ProcStat.cpuSeconds(pid: server.processIdentifier) - cpu0
                if let profiler {
                    kill(profiler.processIdentifier, SIGINT)
                    profiler.waitUntilExit()
                }
                ours.append(SenderRun(seconds: seconds, senderCPU: senderCPU))
                try kaiten(["folder", "unshare", folderID, "r\(run)"])
                try kaiten(["peer", "rm", r.deviceID.description])
            }
            log(String(format: "run %d: kaiten serve %.2f s, %.2f CPU-s", run, ours.last!.seconds, ours.last!.senderCPU))
            try await a.start()
            guard let sourcePID = pidOf(home: a.home) else { throw HarnessError("no source pid") }
            try await a.waitUntil("source idle", timeout: 600) {
                let s = try await a.get("/rest/db/status?folder=\(folderID)") as? [String: Any]
                return s?["state"] as? String == "idle"
            }

            // A fresh syncthing pulling the same folder from the syncthing source.
            let fromSyncthing = try SyncthingInstance.generate(in: dir.path, name: "from-syncthing-\(run)")
            try await a.addDevice(fromSyncthing.deviceID, name: "r\(run)", addresses: [fromSyncthing.address])
            try await a.addFolder(id: folderID, path: data, type: "sendonly", devices: [me, fromSyncthing.deviceID])
            let cpu0 = ProcStat.cpuSeconds(pid: sourcePID)
            let pulled = try await withSyncthing(fromSyncthing) { b in
                try await syncthingPull(source: a, receiver: b, folderID: folderID, folderPath: dir.file("from-syncthing-\(run)-data"), until: done)
            }
            theirs.append(SenderRun(seconds: pulled.seconds, senderCPU: ProcStat.cpuSeconds(pid: sourcePID) - cpu0))
            log(String(format: "run %d: syncthing source %.2f s, %.2f CPU-s", run, theirs.last!.seconds, theirs.last!.senderCPU))
            // Each run's trees stay until the end: removing them would slow the next run's
            // receiver (see `settleFileSystem`).
        }
    }
    func row(_ name: String, _ runs: [SenderRun]) -> String {
        let seconds = runs.map(\.seconds)
        let cpu = runs.map(\.senderCPU)
        return String(
            format: "%@ %6.2f s (%.2f–%.2f)  %7.1f MB/s  %8.0f files/s  sender %5.2f CPU-s (%.2f–%.2f)",
            name.padding(toLength: 28, withPad: " ", startingAt: 0) as NSString, median(seconds), seconds.min()!, seconds.max()!,
            totalBytes / median(seconds) / 1e6, Double(expectedFiles) / median(seconds), median(cpu), cpu.min()!, cpu.max()!)
    }
    print("")
    let version = SyncthingInstance.versionTag
    print("== a syncthing \(version) receiver pulling \(label) (\(String(format: "%.0f", totalBytes / 1_048_576)) MiB), median of \(runs) ==")
    print(row("from kaiten serve:", ours))
    print(row("from syncthing \(version):", theirs))
    // Issue 11's goals: throughput ≥ 1.0× always; sender CPU ≤ 0.7× for the big files.
    print(
        String(
            format: "ratio kaiten/syncthing %@: throughput %.2f×, sender CPU %.2f×   goal: throughput ≥ 1.0×%@", version,
            median(theirs.map(\.seconds)) / median(ours.map(\.seconds)),
            median(ours.map(\.senderCPU)) / max(median(theirs.map(\.senderCPU)), 0.001), expectedFiles == 4 ? ", CPU ≤ 0.7×" : ""))
    // What each sender checks before sending a block decides much of its CPU.
    print(
        SyncthingInstance.majorVersion >= 2
            ? "(syncthing 2.x checks each block it sends against its SHA-256, as kaiten does)"
            : "(syncthing 1.x checks each block it sends against its Adler-32 weak hash; kaiten checks the SHA-256)")
    print("(both: from adding the folder on a receiver already connected to the sender, index exchange included; kaiten's")
    print(" source stopped meanwhile; sender CPU: the serving process only, over the same span)")
}
