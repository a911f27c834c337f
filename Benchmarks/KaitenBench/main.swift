// kaiten-bench: measures Kaiten against syncthing 1.19.2 on the same data, in the same run.
//
//   kaiten-bench index  [--files N]     full index of N small files: Kaiten vs a fresh syncthing
//   kaiten-bench blocks [--mib M]       4 random files of M/4 MiB: Kaiten fetches every block into
//                                       memory (SHA-256 verified) vs syncthing pulling the folder
//   kaiten-bench scan [--mib M] [--files N]  first scan of M MiB of big files vs sha256sum/openssl;
//                                       first scan and rescan of N small files vs syncthing's scan
//   kaiten-bench plan [--paths N] [--local N]  plan over an N-path global index with N local files
//   kaiten-bench apply [--mib M] [--files N] [--runs R]  kaiten apply vs a syncthing receiver pulling
//                                       the same folder: 4 random files of M/4 MiB, then N files of
//                                       4 KiB; medians of R (3) runs
//   kaiten-bench serve [--mib M] [--files N] [--runs R]  a syncthing receiver pulling from kaiten
//                                       serve vs from a syncthing source: medians of R runs
//   kaiten-bench deselect [--files N] [--runs R]  kaiten apply freeing N deselected files vs rm -r
//                                       of a copy of the same tree followed by sync, medians of R
//   kaiten-bench resume [--mib M] [--runs R]  apply of one M MiB file killed past half its bytes,
//                                       then the share of blocks the next apply fetches
//   kaiten-bench stream [--mib M]       time to first byte of a mid-file range through kaiten serve,
//                                       streaming the whole file, kaiten get, a syncthing pull
//
// Each figure is time, peak RSS (VmHWM) and CPU seconds of the receiving process. Kaiten's side
// runs in a child process (`kaiten-bench client …`) so that its RSS is its own.
import Foundation
import KaitenConfig
import KaitenFiles
import KaitenIndex
import KaitenPeer
import KaitenProtocol
import KaitenTestSupport

struct Measurement: Codable {
    var seconds: Double
    var peakRSSMiB: Double
    var cpuSeconds: Double
    var files: Int
    var bytes: Int64
    /// From the peer's ClusterConfig on (Kaiten's side only): what the syncthing receiver's
    /// figure counts, as it is timed from adding the folder on a connection already open.
    var secondsFromClusterConfig: Double? = nil
}

enum ProcStat {
    /// VmHWM of a process, in MiB.
    static func peakRSS(pid: Int32 = getpid()) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let kib = Double(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
            return kib / 1024
        }
        return 0
    }

    /// User + system CPU seconds of a process.
    static func cpuSeconds(pid: Int32 = getpid()) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // fields[0] is state (field 3); utime and stime are fields 14 and 15.
        let ticks = (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

func now() -> Double { Date().timeIntervalSince1970 }

/// Lets the file system settle before a timed phase that creates many files, so that neither
/// side pays for what an earlier run (or phase) deleted: ext4 without a journal (as on the
/// benchmark machine) makes each new inode skip those freed in the last 5 s, 305 s while their
/// inode table is not yet written back (`recently_deleted` in fs/ext4/ialloc.c). Unsettled,
/// whichever side ran first after a previous run's clean-up paid for it: twice the CPU for the
/// same 20,000 files.
func settleFileSystem() {
    sync()
    Thread.sleep(forTimeInterval: 6)
}

/// When a bench last deleted a tree of many files, for the next bench on this machine.
let cleanUpStamp = (NSTemporaryDirectory() as NSString).appendingPathComponent("kaiten-bench-clean-up")

/// Notes that a tree of many files was just deleted (``waitOutEarlierCleanUp()``).
func noteCleanUp() {
    try? String(now()).write(toFile: cleanUpStamp, atomically: true, encoding: .utf8)
}

/// Waits until the inodes an earlier bench's clean-up freed are no longer "recently deleted"
/// (305 s, ``settleFileSystem()``): a bench started right after another paid for the other's
/// deletions wherever its new files landed near them (5,000 files beside `kaiten run`:
/// 1.27 s in a clean run, 1.70–2.60 s right after a clean-up, the time in `recently_deleted`).
func waitOutEarlierCleanUp() {
    guard let text = try? String(contentsOfFile: cleanUpStamp, encoding: .utf8), let then = Double(text) else { return }
    let remaining = then + 305 - now()
    guard remaining > 0 else { return }
    log(String(format: "waiting %.0f s: an earlier bench deleted its files %.0f s ago, and ext4 makes new files skip those inodes for 305 s", remaining, now() - then))
    Thread.sleep(forTimeInterval: remaining)
}

// MARK: - Client (runs in the child process)

func runClient(_ args: [String]) async throws {
    // The heap as the `kaiten` executable sets it up (its intake is what is measured here).
    HeapTuning.keepBlockBuffers()
    // client MODE HOME PEER-ID PORT FOLDER
    let mode = args[0]
    let home = Home(path: args[1])
    let peer = try DeviceID(args[2])
    let port = Int(args[3])!
    let folderID = args[4]
    let identity = try Identity.load(certificatePath: home.certificatePath, keyPath: home.keyPath)
    var hello = BEPHello()
    hello.clientName = "kaiten"
    hello.clientVersion = KaitenVersion.current
    let cpu0 = ProcStat.cpuSeconds()
    let start = now()
    // KAITEN_BENCH_TRACE: when each step of the intake happened, from the start.
    let trace = ProcessInfo.processInfo.environment["KAITEN_BENCH_TRACE"] != nil
    func traced(_ what: @autoclosure () -> String) {
        if trace { FileHandle.standardError.write(Data(String(format: "+%.3f s %@\n", now() - start, what()).utf8)) }
    }
    let connection = try await PeerDialer.connect(
        to: PeerAddress(host: "127.0.0.1", port: port), expecting: peer, identity: identity, hello: hello)
    traced("connected (TLS and Hello)")
    let folder = FolderConfiguration(id: folderID, path: "/unused", devices: [identity.deviceID, peer])
    try await connection.sendClusterConfig(
        ClusterConfigBuilder.make(
            folders: [folder], devices: [DeviceConfiguration(id: identity.deviceID), DeviceConfiguration(id: peer)],
            me: identity.deviceID, peer: peer, localIndexIDs: [folderID: 0x1234_5678]))
    var files: [BEPFileInfo] = []
    var peerIndexID: UInt64 = 0
    var clusterConfigAt: Double?
    let log = mode == "index" ? try IndexLog.open(path: home.indexLogPath(folderID: folderID), folderID: folderID) : nil
    // As `kaiten index sync` does once the handshake is done (IndexSync.exchange).
    if log != nil { MappedCode.unmapIdlePages() }
    _ = try await connection.receiveIndexes(
        wanted: [folderID], me: identity.deviceID, timeout: 600,
        onClusterConfig: {
            let theirs = $0.device(peer, in: folderID)
            peerIndexID = theirs?.indexID ?? 0
            clusterConfigAt = now()
            traced("the peer's ClusterConfig, max sequence \(theirs?.maxSequence ?? -1)")
        }
    ) { _, batch, isFull in
        traced("\(isFull ? "Index" : "IndexUpdate") of \(batch.count) files, last sequence \(batch.last?.sequence ?? -1)")
        if let log {
            // What `kaiten index sync` does: every batch appended and fsynced, the log
            // snapshotted as it grows.
            try log.apply(device: peer, indexID: peerIndexID, files: batch, isFullIndex: isFull)
            log.maintain(warn: { FileHandle.standardError.write(Data("warning: \($0)\n".utf8)) })
        } else {
            files += batch.filter { $0.type == .file && !$0.deleted && !$0.invalid }
        }
    }
    var bytes: Int64 = 0
    if mode == "blocks" {
        bytes = try await withThrowingTaskGroup(of: Int64.self) { group in
            // Keep a bounded number of blocks in flight; the connection adds its own 32 MiB cap.
            var queue = files.flatMap { file in file.blocks.map { (file, $0) } }[...]
            var total: Int64 = 0
            // 128 × 256 KiB = the connection's 32 MiB budget: enough to keep the peer busy.
            for _ in 0..<min(128, queue.count) {
                let (file, block) = queue.removeFirst()
                group.addTask { Int64(try await connection.fetchBlock(folder: folderID, file: file, block: block).count) }
            }
            var completed = 0
            while let done = try await group.next() {
                total += done
                completed += 1
                if trace && completed % 256 == 0 {
                    FileHandle.standardError.write(Data("blocks \(completed): VmHWM \(ProcStat.peakRSS()) MiB\n".utf8))
                }
                if let (file, block) = queue.popFirst() {
                    group.addTask { Int64(try await connection.fetchBlock(folder: folderID, file: file, block: block).count) }
                }
            }
            return total
        }
    }
    let seconds = now() - start
    await connection.close(reason: "benchmark done")
    let result = Measurement(
        seconds: seconds, peakRSSMiB: ProcStat.peakRSS(), cpuSeconds: ProcStat.cpuSeconds() - cpu0,
        files: log.map { $0.index.totals().files } ?? files.count, bytes: log?.fileSize ?? bytes,
        secondsFromClusterConfig: clusterConfigAt.map { start + seconds - $0 })
    print(String(decoding: try JSONEncoder().encode(result), as: UTF8.self))
}

// MARK: - Orchestration

func makeSmallFiles(_ root: String, count: Int) throws {
    let perDirectory = max(1, count / 1000)
    var content = [UInt8](repeating: 0, count: 4096)
    for i in 0..<count {
        let dir = "\(root)/d\(i / perDirectory)"
        if i % perDirectory == 0 { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        withUnsafeBytes(of: UInt64(i)) { raw in for (j, b) in raw.enumerated() { content[j] = b } }
        _ = FileManager.default.createFile(atPath: "\(dir)/f\(i).bin", contents: Data(content))
    }
}

func runComparison(mode: String, count: Int, mib: Int) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-bench")
    defer { dir.remove() }
    log("work dir \(dir.path)")
    let data = dir.file("data")
    try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
    var expectedFiles = count
    if mode == "index" {
        log("making \(count) files of 4 KiB in \(min(count, 1000)) directories")
        try makeSmallFiles(data, count: count)
    } else {
        expectedFiles = 4
        log("making 4 random files of \(mib / 4) MiB")
        for i in 0..<4 { try TestFiles.random("\(data)/big\(i).bin", size: (mib / 4) << 20) }
    }

    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let receiver = try SyncthingInstance.generate(in: dir.path, name: "receiver")
    let kaiten = try KaitenDevice(in: dir.path, name: "kaiten")
    // What a user runs first: `kaiten index sync` of a fresh home (the log, this device's local
    // index, the snapshot), as a process of its own.
    let cli = try KaitenDevice(in: dir.path, name: "kaiten-cli")
    let folderID = "bench"

    try await withSyncthing(source) { a in
        try await a.addDevice(receiver.deviceID, name: "receiver", addresses: [receiver.address])
        try await a.addDevice(kaiten.deviceID, name: "kaiten")
        try await a.addDevice(cli.deviceID, name: "kaiten-cli")
        let scanStart = now()
        try await a.shareScanned(folderID, path: data, devices: [receiver.deviceID, kaiten.deviceID, cli.deviceID], files: expectedFiles)
        log(String(format: "source syncthing scanned in %.1f s", now() - scanStart))

        // Kaiten, in its own process.
        let client = try ProcessRunner.run(
            CommandLine.arguments[0],
            ["client", mode, kaiten.home.path, a.deviceID.description, String(a.listenPort), folderID])
        if !client.stderr.isEmpty { FileHandle.standardError.write(Data(client.stderr.utf8)) }
        guard client.status == 0, let line = client.stdout.split(separator: "\n").last else {
            throw HarnessError("kaiten client failed: \(client.stderr)")
        }
        let ours = try JSONDecoder().decode(Measurement.self, from: Data(line.utf8))
        let command = mode == "index" ? try timedIndexSync(cli, source: a, folderID: folderID, files: expectedFiles, dir: dir) : nil

        // A fresh syncthing receiving the same folder.
        let theirs = try await withSyncthing(receiver) { b in
            let pulled = try await syncthingPull(
                source: a, receiver: b, folderID: folderID, folderPath: dir.file("receiver-data"),
                stignore: mode == "index" ? "*\n" : nil
            ) { s in
                if mode == "index" { return (s["globalFiles"] as? Int ?? 0) == expectedFiles }
                return (s["localFiles"] as? Int ?? 0) == expectedFiles && (s["needFiles"] as? Int ?? 1) == 0
                    && s["state"] as? String == "idle"
            }
            if mode == "index" { try await Task.sleep(nanoseconds: 3_000_000_000) }  // let LevelDB settle
            let s = try await b.get("/rest/db/status?folder=\(folderID)") as? [String: Any]
            // 1.x keeps LevelDB in index-v0.14.0.db, 2.x SQLite in index-v2 (lib/locations).
            let bytes =
                mode == "index"
                ? directorySize(b.home + "/index-v0.14.0.db") + directorySize(b.home + "/index-v2")
                : (s?["localBytes"] as? NSNumber)?.int64Value ?? 0
            return Measurement(seconds: pulled.seconds, peakRSSMiB: pulled.rss, cpuSeconds: pulled.cpu, files: expectedFiles, bytes: bytes)
        }
        report(mode: mode, ours: ours, theirs: theirs)
        if let command {
            print(
                String(
                    format: "kaiten index sync (CLI) %6.2f s  %8.1f MiB peak RSS  %6.2f CPU-s   ratio to syncthing: time %.2f, peak RSS %.2f   goal: ≤ 0.5, ≤ 0.5",
                    command.seconds, command.peakRSSMiB, command.cpuSeconds, command.seconds / theirs.seconds,
                    command.peakRSSMiB / theirs.peakRSSMiB))
            print("  written: \(command.written)")
        }
    }
}

/// `kaiten index sync` of a fresh home from `source`, timed as a process of its own (`timed`):
/// seconds, CPU, peak RSS and what it wrote under index/.
func timedIndexSync(
    _ device: KaitenDevice, source: SyncthingInstance, folderID: String, files: Int, dir: TemporaryDirectory
) throws -> (seconds: Double, cpuSeconds: Double, peakRSSMiB: Double, written: String) {
    let folder = dir.file("cli-data")
    try FileManager.default.createDirectory(atPath: folder + "/.stfolder", withIntermediateDirectories: true)
    let config = try ConfigFile.load(path: device.home.configPath)
    try config.addDevice(DeviceConfiguration(id: source.deviceID, name: "source", addresses: ["tcp://127.0.0.1:\(source.listenPort)"]))
    try config.addFolder(FolderConfiguration(id: folderID, label: folderID, path: folder, devices: [device.deviceID, source.deviceID]))
    try config.write()
    let timed = try timedCommand([KaitenCLI.executable, "index", "sync", "--home", device.home.path, folderID], label: "kaiten index sync")
    let index = (device.home.indexLogPath(folderID: folderID) as NSString).deletingLastPathComponent
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: index)) ?? []).sorted()
    let written = names.map { name in
        let size = (try? FileManager.default.attributesOfItem(atPath: index + "/" + name)[.size] as? Int64) ?? 0
        return String(format: "%@ %.1f MB", name, Double(size) / 1e6)
    }.joined(separator: ", ")
    return (timed.seconds, timed.cpu, timed.rssMiB, written)
}

func directorySize(_ path: String) -> Int64 {
    guard let names = try? FileManager.default.subpathsOfDirectory(atPath: path) else { return 0 }
    return names.reduce(0) { sum, name in
        sum + ((try? FileManager.default.attributesOfItem(atPath: path + "/" + name)[.size] as? Int64) ?? 0)
    }
}

/// Replays a synthetic log of `records` file records (10 peers' worth of 100k-path folders).
/// Replay of an index log (issue 13, item 2): in full (no snapshot), and from a snapshot of its
/// first 90 % plus the last 10 % as the tail; each open in a fresh process, median of `runs`.
func runReplay(records: Int, runs: Int = 3) throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-replay")
    // KAITEN_BENCH_KEEP=1 keeps the log for profiling `kaiten-bench replay-child LOG full|snapshot`.
    defer { if ProcessInfo.processInfo.environment["KAITEN_BENCH_KEEP"] == nil { dir.remove() } }
    let path = dir.file("synthetic.log")
    let tail = records / 10
    do {
        let log = try IndexLog.open(path: path, folderID: "synthetic")
        let devices = try (0..<10).map { try DeviceID(bytes: Array(repeating: UInt8(0x10 + $0), count: 32)) }
        let perBatch = 1000
        var written = 0
        while written < records {
            if written == records - tail { try log.writeSnapshot() }
            let device = devices[(written / 100_000) % devices.count]
            let upTo = written < records - tail ? records - tail : records
            let batch = (0..<min(perBatch, upTo - written)).map { i -> BEPFileInfo in
                let n = written + i
                var file = BEPFileInfo()
                file.name = "dir\(n % 1000)/file-\(n % 100_000).bin"
                file.size = Int64(n % 500_000)
                file.sequence = Int64(n + 1)
                file.modifiedS = 1_790_000_000 + Int64(n)
                file.permissions = 0o644
                var counter = BEPCounter()
                counter.id = device.shortID
                counter.value = UInt64(1_790_000_000 + n)
                file.version.counters = [counter]
                file.blockSize = 131_072
                var block = BEPBlockInfo()
                block.size = Int32(file.size)
                block.hash = Data(repeating: UInt8(n & 0xFF), count: 32)
                block.weakHash = UInt32(n)
                file.blocks = [block]
                return file
            }
            try log.apply(device: device, indexID: 1, files: batch, isFullIndex: false)
            written += batch.count
        }
        log.close()
    }
    let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int64) ?? 0
    let snapshot = IndexLog.snapshotPath(of: path)
    let snapshotSize = (try? FileManager.default.attributesOfItem(atPath: snapshot)[.size] as? Int64) ?? 0
    struct Open { var seconds: Double; var check: Double; var records: Int; var rss: Double }
    // Each open in a fresh process, so that its peak RSS is its own.
    func open(_ mode: String) throws -> Open {
        let child = try ProcessRunner.run(CommandLine.arguments[0], ["replay-child", path, mode])
        guard child.status == 0 else { throw HarnessError("replay failed: \(child.stderr)") }
        let f = child.stdout.split(separator: " ").map { String($0).trimmingCharacters(in: .whitespacesAndNewlines) }
        return Open(seconds: Double(f[0])!, check: Double(f[1])!, records: Int(f[2])!, rss: Double(f[3])!)
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    func spread(_ values: [Double], _ format: String) -> String {
        "(\(String(format: format, values.min()!))–\(String(format: format, values.max()!)))"
    }
    var full: [Open] = []
    var snapped: [Open] = []
    for _ in 0..<runs {
        full.append(try open("full"))
        snapped.append(try open("snapshot"))
    }
    print("")
    print(
        "== replay of a synthetic log: \(records) file records (\(String(format: "%.1f", Double(size) / 1048576)) MiB), "
            + "snapshot of the first \(records - tail) (\(String(format: "%.1f", Double(snapshotSize) / 1048576)) MiB), median of \(runs) =="
    )
    let fullRates = full.map { Double($0.records) / $0.seconds }
    print(
        String(
            format: "full replay:            %.2f s %@, %.0f records/s, %.1f MiB peak RSS", median(full.map(\.seconds)),
            spread(full.map(\.seconds), "%.2f"), median(fullRates), median(full.map(\.rss))))
    let tailRates = snapped.map { Double($0.records) / max($0.seconds - $0.check, 1e-6) }
    print(
        String(
            format: "snapshot + tail:        %.2f s %@ (snapshot checked in %.2f s), %.1f MiB peak RSS", median(snapped.map(\.seconds)),
            spread(snapped.map(\.seconds), "%.2f"), median(snapped.map(\.check)), median(snapped.map(\.rss))))
    print(
        String(
            format: "tail replay:            %d records, %.0f records/s %@   goal ≥ 1,000,000 records/s", snapped[0].records,
            median(tailRates), spread(tailRates, "%.0f")))
}

/// `replay-child PATH full|snapshot`: prints "SECONDS CHECK-SECONDS RECORDS PEAK-RSS-MIB".
func runReplayChild(path: String, mode: String) throws {
    let snapshot = IndexLog.snapshotPath(of: path)
    if mode == "full" { try FileManager.default.moveItem(atPath: snapshot, toPath: snapshot + ".aside") }
    defer { if mode == "full" { try? FileManager.default.moveItem(atPath: snapshot + ".aside", toPath: snapshot) } }
    var check = 0.0
    if mode == "snapshot" {
        // The snapshot's own check (CRC and structure), timed apart from the tail.
        var info = stat()
        stat(path, &info)
        // The log's generation, from its header (format 3: bytes 12..<20, big-endian).
        let handle = FileHandle(forReadingAtPath: path)!
        let head = [UInt8](handle.readData(ofLength: 20))
        handle.closeFile()
        let generation = head[12..<20].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let t = now()
        _ = try IndexSnapshot.open(path: snapshot, folderID: "synthetic", generation: generation, logSize: Int64(info.st_size))
        check = now() - t
    }
    let start = now()
    let log = try IndexLog.open(path: path, folderID: "synthetic", readOnly: true)
    let seconds = now() - start
    guard (mode == "snapshot") == log.index.hasSnapshot else { throw HarnessError("snapshot use not as asked (\(mode))") }
    print(String(format: "%.4f %.4f %d %.1f", seconds, check, log.recordsReplayed, ProcStat.peakRSS()))
}

func pidOf(home: String) -> Int32? {
    // The harness runs syncthing as one process whose command line names the home.
    guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return nil }
    for entry in entries {
        guard let pid = Int32(entry),
            let cmdline = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline")
        else { continue }
        let args = cmdline.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        // `syncthing`, or `syncthing-2` when KAITEN_SYNCTHING names the 2.x binary.
        let program = args.first.map { $0.split(separator: "/").last.map(String.init) ?? $0 } ?? ""
        if program.hasPrefix("syncthing"), args.contains(home) { return pid }
    }
    return nil
}

func report(mode: String, ours: Measurement, theirs: Measurement) {
    func row(_ name: String, _ m: Measurement) -> String {
        let rate =
            mode == "index"
            ? String(format: "%8.0f files/s", Double(m.files) / m.seconds)
            : String(format: "%8.0f MB/s", Double(m.bytes) / m.seconds / 1e6)
        return String(
            format: "%@ %8.2f s  %@  %8.1f MiB peak RSS  %6.2f CPU-s",
            name.padding(toLength: 22, withPad: " ", startingAt: 0) as NSString, m.seconds, rate as NSString,
            m.peakRSSMiB, m.cpuSeconds)
    }
    print("")
    print(mode == "index" ? "== full index of \(ours.files) files ==" : "== \(ours.bytes >> 20) MiB of blocks ==")
    print(row("kaiten", ours))
    print(row("syncthing (receiver)", theirs))
    print(
        String(
            format: "ratio kaiten/syncthing: time %.2f, peak RSS %.2f, CPU %.2f%@", ours.seconds / theirs.seconds,
            ours.peakRSSMiB / theirs.peakRSSMiB, ours.cpuSeconds / max(theirs.cpuSeconds, 0.01),
            (mode == "index" ? "   goal (issue 43): time ≤ 0.5, peak RSS ≤ 0.5" : "") as NSString))
    if let fromClusterConfig = ours.secondsFromClusterConfig {
        // syncthing 2.x sends its ClusterConfig about a second after a connection opens; the
        // receiver's figure starts on a connection already open, so this is the like-for-like time.
        print(
            String(
                format: "kaiten from the peer's ClusterConfig %.2f s (%.2f s before it): ratio %.2f (the syncthing receiver is timed from adding the folder on an open connection)",
                fromClusterConfig, ours.seconds - fromClusterConfig, fromClusterConfig / theirs.seconds))
    }
    if mode == "blocks" {
        print("(kaiten fetches into memory with SHA-256 checks; syncthing also writes and fsyncs its files)")
    } else {
        print(
            String(
                format: "index on disk: kaiten log %.1f MiB, syncthing database %.1f MiB (ratio %.2f)",
                Double(ours.bytes) / 1048576, Double(theirs.bytes) / 1048576, Double(ours.bytes) / Double(max(theirs.bytes, 1))))
        print("(both store the index durably: kaiten fsyncs its log per batch, syncthing writes LevelDB)")
    }
}

func log(_ text: String) { FileHandle.standardError.write(Data("bench: \(text)\n".utf8)) }

let args = Array(CommandLine.arguments.dropFirst())
do {
    switch args.first {
    case "client":
        try await runClient(Array(args.dropFirst()))
    case "replay":
        let records = args.firstIndex(of: "--records").flatMap { Int(args[$0 + 1]) } ?? 1_000_000
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        try runReplay(records: records, runs: runs)
    case "timed":
        try runTimed(Array(args.dropFirst()))
    case "replay-child":
        try runReplayChild(path: args[1], mode: args[2])
    case "index":
        let files = args.firstIndex(of: "--files").flatMap { Int(args[$0 + 1]) } ?? 100_000
        try await runComparison(mode: "index", count: files, mib: 0)
    case "blocks":
        let mib = args.firstIndex(of: "--mib").flatMap { Int(args[$0 + 1]) } ?? 1024
        try await runComparison(mode: "blocks", count: 4, mib: mib)
    case "scan":
        let mib = args.firstIndex(of: "--mib").flatMap { Int(args[$0 + 1]) } ?? 1024
        let files = args.firstIndex(of: "--files").flatMap { Int(args[$0 + 1]) } ?? 100_000
        try await runScanBench(mib: mib, files: files)
    case "scan-child":
        try runScanChild(root: args[1], cachePath: args[2], concurrency: Int(args[3]) ?? 0, label: args[4])
    case "plan":
        let paths = args.firstIndex(of: "--paths").flatMap { Int(args[$0 + 1]) } ?? 1_000_000
        let local = args.firstIndex(of: "--local").flatMap { Int(args[$0 + 1]) } ?? 100_000
        try runPlanBench(paths: paths, localFiles: local)
    case "glob":
        let counts = args.firstIndex(of: "--paths").flatMap { Int(args[$0 + 1]) }.map { [$0] } ?? [5_000, 25_000, 250_000]
        try runGlobBench(counts: counts)
    case "apply":
        let mib = args.firstIndex(of: "--mib").flatMap { Int(args[$0 + 1]) } ?? 1024
        let files = args.firstIndex(of: "--files").flatMap { Int(args[$0 + 1]) } ?? 20_000
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        try await runApplyBench(mib: mib, files: files, directories: max(1, files / 100), runs: runs)
    case "untrusted":
        let mib = args.firstIndex(of: "--mib").flatMap { Int(args[$0 + 1]) } ?? 1024
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        try await runUntrustedBench(mib: mib, runs: runs)
        try await runUntrustedHoldingBench(mib: mib, runs: runs)
    case "holding":
        let mib = args.firstIndex(of: "--mib").flatMap { Int(args[$0 + 1]) } ?? 1024
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        try await runUntrustedHoldingBench(mib: mib, runs: runs)
    case "scale":
        let sizes = args.firstIndex(of: "--paths").map { args[$0 + 1].split(separator: ",").compactMap { Int($0) } }
            ?? [10_000, 100_000, 1_000_000, 10_000_000]
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        let plot = args.firstIndex(of: "--plot").map { args[$0 + 1] } ?? "Docs/scale.png"
        try await runScaleBench(sizes: sizes, runs: runs, plot: plot == "none" ? nil : plot)
    case "scale-intake":
        try runScaleIntake(homePath: args[1], files: Int(args[2])!)
    case "search":
        let paths = args.firstIndex(of: "--paths").flatMap { Int(args[$0 + 1]) } ?? 100_000
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 5
        try await runSearchBench(paths: paths, runs: runs)
    case "mount":
        let mib = args.firstIndex(of: "--mib").flatMap { Int(args[$0 + 1]) } ?? 1024
        let files = args.firstIndex(of: "--files").flatMap { Int(args[$0 + 1]) } ?? 100_000
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        try await runMountBench(mib: mib, files: files, runs: runs)
    case "stream":
        let mib = args.firstIndex(of: "--mib").flatMap { Int(args[$0 + 1]) } ?? 1024
        try await runStreamBench(mib: mib)
    case "serve":
        let mib = args.firstIndex(of: "--mib").flatMap { Int(args[$0 + 1]) } ?? 1024
        let files = args.firstIndex(of: "--files").flatMap { Int(args[$0 + 1]) } ?? 20_000
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        try await runServeBench(mib: mib, files: files, runs: runs)
    case "service":
        let files = args.firstIndex(of: "--files").flatMap { Int(args[$0 + 1]) } ?? 100_000
        let seconds = args.firstIndex(of: "--seconds").flatMap { Int(args[$0 + 1]) } ?? 60
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        let changes = args.firstIndex(of: "--changes").flatMap { Int(args[$0 + 1]) } ?? 20
        try await runServiceBench(files: files, seconds: seconds, runs: runs, changes: changes)
    case "deselect":
        let files = args.firstIndex(of: "--files").flatMap { Int(args[$0 + 1]) } ?? 100_000
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        try await runDeselectBench(files: files, runs: runs)
    case "resume":
        let mib = args.firstIndex(of: "--mib").flatMap { Int(args[$0 + 1]) } ?? 256
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        try await runResumeBench(mib: mib, runs: runs)
    case "thumb":
        let photos = args.firstIndex(of: "--photos").flatMap { Int(args[$0 + 1]) } ?? 40
        let videoMiB = args.firstIndex(of: "--video-mib").flatMap { Int(args[$0 + 1]) } ?? 1024
        let runs = args.firstIndex(of: "--runs").flatMap { Int(args[$0 + 1]) } ?? 3
        try await runThumbBench(photos: photos, videoMiB: videoMiB, runs: runs)
    case "plan-child":
        try runPlanChild(homePath: args[1])
    default:
        print("usage: kaiten-bench index [--files N] | blocks [--mib M] | replay [--records N] [--runs R] | scan [--mib M] [--files N] | plan [--paths N] [--local N] | glob [--paths N] | apply [--mib M] [--files N] [--runs R] | stream [--mib M] | serve [--mib M] [--files N] [--runs R] | service [--files N] [--seconds S] [--runs R] [--changes C] | deselect [--files N] [--runs R] | resume [--mib M] [--runs R] | thumb [--photos N] [--video-mib M] [--runs R] | mount [--mib M] [--files N] [--runs R] | search [--paths N] [--runs R] | untrusted [--mib M] [--runs R] | holding [--mib M] [--runs R]")
        exit(64)
    }
} catch {
    log("failed: \(error)")
    exit(1)
}

/// `perf ARGUMENTS` as a command line (executable, arguments) that starts perf with no signal
/// blocked: a child of the bench inherits its blocked signals, and a perf that never sees
/// SIGCHLD or SIGINT never ends. (`KAITEN_BENCH_PERF` in the apply and serve benches.)
func perfCommand(_ arguments: [String]) -> (executable: String, arguments: [String]) {
    ("/usr/bin/python3",
     ["-c", "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execv('/usr/bin/perf', sys.argv[1:])", "perf"] + arguments)
}
