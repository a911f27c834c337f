import Foundation
import KaitenConfig
import KaitenFiles
import KaitenIndex
import KaitenProtocol
import KaitenSync
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// What one size of the scale bench measured.
struct ScaleRow {
    var paths = 0
    var intake = (seconds: 0.0, cpu: 0.0, rssMiB: 0.0)
    var bytesPerPath = 0.0
    var plan = (seconds: 0.0, rssMiB: 0.0)
    var ls = 0.0
    var search = 0.0
    var ready = 0.0
    /// Ready when started again on the same home (median of the runs): a service restart.
    var restart = 0.0
    var idleMiB = 0.0
}

/// The cost curves of issue 43: at each size, a full index taken in, `plan --offline` with 1 %
/// of the paths selected, `ls` of one directory, a search by name, `kaiten run`'s time to ready
/// and idle RSS, and the bytes on disk per path.
///
/// The index is a synthetic peer's (``SyntheticIndex``: photos/YEAR/MONTH/IMG_n.jpg, 100 a
/// directory), taken in by a child process the way `kaiten index sync` takes in a peer's full
/// index once its batches have arrived: batches of 1,000 appended and fsynced, this device's
/// local index brought in line (a "not held" entry per path), the snapshot written. No network
/// and no peer process: at ten million paths a real peer would be the subject of the
/// measurement, and BEP's own cost per batch is what `scripts/bench index` measures against
/// syncthing. Every other figure is the command a user runs, in a process of its own.
func runScaleBench(sizes: [Int], runs: Int, plot: String?) async throws {
    var rows: [ScaleRow] = []
    for paths in sizes {
        log("scale: \(paths) paths")
        rows.append(try await measureScale(files: paths, runs: runs))
        printScale(rows)
    }
    if let plot { try plotScale(rows, to: plot) }
}

func printScale(_ rows: [ScaleRow]) {
    print("")
    print("## scale: medians of the runs, release build")
    print("| global paths | intake (time, CPU, peak RSS) | bytes on disk per path | `plan --offline`, 1 % selected (time, peak RSS) | `ls` of one directory | search by name | `kaiten run` ready, first start after the intake | ready, restarted | `run` idle RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows {
        print(
            String(
                format: "| %d | %.2f s, %.2f CPU-s, %.0f MiB | %.0f | %.2f s, %.0f MiB | %.3f s | %.3f s | %.2f s | %.2f s | %.0f MiB |", r.paths, r.intake.seconds,
                r.intake.cpu, r.intake.rssMiB, r.bytesPerPath, r.plan.seconds, r.plan.rssMiB, r.ls, r.search, r.ready, r.restart, r.idleMiB))
    }
    // Linear or better: the cost per path does not grow with the size (up to noise, 1.25×).
    if rows.count > 1 {
        func growth(_ value: (ScaleRow) -> Double) -> String {
            let perPath = rows.map { value($0) / Double($0.paths) }
            let worst = zip(perPath, perPath.dropFirst()).map { $1 / max($0, 1e-12) }.max() ?? 1
            return String(format: "%.2f%@", worst, worst <= 1.25 ? "" : " (worse than linear)")
        }
        print("")
        print("largest growth of the cost per path from one size to the next (≤ 1 is linear or better):")
        print("intake time \(growth { $0.intake.seconds }), intake peak RSS \(growth { $0.intake.rssMiB }), plan time \(growth { $0.plan.seconds }), plan peak RSS \(growth { $0.plan.rssMiB })")
        print("bytes per path, ls, search, ready and idle RSS are per-size figures: see the table")
    }
    defer { fflush(nil) }  // a row at a time: the largest size takes long
    if let largest = rows.last, largest.paths >= 10_000_000 {
        print("")
        print(String(format: "at %d paths: plan --offline %.2f s (goal ≤ 10 s), %.0f MiB (goal ≤ 1024); run idle %.0f MiB (goal ≤ 256), ready %.2f s on the first start, %.2f s restarted (goal ≤ 5)", largest.paths, largest.plan.seconds, largest.plan.rssMiB, largest.idleMiB, largest.ready, largest.restart))
    }
}

func measureScale(files: Int, runs: Int) async throws -> ScaleRow {
    let dir = try TemporaryDirectory(prefix: "kaiten-scale")
    defer { dir.remove() }
    let home = dir.file("home")
    let created = try KaitenCLI.run(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:\(try FreePort.next())", "--gui-address", "127.0.0.1:0"])
    guard created.status == 0 else { throw HarnessError("kaiten init: \(created.stderr)") }
    try FileManager.default.createDirectory(atPath: dir.file("data/.stfolder"), withIntermediateDirectories: true)
    // A peer that is never there (port 1 refuses at once): every figure is Kaiten's own work.
    for args in [["peer", "add", scalePeer.description, "--name", "away", "--address", "tcp://127.0.0.1:1"], ["folder", "add", "f", "--path", dir.file("data"), "--share", scalePeer.description]] {
        let result = try KaitenCLI.run(args + ["--home", home])
        guard result.status == 0 else { throw HarnessError("kaiten \(args[0]): \(result.stderr)") }
    }
    var row = ScaleRow()
    row.paths = files + SyntheticIndex.directories(count: files).count

    let intake = try timedCommand([CommandLine.arguments[0], "scale-intake", home, String(files)], label: "intake")
    row.intake = (intake.seconds, intake.cpu, intake.rssMiB)
    let index = (home as NSString).appendingPathComponent("index")
    let written = ((try? FileManager.default.contentsOfDirectory(atPath: index)) ?? []).reduce(Int64(0)) { sum, name in
        sum + ((try? FileManager.default.attributesOfItem(atPath: index + "/" + name)[.size] as? Int64) ?? 0)
    }
    row.bytesPerPath = Double(written) / Double(row.paths)

    // 1 % of the files selected: the first files / 10,000 month directories of 100 files each.
    let opened = try KaitenHome.open(Home(path: home))
    var selection = "# 1 % of the paths\n"
    for k in 0..<max(1, files / 10_000) { selection += "photos/\(2000 + k / 50)/\(k % 50)\n" }
    try FileManager.default.createDirectory(atPath: opened.home.selectionsDirectory, withIntermediateDirectories: true)
    try selection.write(toFile: opened.home.selectionPath(folderID: "f"), atomically: true, encoding: .utf8)

    var plans: [(seconds: Double, cpu: Double, rssMiB: Double)] = []
    var listings: [Double] = []
    for _ in 0..<runs {
        plans.append(try timedCommand([KaitenCLI.executable, "plan", "--home", home, "--offline"], label: "plan"))
        listings.append(try timedCommand([KaitenCLI.executable, "ls", "--home", home, "f", "photos/2000/0"], label: "ls").seconds)
    }
    row.plan = (medianOf(plans.map(\.seconds)), medianOf(plans.map(\.rssMiB)))
    row.ls = medianOf(listings)

    // `kaiten run`: ready once its REST API answers the folder's status with the whole index.
    let first = try ReadyRun(home: home, files: files)
    defer { first.stop() }
    row.ready = first.ready
    let (base, key, run) = (first.base, first.key, first.process)
    let name = (SyntheticIndex.path(of: files * 7 / 9) as NSString).lastPathComponent
    var searches: [Double] = []
    for _ in 0..<runs {
        let answer = try restGet(base + "/rest/kaiten/search?folder=f&q=" + name, key: key)
        guard ((answer.body as? [String: Any])?["total"] as? Int ?? 0) >= 1 else { throw HarnessError("search for \(name): \(answer.body)") }
        searches.append(answer.seconds)
    }
    row.search = medianOf(searches)
    // Idle: what it holds 10 s after the searches, nothing asked of it meanwhile.
    try await Task.sleep(for: .seconds(10))
    row.idleMiB = ProcStat.rss(pid: run.processIdentifier)
    first.stop()
    // Restarted on the same home, as a service restart is: nothing announced anew.
    var restarts: [Double] = []
    for _ in 0..<runs {
        let again = try ReadyRun(home: home, files: files)
        again.stop()
        restarts.append(again.ready)
    }
    row.restart = medianOf(restarts)
    return row
}

/// `kaiten run --apply none` on `home`, started and waited for until its REST API answers the
/// folder's status with the whole index (`files` files): `ready` is that wait, from the start.
final class ReadyRun {
    let process = Process()
    private(set) var base = ""
    private(set) var key = ""
    private(set) var ready = 0.0

    init(home: String, files: Int) throws {
        process.executableURL = URL(fileURLWithPath: KaitenCLI.executable)
        process.arguments = ["run", "--home", home, "--apply", "none"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try? FileManager.default.removeItem(atPath: home + "/state/service.json")
        let started = now()
        try process.runAlone()
        while ready == 0 && now() < started + 300 {
            if base.isEmpty {
                let record = FileManager.default.contents(atPath: home + "/state/service.json").flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
                base = record?["rest_url"] as? String ?? ""
                let config = (try? String(contentsOfFile: home + "/config.xml", encoding: .utf8)) ?? ""
                key = config.firstMatch(of: /<apikey>([^<]+)<\/apikey>/).map { String($0.1) } ?? ""
            }
            if !base.isEmpty, let status = try? restGet(base + "/rest/db/status?folder=f", key: key).body as? [String: Any],
                (status["globalFiles"] as? Int ?? 0) >= files
            {
                ready = now() - started
                break
            }
            usleep(20_000)
        }
        guard ready > 0 else {
            stop()
            throw HarnessError("kaiten run was not ready within 300 s")
        }
    }

    /// SIGTERM, and waits for it to exit (once).
    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
    }
}

let scalePeer = try! DeviceID(bytes: Array(repeating: 0x5A, count: 32))

/// A GET of a Kaiten REST API with its key: curl's time for the request and the decoded JSON.
func restGet(_ url: String, key: String) throws -> (seconds: Double, body: Any) {
    let result = try ProcessRunner.run("/usr/bin/curl", ["-sS", "-m", "120", "-H", "X-API-Key: \(key)", "-w", "\n%{time_total}", url])
    var lines = result.stdout.split(separator: "\n")
    let seconds = Double(lines.popLast() ?? "") ?? -1
    guard result.status == 0 else { throw HarnessError("GET \(url): \(result.stderr)") }
    return (seconds, try JSONSerialization.jsonObject(with: Data(lines.joined(separator: "\n").utf8)))
}

/// A command in a process of its own through `timed`: wall time, CPU and peak RSS.
func timedCommand(_ command: [String], label: String) throws -> (seconds: Double, cpu: Double, rssMiB: Double) {
    let timed = try ProcessRunner.run(CommandLine.arguments[0], ["timed"] + command)
    guard timed.status == 0 else { throw HarnessError("\(label) failed: \(timed.stderr)") }
    let fields = timed.stdout.split(separator: " ").compactMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    return (fields[0], fields[1], fields[2])
}

/// `scale-intake HOME FILES`: a synthetic peer's full index of FILES files (and their
/// directories) taken in as `kaiten index sync` takes one in: each batch into the log, which
/// gets its snapshots as it grows, then this device's index refreshed.
func runScaleIntake(homePath: String, files: Int) throws {
    let home = try KaitenHome.open(Home(path: homePath))
    let log = try PeerGenerations.openLog(home: home, folder: "f", readOnly: false)
    // As `kaiten index sync` does before a peer's index comes in (IndexSync.exchange).
    MappedCode.unmapIdlePages()
    var batch: [BEPFileInfo] = []
    batch.reserveCapacity(1000)
    var first = true
    let warn: (String) -> Void = { print("warning: \($0)") }
    func flush() throws {
        try log.apply(device: scalePeer, indexID: 7, files: batch, isFullIndex: first)
        log.maintain(warn: warn)
        first = false
        batch.removeAll(keepingCapacity: true)
    }
    // Each directory right before its first file, as a peer's index lists a scanned tree.
    let directories = SyntheticIndex.directories(count: files)
    var nextDirectory = 0
    for n in 0..<files {
        let parent = (SyntheticIndex.path(of: n) as NSString).deletingLastPathComponent
        while nextDirectory < directories.count && parent.utf8.starts(with: directories[nextDirectory].utf8) {
            batch.append(SyntheticIndex.directory(directories[nextDirectory], sequence: files + nextDirectory + 1))
            nextDirectory += 1
        }
        batch.append(SyntheticIndex.file(n))
        if batch.count >= 1000 { try flush() }
    }
    if !batch.isEmpty || first { try flush() }
    log.maintain(eager: true, warn: warn)
    let announcer = try LocalAnnouncer(home: home, folders: ["f"], warn: warn)
    try announcer.refresh(logs: ["f": log], warn: warn)
    announcer.close(maintaining: warn)
    log.maintain(warn: warn)
    log.close()
}

/// The curves as a log-log PNG (gnuplot): seconds on the left, MiB and bytes per path on the right.
func plotScale(_ rows: [ScaleRow], to path: String) throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-scaleplot")
    defer { dir.remove() }
    let data = dir.file("scale.dat")
    var text = "# paths intake_s plan_s ls_s search_s ready_s intake_mib plan_mib idle_mib bytes_per_path\n"
    for r in rows {
        text += "\(r.paths) \(r.intake.seconds) \(r.plan.seconds) \(max(r.ls, 1e-4)) \(max(r.search, 1e-4)) \(r.ready) \(r.intake.rssMiB) \(r.plan.rssMiB) \(r.idleMiB) \(r.bytesPerPath)\n"
    }
    try text.write(toFile: data, atomically: true, encoding: .utf8)
    let script = """
        set terminal pngcairo size 1400,560 font ",11"
        set output '\(path)'
        set multiplot layout 1,2 title "Kaiten's costs by the size of the global index (scripts/bench scale)"
        set logscale xy
        set grid
        set key left top
        set xlabel 'global paths'
        set ylabel 'seconds'
        plot '\(data)' using 1:2 with linespoints title 'full index intake', \\
             '' using 1:3 with linespoints title 'plan --offline (1 % selected)', \\
             '' using 1:4 with linespoints title 'ls of one directory', \\
             '' using 1:5 with linespoints title 'search by name (kaiten run)', \\
             '' using 1:6 with linespoints title 'kaiten run: time to ready', \\
             '' using 1:($1/1e6) with lines dashtype 2 lc rgb 'gray' title 'linear (1 µs a path)'
        set ylabel 'MiB (bytes for the last curve)'
        plot '' using 1:7 with linespoints title 'intake peak RSS', \\
             '' using 1:8 with linespoints title 'plan --offline peak RSS', \\
             '' using 1:9 with linespoints title 'kaiten run idle RSS', \\
             '' using 1:10 with linespoints title 'bytes on disk per path'
        unset multiplot
        """
    let scriptPath = dir.file("scale.gp")
    try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
    let result = try ProcessRunner.run("/usr/bin/gnuplot", [scriptPath])
    guard result.status == 0 else { throw HarnessError("gnuplot: \(result.stderr)") }
    print("plot: \(path)")
}
