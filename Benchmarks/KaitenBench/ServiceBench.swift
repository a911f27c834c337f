import Foundation
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten run` next to a syncthing receiver (issue 12): both hold the same folder of `files`
/// small files, taken from the same syncthing source. Then, in the same run:
/// - idle: `runs` windows of `seconds` each, nothing changing: CPU seconds used in the window
///   and the largest RSS seen (sampled every second), for each process;
/// - latency: `changes` files changed one at a time on the source (written, then a scan of that
///   path asked of the source): the time until the new content is in place on each side.
/// Reported as medians with the spread. Both run as a user would: kaiten run with its defaults,
/// syncthing with its default watcher on and hourly rescans.
func runServiceBench(files: Int, seconds: Int, runs: Int, changes: Int) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-servicebench")
    defer { dir.remove() }
    log("work dir \(dir.path): \(files) files of 4 KiB")
    let data = dir.file("data")
    try makeSmallFiles(data, count: files)
    let folderID = "bench"
    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let receiver = try SyncthingInstance.generate(in: dir.path, name: "receiver")
    let bench = try BenchKaiten(home: dir.file("kaiten"))
    let kaitenData = dir.file("kaiten-data")
    let receiverData = dir.file("receiver-data")
    let done: ([String: Any]) -> Bool = { s in
        (s["localFiles"] as? Int ?? 0) == files && (s["needFiles"] as? Int ?? 1) == 0 && s["state"] as? String == "idle"
    }
    try await withSyncthing(source) { a in
        try await a.addDevice(bench.me, name: "kaiten")
        try await a.shareScanned(folderID, path: data, devices: [bench.me], files: files)
        log("source scanned")
        // Kaiten takes the whole folder (not measured).
        try bench.run(["peer", "add", a.deviceID.description, "--name", "source", "--address", a.address])
        try bench.run(["folder", "add", folderID, "--path", kaitenData, "--share", a.deviceID.description])
        try bench.run(["index", "sync"])
        let top = try FileManager.default.contentsOfDirectory(atPath: data).filter { !$0.hasPrefix(".st") }
        try bench.run(["select", folderID] + top)
        try bench.run(["apply", "--yes", "--send-timeout", "0"])
        log("kaiten holds the folder")
        try await withSyncthing(receiver) { b in
            try await a.addDevice(receiver.deviceID, name: "receiver", addresses: [receiver.address])
            try await a.addFolder(id: folderID, path: data, type: "sendonly", devices: [bench.me, receiver.deviceID])
            try await b.addDevice(a.deviceID, name: "source", addresses: [a.address])
            try await b.addFolder(
                id: folderID, path: receiverData, type: "receiveonly", devices: [a.deviceID],
                extra: ["fsWatcherEnabled": true, "rescanIntervalS": 3600])
            try await b.waitUntil("the syncthing receiver holds the folder", timeout: 3600) {
                done(try await b.get("/rest/db/status?folder=\(folderID)") as? [String: Any] ?? [:])
            }
            log("the syncthing receiver holds the folder")
            guard let receiverPID = pidOf(home: b.home) else { throw HarnessError("no receiver pid") }

            let logPath = dir.file("run.log")
            let service = try KaitenCLI.start(["run", "--home", bench.home], logPath: logPath)
            defer {
                kill(service.processIdentifier, SIGTERM)
                service.waitUntilExit()
            }
            // Started when its first round is over and the peer connected.
            let statusPath = bench.home + "/state/service.json"
            try await a.waitUntil("kaiten run settled", timeout: 600) {
                guard let data = FileManager.default.contents(atPath: statusPath),
                    let record = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                    let round = record["last_round"] as? [String: Any]
                else { return false }
                return round["pending"] as? Int == 0 && ((record["peers"] as? [[String: Any]]) ?? []).contains { $0["connected"] as? Bool == true }
            }
            try await Task.sleep(for: .seconds(5))

            var ours: [(cpu: Double, rss: Double)] = []
            var theirs: [(cpu: Double, rss: Double)] = []
            for run in 1...runs {
                let k0 = ProcStat.cpuSeconds(pid: service.processIdentifier)
                let s0 = ProcStat.cpuSeconds(pid: receiverPID)
                var kRSS = 0.0
                var sRSS = 0.0
                for _ in 0..<seconds {
                    try await Task.sleep(for: .seconds(1))
                    kRSS = max(kRSS, ProcStat.rss(pid: service.processIdentifier))
                    sRSS = max(sRSS, ProcStat.rss(pid: receiverPID))
                }
                ours.append((ProcStat.cpuSeconds(pid: service.processIdentifier) - k0, kRSS))
                theirs.append((ProcStat.cpuSeconds(pid: receiverPID) - s0, sRSS))
                log(String(format: "idle %d: kaiten run %.2f CPU-s, %.0f MiB; syncthing %.2f CPU-s, %.0f MiB", run, ours.last!.cpu, kRSS, theirs.last!.cpu, sRSS))
            }
            // Where the service's memory is: heap or mapped files, and the largest mappings.
            log("kaiten run memory: \(ProcStat.memoryBreakdown(pid: service.processIdentifier))")

            var kaitenLatency: [Double] = []
            var syncthingLatency: [Double] = []
            for i in 0..<changes {
                // makeSmallFiles puts files/1000 files in each directory d0, d1, …
                let perDirectory = max(1, files / 1000)
                let name = "d\(i)/f\(i * perDirectory).bin"
                let content = Data("change \(i) at \(now())\n".utf8)
                let start = now()
                try content.write(to: URL(fileURLWithPath: data + "/" + name))
                _ = try await a.post("/rest/db/scan?folder=\(folderID)&sub=\(name)")
                var kaitenAt: Double?
                var syncthingAt: Double?
                while kaitenAt == nil || syncthingAt == nil {
                    if kaitenAt == nil, FileManager.default.contents(atPath: kaitenData + "/" + name) == content { kaitenAt = now() - start }
                    if syncthingAt == nil, FileManager.default.contents(atPath: receiverData + "/" + name) == content { syncthingAt = now() - start }
                    if now() - start > 120 { throw HarnessError("change \(i) did not arrive within 120 s (kaiten \(kaitenAt != nil), syncthing \(syncthingAt != nil))") }
                    try await Task.sleep(for: .milliseconds(2))
                }
                kaitenLatency.append(kaitenAt!)
                syncthingLatency.append(syncthingAt!)
                log(String(format: "change %d: kaiten %.3f s, syncthing %.3f s", i, kaitenAt!, syncthingAt!))
                try await Task.sleep(for: .seconds(1))
            }

            func spread(_ values: [Double], _ format: String) -> String {
                String(format: "\(format) (\(format)–\(format))", medianOf(values), values.min()!, values.max()!)
            }
            print("")
            print("== idle, one folder of \(files) files, \(runs) windows of \(seconds) s (median, range) ==")
            print("kaiten run:  CPU \(spread(ours.map(\.cpu), "%.2f")) CPU-s   RSS \(spread(ours.map(\.rss), "%.0f")) MiB")
            print("syncthing:   CPU \(spread(theirs.map(\.cpu), "%.2f")) CPU-s   RSS \(spread(theirs.map(\.rss), "%.0f")) MiB")
            print(
                String(
                    format: "ratio kaiten/syncthing: CPU %.2f×, RSS %.2f×", medianOf(ours.map(\.cpu)) / max(medianOf(theirs.map(\.cpu)), 0.001),
                    medianOf(ours.map(\.rss)) / medianOf(theirs.map(\.rss))))
            print("== latency, a file changed on the source to the new version in place, \(changes) changes ==")
            print("kaiten run:  p50 \(spread(kaitenLatency, "%.3f")) s")
            print("syncthing:   p50 \(spread(syncthingLatency, "%.3f")) s")
            print(String(format: "ratio kaiten/syncthing: %.2f×", medianOf(kaitenLatency) / medianOf(syncthingLatency)))
            print("(both from the write on the source, which is then asked to scan that path; kaiten run with its defaults,")
            print(" syncthing receiveonly with its watcher on; the CPU of the window only, RSS the largest sample)")
        }
    }
}

func medianOf(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

extension ProcStat {
    /// RssAnon and RssFile of a process, and its five largest mappings by RSS.
    static func memoryBreakdown(pid: Int32) -> String {
        var parts: [String] = []
        if let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) {
            for line in status.split(separator: "\n") where line.hasPrefix("RssAnon:") || line.hasPrefix("RssFile:") {
                parts.append(line.split(separator: " ", omittingEmptySubsequences: true).prefix(2).joined(separator: " ") + " kB")
            }
        }
        // Read to the end: /proc files report a size of 0, and a read by size stops at a page.
        guard let handle = FileHandle(forReadingAtPath: "/proc/\(pid)/smaps") else { return parts.joined(separator: ", ") }
        let smaps = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        handle.closeFile()
        var mappings: [(String, Int)] = []
        var current = ""
        for line in smaps.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if let first = fields.first, first.contains("-"), !first.hasSuffix(":") {
                current = fields.count > 5 ? String(fields[5...].joined(separator: " ")) : "[anon]"
            } else if fields.first == "Rss:", fields.count > 1, let kb = Int(fields[1]) {
                mappings.append((current, kb))
            }
        }
        let top = mappings.sorted { $0.1 > $1.1 }.prefix(5).map { "\($0.0.isEmpty ? "[anon]" : $0.0) \($0.1) kB" }
        let anon = mappings.filter { $0.0 == "[anon]" || $0.0 == "[heap]" }
        let buckets = Dictionary(grouping: anon, by: { $0.1 < 1024 ? "<1 MiB" : $0.1 < 16384 ? "1-16 MiB" : "≥16 MiB" })
            .map { "\($0.key): \($0.value.count) mappings, \($0.value.reduce(0) { $0 + $1.1 }) kB" }.sorted()
        return (parts + top + buckets).joined(separator: ", ")
    }

    /// VmRSS of a process now, in MiB.
    static func rss(pid: Int32) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return (Double(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0) / 1024
        }
        return 0
    }
}
