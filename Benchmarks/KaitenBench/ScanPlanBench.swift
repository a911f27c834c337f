import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSelection
import KaitenTestSupport

// MARK: - Scan: big files against sha256sum/openssl, small files against syncthing

/// Runs a command and returns its wall time in seconds.
func timed(_ tool: String, _ arguments: [String]) throws -> (seconds: Double, output: String) {
    let start = now()
    let result = try ProcessRunner.run(tool, arguments)
    guard result.status == 0 else { throw HarnessError("\(tool) failed: \(result.stderr)") }
    return (now() - start, result.stdout)
}

func runScanBench(mib: Int, files: Int) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-scanbench")
    defer { dir.remove() }
    log("work dir \(dir.path)")

    // 1. Big files: the first scan should run at SHA-256's speed.
    let big = dir.file("big")
    try FileManager.default.createDirectory(atPath: big + "/.stfolder", withIntermediateDirectories: true)
    var paths: [String] = []
    for i in 0..<4 {
        let path = "\(big)/file\(i).bin"
        try TestFiles.random(path, size: (mib / 4) << 20)
        paths.append(path)
    }
    let bytes = Double(mib << 20)
    _ = try timed("/usr/bin/cat", paths)  // warm the page cache for everyone
    let sha = try timed("/usr/bin/sha256sum", paths)
    // `openssl speed` times itself with SIGALRM, which a child of this process inherits blocked;
    // `openssl dgst` over the same files is the same library's SHA-256, timed from outside.
    var openssl: (seconds: Double, output: String)?
    if let tool = ProcessRunner.which("openssl") { openssl = try timed(tool, ["dgst", "-sha256"] + paths) }
    var rows: [String] = []
    for concurrency in [1, ProcessInfo.processInfo.activeProcessorCount] {
        let child = try ProcessRunner.run(CommandLine.arguments[0], ["scan-child", big, dir.file("big.cache"), String(concurrency), "first"])
        guard child.status == 0 else { throw HarnessError("scan failed: \(child.stderr)") }
        try? FileManager.default.removeItem(atPath: dir.file("big.cache"))
        rows.append("kaiten first scan, \(concurrency) thread\(concurrency == 1 ? "" : "s"): \(child.stdout.trimmingCharacters(in: .whitespacesAndNewlines))")
    }
    print("")
    print("== first scan of \(mib) MiB in 4 files (warm page cache) ==")
    print(String(format: "sha256sum (1 thread):  %.2f s = %.0f MB/s", sha.seconds, bytes / sha.seconds / 1e6))
    if let openssl { print(String(format: "openssl dgst -sha256 (1 thread): %.2f s = %.0f MB/s", openssl.seconds, bytes / openssl.seconds / 1e6)) }
    for row in rows { print(row) }

    // 2. Small files: first scan and rescan against syncthing's scan of the same folder.
    let small = dir.file("small")
    try FileManager.default.createDirectory(atPath: small + "/.stfolder", withIntermediateDirectories: true)
    log("creating \(files) files of 4 KiB")
    try makeSmallFiles(small, count: files)
    _ = try ProcessRunner.run("/usr/bin/find", [small, "-type", "f", "-size", "-1"])  // warm the dentry cache
    let cache = dir.file("small.cache")
    let first = try ProcessRunner.run(CommandLine.arguments[0], ["scan-child", small, cache, "0", "first"])
    let again = try ProcessRunner.run(CommandLine.arguments[0], ["scan-child", small, cache, "0", "rescan"])
    guard first.status == 0, again.status == 0 else { throw HarnessError("scan failed: \(first.stderr)\(again.stderr)") }

    // syncthing scans the very same folder: from adding it until it is idle with every file.
    let st = try SyncthingInstance.generate(in: dir.path, name: "st")
    var syncthingSeconds = 0.0
    try await withSyncthing(st) { st in
        let start = now()
        try await st.addFolder(id: "small", path: small, devices: [])
        try await st.waitUntil("syncthing scanned \(files) files", timeout: 600) {
            let s = try await st.get("/rest/db/status?folder=small") as? [String: Any]
            return s?["state"] as? String == "idle" && (s?["localFiles"] as? Int) == files
        }
        syncthingSeconds = now() - start
    }
    print("")
    print("== scan of \(files) files of 4 KiB in \(max(1, files / max(1, files / 1000))) directories (warm page cache) ==")
    print("kaiten first scan: \(first.stdout.trimmingCharacters(in: .whitespacesAndNewlines))")
    print("kaiten rescan, nothing changed: \(again.stdout.trimmingCharacters(in: .whitespacesAndNewlines))")
    print(String(format: "syncthing first scan: %.2f s = %.0f files/s (folder added → idle, polled every 0.2 s)", syncthingSeconds, Double(files) / syncthingSeconds))
}

/// Scans a folder in this (child) process and prints time, rate and peak RSS.
func runScanChild(root: String, cachePath: String, concurrency: Int, label: String) throws {
    let start = now()
    let previous = ScanCache.load(path: cachePath)
    var scanner = FolderScanner(root: root)
    if concurrency > 0 { scanner.concurrency = concurrency }
    let (tree, stats) = try scanner.scan(previous: previous)
    if stats.hashedFiles > 0 || tree.count != previous.count { try ScanCache.save(tree, path: cachePath) }
    let seconds = now() - start
    let files = tree.files.count { $0.kind == .file }
    print(
        String(
            format: "%.2f s = %.0f files/s, %.0f MB/s, %d hashed, %d reused, %.1f MiB peak RSS", seconds,
            Double(files) / seconds, Double(stats.hashedBytes) / seconds / 1e6, stats.hashedFiles, stats.reusedFiles,
            ProcStat.peakRSS()))
}

// MARK: - Plan over a big global index

func runPlanBench(paths: Int, localFiles: Int) throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-planbench")
    // KAITEN_BENCH_KEEP=1 keeps the home for profiling `kaiten-bench plan-child HOME`.
    defer { if ProcessInfo.processInfo.environment["KAITEN_BENCH_KEEP"] == nil { dir.remove() } }
    log("work dir \(dir.path)")
    let device = try KaitenDevice(in: dir.path, name: "home")
    let peer = try DeviceID(bytes: Array(repeating: 0x42, count: 32))
    let data = dir.file("data")
    try FileManager.default.createDirectory(atPath: data + "/.stfolder", withIntermediateDirectories: true)
    log("creating \(localFiles) local files")
    try makeSmallFiles(data, count: localFiles)
    // The scan cache the plan will start from (a real first scan).
    let cachePath = device.home.scanCachePath(folderID: "big")
    try FileManager.default.createDirectory(atPath: device.home.scanDirectory, withIntermediateDirectories: true)
    let (tree, _) = try FolderScanner(root: data).scan(previous: LocalTree())
    try ScanCache.save(tree, path: cachePath)

    // config.xml: the folder shared with the synthetic peer.
    let config = try ConfigFile.load(path: device.home.configPath)
    try config.addDevice(DeviceConfiguration(id: peer, name: "peer", addresses: ["dynamic"]))
    try config.addFolder(FolderConfiguration(id: "big", label: "big", path: data, devices: [device.deviceID, peer]))
    try config.write()

    // The global index: every local file (90% equal to the local copy, 10% changed on the peer),
    // then directories and files that exist only on the peer, up to `paths`.
    log("writing a \(paths)-path index log")
    let indexLog = try IndexLog.open(path: device.home.indexLogPath(folderID: "big"), folderID: "big")
    var batch: [BEPFileInfo] = []
    var sequence: Int64 = 0
    /// `blocks`: the local file's own blocks (the peer holds the same content), or nil for
    /// content of the peer's own (one synthetic block).
    func emit(_ name: String, size: Int64, blocks local: [LocalBlock]?, directory: Bool = false) throws {
        sequence += 1
        var file = BEPFileInfo()
        file.name = name
        file.type = directory ? .directory : .file
        file.size = directory ? 0 : size
        file.sequence = sequence
        file.modifiedS = 1_790_000_000
        file.permissions = directory ? 0o755 : 0o644
        var counter = BEPCounter()
        counter.id = peer.shortID
        counter.value = UInt64(1_790_000_000 + sequence)
        file.version.counters = [counter]
        if !directory {
            file.blockSize = 131_072
            if let local {
                file.blocks = local.enumerated().map { i, b in
                    var block = BEPBlockInfo()
                    block.offset = Int64(i) * 131_072
                    block.size = b.size
                    block.hash = Data(b.hash.bytes)
                    block.weakHash = b.weakHash
                    return block
                }
            } else {
                var block = BEPBlockInfo()
                block.size = Int32(size)
                block.hash = Data(ContentHash(a: UInt64(sequence), b: 1, c: 2, d: 3).bytes)
                file.blocks = [block]
            }
        }
        batch.append(file)
        if batch.count == 1000 {
            try indexLog.apply(device: peer, indexID: 1, files: batch, isFullIndex: sequence == 1000)
            batch.removeAll(keepingCapacity: true)
        }
    }
    var written = 0
    var directories = Set<String>()
    for (path, file) in tree.dictionary().sorted(by: { $0.key < $1.key }) {
        if file.kind == .directory {
            directories.insert(path)
            try emit(path, size: 0, blocks: nil, directory: true)
        } else {
            written += 1
            try emit(path, size: file.size, blocks: written % 10 == 0 ? nil : file.blocks)
        }
    }
    var n = 0
    while Int(sequence) < paths {
        if n % 1000 == 0 { try emit("remote\(n / 1000)", size: 0, blocks: nil, directory: true) }
        try emit("remote\(n / 1000)/file\(n % 1000).bin", size: 4096, blocks: nil)
        n += 1
    }
    if !batch.isEmpty { try indexLog.apply(device: peer, indexID: 1, files: batch, isFullIndex: false) }
    // As a sync ends: the snapshot beside the log.
    indexLog.maintain(warn: { print("warning: \($0)") })
    indexLog.close()

    // Select a tenth of the local directories and a few remote ones: pulls, in-sync files,
    // deletions of deselected copies, and conflicts for the locally different 10%.
    let localDirectories = directories.sorted()
    var selection = "# benchmark selection\n"
    for d in localDirectories.prefix(localDirectories.count / 10) { selection += d + "\n" }
    for r in 0..<50 { selection += "remote\(r)\n" }
    try FileManager.default.createDirectory(atPath: device.home.selectionsDirectory, withIntermediateDirectories: true)
    try selection.write(toFile: device.home.selectionPath(folderID: "big"), atomically: true, encoding: .utf8)

    let child = try ProcessRunner.run(CommandLine.arguments[0], ["plan-child", device.home.path])
    guard child.status == 0 else { throw HarnessError("plan failed: \(child.stderr)") }
    print("")
    print("== plan: \(sequence)-path global index, \(tree.count) local entries (\(localFiles) files) ==")
    print("phases, in this process (JSON encoding included):")
    print(child.stdout.trimmingCharacters(in: .whitespacesAndNewlines))

    // What a user runs: the command line, each in a fresh process, median of 3.
    func timedRuns(_ arguments: [String], label: String, goal: String) throws {
        var runs: [(seconds: Double, rss: Double)] = []
        for _ in 0..<3 {
            let timed = try timedCommand([KaitenCLI.executable] + arguments, label: label)
            runs.append((timed.seconds, timed.rssMiB))
        }
        let seconds = runs.map(\.seconds).sorted()
        let rss = runs.map(\.rss).sorted()
        print(
            String(
                format: "%@ %.2f s (%.2f–%.2f), %.0f MiB peak RSS (%.0f–%.0f)   goal %@", label.padding(toLength: 34, withPad: " ", startingAt: 0),
                seconds[1], seconds[0], seconds[2], rss[1], rss[0], rss[2], goal))
    }
    print("command line, median of 3 (spread):")
    try timedRuns(["plan", "--home", device.home.path, "--offline"], label: "kaiten plan --offline", goal: "≤ 2 s, ≤ 400 MiB")
    try timedRuns(["ls", "--home", device.home.path, "big", "remote7"], label: "kaiten ls big remote7 (1,000 files)", goal: "≤ 0.2 s")
    try timedRuns(["ls", "--home", device.home.path, "big", "d42"], label: "kaiten ls big d42 (local directory)", goal: "≤ 0.2 s")
}

/// `timed COMMAND ARGS…`: runs the command (output discarded) and prints "SECONDS CPU-S PEAK-RSS-MIB"
/// of that one child.
func runTimed(_ arguments: [String]) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: arguments[0])
    process.arguments = Array(arguments.dropFirst())
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    let start = now()
    try process.run()
    process.waitUntilExit()
    let seconds = now() - start
    guard process.terminationStatus == 0 else { throw HarnessError("\(arguments) exited \(process.terminationStatus)") }
    let usage = childrenUsage()
    print(String(format: "%.4f %.3f %.1f", seconds, usage.cpu, usage.maxRSSMiB))
}

/// `kaiten plan --offline` for one folder, phase by phase, in this (child) process.
func runPlanChild(homePath: String) throws {
    let home = try KaitenHome.open(Home(path: homePath))
    let folder = home.config.folders.first { $0.id == "big" }!
    let t0 = now()
    let log = try IndexLog.open(path: home.home.indexLogPath(folderID: "big"), folderID: "big", readOnly: true)
    let t1 = now()
    let previous = ScanCache.load(path: home.home.scanCachePath(folderID: "big"))
    let global = log.index
    let (tree, stats) = try FolderScanner(root: folder.path).scan(
        previous: previous,
        blockSizeHint: { path, size in
            guard let g = global.global(path), g.file.type == .file, g.file.size == size else { return nil }
            return g.file.blockSize
        })
    let t2 = now()
    let (selection, bytes) = try readSelectionFile(home.home.selectionPath(folderID: "big"))
    let input = FolderInput(
        id: "big", path: folder.path, selection: selection, selectionBytes: bytes, stignore: nil, global: global,
        checkpoints: log.checkpoints.map { ($0.key, $0.value.indexID, $0.value.maxSequence) }, local: tree)
    let (plan, _) = Reconciler.planFolder(input)
    let t3 = now()
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    let json = try encoder.encode(plan)
    let t4 = now()
    let counts = Dictionary(grouping: plan.actions, by: \.action).mapValues(\.count)
    print(
        String(
            format: """
                replay index log: %.2f s (%d paths)
                rescan (cache): %.2f s (%d hashed, %d reused)
                reconcile: %.2f s → %d pulls, %d deletes, %d mkdir, %d rmdir, %d conflicts
                plan JSON: %.2f s (%.1f MiB)
                total: %.2f s, %.1f MiB peak RSS
                """, t1 - t0, log.index.pathCount, t2 - t1, stats.hashedFiles, stats.reusedFiles, t3 - t2,
            counts[.pull] ?? 0, counts[.delete] ?? 0, counts[.mkdir] ?? 0, counts[.rmdir] ?? 0, plan.conflicts.count, t4 - t3,
            Double(json.count) / 1048576, t4 - t0, ProcStat.peakRSS()))
}

func readSelectionFile(_ path: String) throws -> (SelectionFile, [UInt8]?) {
    guard let data = FileManager.default.contents(atPath: path) else { return (SelectionFile(), nil) }
    return (try SelectionFile.parse(String(decoding: data, as: UTF8.self), file: path), [UInt8](data))
}

/// A plan whose selection is one glob expanding to `counts` paths each (issue 19, item 9): the
/// reconciler alone, in memory, median of 3 runs. Before the fix rendering the `.stignore` compared
/// every selected path with every other (25,000 paths took 30 s).
func runGlobBench(counts: [Int]) throws {
    let peer = try DeviceID(bytes: Array(repeating: 0x42, count: 32))
    print("")
    print("== plan with a glob expanding to N paths (reconcile only, median of 3) ==")
    for count in counts {
        var global = GlobalIndex()
        for i in 0..<count {
            var file = BEPFileInfo()
            file.name = "photos/\(i / 1000)/IMG_\(i).jpg"
            file.type = .file
            file.size = 4096
            file.sequence = Int64(i + 1)
            file.permissions = 0o644
            var counter = BEPCounter()
            counter.id = peer.shortID
            counter.value = UInt64(i + 1)
            file.version.counters = [counter]
            file.blockSize = 131_072
            file.blocksHash = Data(ContentHash(a: UInt64(i), b: 1, c: 2, d: 3).bytes)
            global.announce(file, by: peer)
        }
        let selection = try SelectionFile.parse("photos/*/*.jpg\n", file: "bench")
        var times: [Double] = []
        var pulls = 0
        for _ in 0..<3 {
            let input = FolderInput(
                id: "big", path: "/nonexistent", selection: selection, selectionBytes: nil, stignore: nil, global: global,
                checkpoints: [(peer, 1, Int64(count))], local: LocalTree())
            let t0 = now()
            let (plan, _) = Reconciler.planFolder(input)
            times.append(now() - t0)
            pulls = plan.actions.filter { $0.action == .pull }.count
        }
        times.sort()
        print(String(format: "%7d expanded paths: %.3f s (spread %.3f–%.3f), %d pulls", count, times[1], times[0], times[2], pulls))
    }
}
