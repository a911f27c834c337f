import Foundation
import KaitenMount
import KaitenProtocol
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten mount` next to `rclone mount --vfs-cache-mode full` of the same data served by
/// `rclone serve http` on 127.0.0.1, and next to `kaiten get`, in the same run: the first
/// sequential read of an M MiB file, a cached re-read (after `sync`: the first read's cache
/// writes are not timed with it) beside reading the local file, `find` and
/// `du` over an N-file tree, blocks fetched per random 4 KiB read, and the mount's peak RSS.
/// Each figure is the median of R runs, each run on a fresh mount with an empty cache.
func runMountBench(mib: Int, files: Int, runs: Int) async throws {
    guard let rclone = ProcessRunner.which("rclone") else { throw HarnessError("rclone is not installed (Debian: rclone)") }
    let dir = try TemporaryDirectory(prefix: "kaiten-mountbench")
    defer { dir.remove() }
    log("work dir \(dir.path)")
    let data = dir.file("data")
    try TestFiles.random(data + "/big.bin", size: mib << 20)
    for i in 0..<files {
        let directory = data + "/tree/d\(i / 100)"
        if i % 100 == 0 { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
        FileManager.default.createFile(atPath: directory + "/f\(i).txt", contents: Data("file \(i)\n".utf8))
    }
    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let bench = try BenchKaiten(home: dir.file("kaiten"))
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    func seconds(_ body: () throws -> Void) rethrows -> Double {
        let start = now()
        try body()
        return now() - start
    }
    func waitMounted(_ point: String, _ process: Process) throws {
        let deadline = now() + 120
        while now() < deadline {
            if FuseMount.isMounted(point), let listing = opendir(point) {
                closedir(listing)
                return
            }
            guard process.isRunning else { throw HarnessError("the mount at \(point) ended before it was made") }
            usleep(50_000)
        }
        throw HarnessError("no mount at \(point) within 120 s")
    }
    func start(_ executable: String, _ arguments: [String], log path: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        FileManager.default.createFile(atPath: path, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }
    func unmount(_ point: String, _ process: Process) {
        _ = try? ProcessRunner.run("/bin/fusermount3", ["-u", point])
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
    }
    func peakRSSMiB(_ pid: Int32) -> Double {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
        return (Double(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) / 1024
    }
    func catToNull(_ path: String) throws {
        let result = try ProcessRunner.run("/bin/sh", ["-c", "cat '\(path)' > /dev/null"])
        guard result.status == 0 else { throw HarnessError("cat \(path): \(result.stderr)") }
    }
    let mibps = { (seconds: Double) in Double(mib) / seconds }

    // rclone serves the same data over HTTP on loopback.
    let httpPort = try FreePort.next()
    let httpServer = try start(rclone, ["serve", "http", data, "--addr", "127.0.0.1:\(httpPort)", "--read-only"], log: dir.file("rclone-http.log"))
    defer {
        kill(httpServer.processIdentifier, SIGTERM)
        httpServer.waitUntilExit()
    }

    try await withSyncthing(source) { a in
        try await a.addDevice(bench.me, name: "kaiten")
        try await a.shareScanned("bench", path: data, devices: [bench.me], files: files + 1)
        try bench.run(["peer", "add", a.deviceID.description, "--address", a.address])
        try bench.run(["folder", "add", "bench", "--path", dir.file("kaiten-data"), "--share", a.deviceID.description])
        try bench.run(["index", "sync"])

        var kaitenFirst: [Double] = [], rcloneFirst: [Double] = [], getFirst: [Double] = []
        var kaitenCached: [Double] = [], kaitenWarm: [Double] = [], localRead: [Double] = [], rcloneCached: [Double] = []
        var kaitenFind: [Double] = [], rcloneFind: [Double] = [], kaitenDu: [Double] = [], rcloneDu: [Double] = []
        var blocksPerRead: [Double] = [], peakRSS: [Double] = []
        let point = dir.file("mnt")
        try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: true)
        for run in 1...runs {
            // kaiten get: the whole file through a fresh process.
            getFirst.append(try seconds { try bench.run(["get", "bench", "big.bin", "-o", dir.file("got.bin")]) })
            try? FileManager.default.removeItem(atPath: dir.file("got.bin"))

            // kaiten mount, empty cache.
            try? FileManager.default.removeItem(atPath: bench.home + "/cache")
            var mount = try start(
                KaitenCLI.executable, ["mount", "bench", point, "--home", bench.home, "--cache-budget", "\(2 * mib + 64)M"], log: dir.file("mount-\(run).log"))
            try waitMounted(point, mount)
            kaitenFind.append(try seconds { _ = try ProcessRunner.run("/bin/sh", ["-c", "find '\(point)/tree' -type f | wc -l"]) })
            kaitenDu.append(try seconds { _ = try ProcessRunner.run("/usr/bin/du", ["-s", point + "/tree"]) })
            kaitenFirst.append(try seconds { try catToNull(point + "/big.bin") })
            // The first read's cache files reach the disk before the re-read is timed (the
            // kernel's writeback of 1 GiB otherwise runs during it, on the same 2 cores), as
            // before the local read.
            sync()
            kaitenCached.append(try seconds { try catToNull(point + "/big.bin") })
            // Once more: the page cache's pages as warm as the local file's (read many times).
            kaitenWarm.append(try seconds { try catToNull(point + "/big.bin") })
            peakRSS.append(peakRSSMiB(mount.processIdentifier))
            unmount(point, mount)
            sync()
            localRead.append(try seconds { try catToNull(data + "/big.bin") })

            // 1,000 random 4 KiB reads in the uncached file: blocks the mount fetched per read.
            try? FileManager.default.removeItem(atPath: bench.home + "/cache")
            mount = try start(KaitenCLI.executable, ["mount", "bench", point, "--home", bench.home], log: dir.file("mount-random-\(run).log"))
            try waitMounted(point, mount)
            let fd = open(point + "/big.bin", O_RDONLY)
            guard fd >= 0 else { throw HarnessError("open big.bin on the mount: \(String(cString: strerror(errno)))") }
            var generator = SystemRandomNumberGenerator()
            var buffer = [UInt8](repeating: 0, count: 4096)
            let reads = 1000
            for _ in 0..<reads {
                let offset = Int.random(in: 0..<((mib << 20) - 4096), using: &generator)
                guard pread(fd, &buffer, 4096, off_t(offset)) == 4096 else { throw HarnessError("a 4 KiB read on the mount failed") }
            }
            close(fd)
            unmount(point, mount)
            let report = (try? String(contentsOfFile: dir.file("mount-random-\(run).log"), encoding: .utf8)) ?? ""
            let fetched = report.range(of: #"(\d+) block\(s\) fetched"#, options: .regularExpression).map { Double(report[$0].split(separator: " ")[0]) ?? -1 } ?? -1
            blocksPerRead.append(fetched / Double(reads))

            // rclone mount of the same data over HTTP, empty VFS cache.
            let cache = dir.file("rclone-cache-\(run)")
            let rcloneMount = try start(
                rclone,
                ["mount", ":http:", point, "--http-url", "http://127.0.0.1:\(httpPort)", "--vfs-cache-mode", "full", "--cache-dir", cache, "--read-only"],
                log: dir.file("rclone-mount-\(run).log"))
            try waitMounted(point, rcloneMount)
            rcloneFind.append(try seconds { _ = try ProcessRunner.run("/bin/sh", ["-c", "find '\(point)/tree' -type f | wc -l"]) })
            rcloneDu.append(try seconds { _ = try ProcessRunner.run("/usr/bin/du", ["-s", point + "/tree"]) })
            rcloneFirst.append(try seconds { try catToNull(point + "/big.bin") })
            sync()
            rcloneCached.append(try seconds { try catToNull(point + "/big.bin") })
            unmount(point, rcloneMount)
            try? FileManager.default.removeItem(atPath: cache)
            log(
                "run \(run): first read kaiten \(String(format: "%.2f", kaitenFirst.last!)) s, rclone \(String(format: "%.2f", rcloneFirst.last!)) s, get \(String(format: "%.2f", getFirst.last!)) s"
            )
        }
        let f = { (value: Double) in String(format: "%.2f", value) }
        print("## mount: \(mib) MiB file, \(files)-file tree, medians of \(runs) runs (syncthing \(SyncthingInstance.versionTag) as the peer)")
        print("| measure | kaiten mount | rclone mount (vfs full, serve http) | kaiten get / local | goal |")
        print("| --- | --- | --- | --- | --- |")
        print("| first sequential read | \(f(mibps(median(kaitenFirst)))) MiB/s | \(f(mibps(median(rcloneFirst)))) MiB/s | get \(f(mibps(median(getFirst)))) MiB/s | ≥ 1.0× rclone (\(f(median(rcloneFirst) / median(kaitenFirst)))×), ≥ 0.8× get (\(f(median(getFirst) / median(kaitenFirst)))×) |")
        print("| cached re-read | \(f(mibps(median(kaitenCached)))) MiB/s | \(f(mibps(median(rcloneCached)))) MiB/s | local file \(f(mibps(median(localRead)))) MiB/s | ≥ 0.9× local (\(f(median(localRead) / median(kaitenCached)))×) |")
        print("| re-read once more | \(f(mibps(median(kaitenWarm)))) MiB/s | | local file \(f(mibps(median(localRead)))) MiB/s | (\(f(median(localRead) / median(kaitenWarm)))×) |")
        print("| find -type f \\| wc -l | \(f(median(kaitenFind))) s | \(f(median(rcloneFind))) s | | ≤ 1 s and ≤ 0.3× rclone (\(f(median(kaitenFind) / median(rcloneFind)))×) |")
        print("| du -s | \(f(median(kaitenDu))) s | \(f(median(rcloneDu))) s | | ≤ 1 s and ≤ 0.3× rclone (\(f(median(kaitenDu) / median(rcloneDu)))×) |")
        print("| blocks fetched per random 4 KiB read | \(f(median(blocksPerRead))) | | | ≤ 1 |")
        print("| peak RSS of the mount while reading | \(f(median(peakRSS))) MiB | | | ≤ 80 MiB |")
    }
}
