import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenStream
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// On demand: time to first byte of a range in the middle of a remote file, and streaming the
/// whole file through `kaiten serve`, next to `kaiten get` and a syncthing-to-syncthing pull of
/// the same file from the same peer, in the same run.
func runStreamBench(mib: Int) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-streambench")
    defer { dir.remove() }
    log("work dir \(dir.path)")
    let data = dir.file("data")
    try TestFiles.random(data + "/movie.bin", size: mib << 20)
    let size = Int64(mib) << 20
    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let receiver = try SyncthingInstance.generate(in: dir.path, name: "receiver")
    let bench = try BenchKaiten(home: dir.file("kaiten"))
    let home = bench.home
    let me = bench.me
    func kaiten(_ args: [String]) throws -> ProcessResult { try bench.run(args) }
    let curl = ProcessRunner.which("curl") ?? "/usr/bin/curl"
    func curlTimes(_ url: String, range: String?) throws -> (ttfb: Double, total: Double) {
        var args = ["-s", "-o", "/dev/null", "-w", "%{time_starttransfer} %{time_total}"]
        if let range { args += ["-r", range] }
        let out = try ProcessRunner.run(curl, args + [url]).stdout.split(separator: " ").compactMap { Double($0) }
        return (out.first ?? 0, out.last ?? 0)
    }

    try await withSyncthing(source) { a in
        try await a.addDevice(receiver.deviceID, name: "receiver", addresses: [receiver.address])
        try await a.addDevice(me, name: "kaiten")
        try await a.addFolder(id: "bench", path: data, type: "sendonly", devices: [receiver.deviceID, me])
        try await a.waitUntil("source scanned", timeout: 600) {
            let s = try await a.get("/rest/db/status?folder=bench") as? [String: Any]
            return s?["state"] as? String == "idle" && (s?["localFiles"] as? Int) == 1
        }
        _ = try kaiten(["peer", "add", a.deviceID.description, "--address", a.address])
        _ = try kaiten(["folder", "add", "bench", "--path", dir.file("kaiten-data"), "--share", a.deviceID.description])
        _ = try kaiten(["index", "sync"])

        // kaiten get: connect, fetch every block verified, temp + fsync + rename.
        var start = now()
        let childrenBefore = childrenUsage()
        _ = try kaiten(["get", "bench", "movie.bin", "-o", dir.file("got.bin")])
        let getSeconds = now() - start
        // The largest child so far: the get, unless an earlier verb (small index work) was larger.
        let getPeakMiB = childrenUsage().maxRSSMiB
        if getPeakMiB <= childrenBefore.maxRSSMiB { log("kaiten get peaked below an earlier verb's \(childrenBefore.maxRSSMiB) MiB") }
        try? FileManager.default.removeItem(atPath: dir.file("got.bin"))

        // kaiten serve.
        let (server, _) = try bench.startServe()
        defer { bench.stop(server) }
        try await a.waitUntil("kaiten serve is up", timeout: 60) { ServerRecord.load(Home(path: home)) != nil }
        let url = try kaiten(["url", "bench", "movie.bin"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // Warm the connection with a tiny range at the start of the file.
        _ = try curlTimes(url, range: "0-0")
        // One block's round trip: single cold bytes; then cold 1 MiB ranges around the middle.
        // Medians of 7, each at an offset no earlier request touched.
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let oneByte = (ttfb: median(try (0..<7).map { i in try curlTimes(url, range: "\(size / 10 + Int64(i) * 20_000_000)-\(size / 10 + Int64(i) * 20_000_000)").ttfb }), total: 0.0)
        let range = (ttfb: median(try (0..<7).map { i in
            let middle = size / 2 + 12345 + Int64(i) * 20_000_000
            return try curlTimes(url, range: "\(middle)-\(middle + (1 << 20) - 1)").ttfb
        }), total: 0.0)
        start = now()
        let whole = try curlTimes(url, range: nil)
        let streamSeconds = now() - start
        let servePeakMiB = ProcStat.peakRSS(pid: server.processIdentifier)

        // syncthing pulling the same file from the same peer.
        let syncthingSeconds = try await withSyncthing(receiver) { b in
            try await syncthingPull(source: a, receiver: b, folderID: "bench", folderPath: dir.file("receiver-data")) { s in
                (s["localFiles"] as? Int) == 1 && (s["needFiles"] as? Int ?? 1) == 0 && s["state"] as? String == "idle"
            }.seconds
        }
        let mb = Double(size) / 1e6
        print("")
        print("== on demand: one remote file of \(mib) MiB ==")
        print(String(format: "time to first byte, 1 cold byte (one block round trip, median of 7): %.1f ms", oneByte.ttfb * 1000))
        print(String(format: "time to first byte, 1 MiB range in the middle (cold, median of 7):  %.1f ms = %.2f block round trips", range.ttfb * 1000, range.ttfb / max(oneByte.ttfb, 0.0001)))
        print(String(format: "stream the whole file through kaiten serve (curl): %6.2f s = %6.1f MB/s (ttfb %.1f ms), serve peak RSS %.1f MiB (goal ≤ 80)", whole.total, mb / whole.total, whole.ttfb * 1000, servePeakMiB))
        print(String(format: "kaiten get (to disk, fsync, rename):               %6.2f s = %6.1f MB/s, peak RSS %.1f MiB (goal ≤ 80)", getSeconds, mb / getSeconds, getPeakMiB))
        print(String(format: "syncthing → syncthing pull of the same file:       %6.2f s = %6.1f MB/s", syncthingSeconds, mb / syncthingSeconds))
        _ = streamSeconds
    }
}
