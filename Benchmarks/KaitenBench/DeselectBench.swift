import Foundation
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Deselecting a lot (issue 13, item 3). Kaiten holds `files` files of 4 KiB pulled from a
/// syncthing source; every top directory is deselected and `kaiten apply --yes` frees them (each
/// deletion checked as always: unchanged since the plan, held by a connected peer), timed from
/// start to exit. Beside it, in the same run: `rm -r` of a copy of the same tree, then `sync`.
/// Each of `runs` rounds copies the tree afresh and pulls the files back (neither timed);
/// medians with the spread.
func runDeselectBench(files: Int, runs: Int) async throws {
    let directories = max(1, files / 100)
    let dir = try TemporaryDirectory(prefix: "kaiten-deselectbench")
    defer { dir.remove() }
    log("work dir \(dir.path): \(files) files of 4 KiB in \(directories) directories")
    let data = dir.file("data")
    try makeFourKiBFiles(data, files: files, directories: directories)
    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let kaitenData = dir.file("kaiten-data")
    let folderID = "bench"
    let bench = try BenchKaiten(home: dir.file("kaiten"))

    var ours: [Double] = []
    var rm: [Double] = []
    var deleted = 0
    try await withSyncthing(source) { a in
        try await a.addDevice(bench.me, name: "kaiten")
        try await a.shareScanned(folderID, path: data, devices: [bench.me], files: files)
        try bench.run(["peer", "add", a.deviceID.description, "--name", "source", "--address", a.address])
        try bench.run(["folder", "add", folderID, "--path", kaitenData, "--share", a.deviceID.description])
        try bench.run(["index", "sync"])
        let top = try FileManager.default.contentsOfDirectory(atPath: data).filter { !$0.hasPrefix(".st") }.sorted()

        for run in 1...runs {
            try bench.run(["select", folderID] + top)
            try bench.run(["apply", "--yes"])
            // The baseline: the same tree, copied outside the folder, removed by rm -r and synced.
            let copy = dir.file("copy")
            try shell("/bin/cp", ["-a", kaitenData, copy])
            sync()
            var start = now()
            try shell("/bin/rm", ["-r", copy])
            sync()
            rm.append(now() - start)

            try bench.run(["deselect", folderID] + top)
            sync()
            start = now()
            // KAITEN_BENCH_PERF="ARGS" runs the apply under `perf ARGS`, as in the apply and serve
            // benches (e.g. "record -F 999 -g -o /tmp/deselect.perf").
            let applyArguments = ["apply", "--yes", "--json", "--max-delete", "100%"]
            let applied: ProcessResult
            if let perfArguments = ProcessInfo.processInfo.environment["KAITEN_BENCH_PERF"] {
                let perf = perfCommand(
                    perfArguments.split(separator: " ").map(String.init) + [KaitenCLI.executable] + applyArguments + ["--home", bench.home])
                applied = try ProcessRunner.run(perf.executable, perf.arguments)
            } else if let straceFile = ProcessInfo.processInfo.environment["KAITEN_BENCH_STRACE"] {
                // KAITEN_BENCH_STRACE=FILE: a count of every system call the apply makes, and their time.
                applied = try ProcessRunner.run(
                    "/usr/bin/strace", ["-f", "-c", "-w", "-o", straceFile, KaitenCLI.executable] + applyArguments + ["--home", bench.home])
            } else {
                applied = try bench.run(applyArguments)
            }
            ours.append(now() - start)
            let deletions = applied.stdout.split(separator: "\n").filter { $0.contains("\"action_done\"") && $0.contains("\"delete\"") }
            deleted = deletions.count
            // Where the time went, from the events' whole-second timestamps: before the first
            // deletion (dial, index, plan), the deletions, after the last (syncs, local index).
            let stamps = [deletions.first, deletions.last].compactMap { $0 }.compactMap { line -> Double? in
                guard let range = line.range(of: #""@timestamp":"([^"]+)""#, options: .regularExpression) else { return nil }
                let text = line[range].dropFirst(14).dropLast()
                return ISO8601DateFormatter().date(from: String(text))?.timeIntervalSince1970
            }
            if let first = stamps.min(), let last = stamps.max() {
                log(String(format: "run %d: first deletion at +%.0f s, last at +%.0f s, exit at +%.1f s (whole seconds)", run, first - start, last - start, ours.last!))
            }
            let left = (try? FileManager.default.subpathsOfDirectory(atPath: kaitenData).filter { !$0.hasPrefix(".st") }.count) ?? -1
            log(String(format: "run %d: kaiten apply %.2f s (%d deletions, %d entries left), rm -r + sync %.2f s", run, ours.last!, deleted, left, rm.last!))
        }
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    func spread(_ values: [Double]) -> String { String(format: "%.2f–%.2f", values.min() ?? 0, values.max() ?? 0) }
    let oursRate = Double(deleted) / median(ours)
    let rmRate = Double(files) / median(rm)
    print("")
    print("== deselect of \(files) files of 4 KiB in \(directories) directories, \(runs) runs, medians ==")
    print("kaiten apply (plan, checks, deletions): " + String(format: "%6.2f s", median(ours)) + " (\(spread(ours)))  " + String(format: "%9.0f files/s  (%d deletions)", oursRate, deleted))
    print("rm -r + sync of a copy:                  " + String(format: "%6.2f s", median(rm)) + " (\(spread(rm)))  " + String(format: "%9.0f files/s", rmRate))
    print(String(format: "ratio kaiten/rm (rate): %.2f×   goal ≥ 0.5×", oursRate / rmRate))
}

/// Runs a tool; a failure ends the benchmark with its stderr.
private func shell(_ tool: String, _ arguments: [String]) throws {
    let result = try ProcessRunner.run(tool, arguments)
    guard result.status == 0 else { throw HarnessError("\(tool) \(arguments.joined(separator: " ")) failed: \(result.stderr)") }
}

/// `files` files of 4 KiB (each starting with its number) dealt round robin over `directories`
/// directories, as the apply, serve and deselect benches make them (`makeSmallFiles` fills one
/// directory after another instead, as the index, scan and service benches expect).
func makeFourKiBFiles(_ root: String, files: Int, directories: Int) throws {
    try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    var content = [UInt8](repeating: 0, count: 4096)
    for i in 0..<files {
        let dir = "\(root)/d\(i % directories)"
        if i < directories { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        withUnsafeBytes(of: UInt64(i)) { raw in for (j, b) in raw.enumerated() { content[j] = b } }
        FileManager.default.createFile(atPath: "\(dir)/f\(i).bin", contents: Data(content))
    }
}
