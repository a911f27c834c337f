import Foundation
import KaitenScan
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Resume (issue 13, item 5): `kaiten apply` pulling one `mib` MiB file from a syncthing source
/// is killed with SIGKILL once its progress events pass half the bytes; the next apply reuses
/// the verified blocks of the leftover temp file. Reported: the share of the file's blocks the
/// second apply fetched, next to the share still missing at the kill. `runs` times (the file is
/// deselected and freed between runs), medians.
func runResumeBench(mib: Int, runs: Int) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-resumebench")
    defer { dir.remove() }
    let data = dir.file("data")
    try TestFiles.random("\(data)/big.bin", size: mib << 20)
    log("work dir \(dir.path): one random file of \(mib) MiB")
    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let bench = try BenchKaiten(home: dir.file("kaiten"))
    let folderID = "bench"
    var fetchedShares: [Double] = []
    var missingAtKill: [Double] = []
    try await withSyncthing(source) { a in
        try await a.addDevice(bench.me, name: "kaiten")
        try await a.shareScanned(folderID, path: data, devices: [bench.me], files: 1)
        try bench.run(["peer", "add", a.deviceID.description, "--name", "source", "--address", a.address])
        try bench.run(["folder", "add", folderID, "--path", dir.file("kaiten-data"), "--share", a.deviceID.description])
        try bench.run(["index", "sync"])
        for run in 1...runs {
            try bench.run(["select", folderID, "big.bin"])
            let killedAt = try applyKilledHalfway(bench)
            let resumed = try bench.run(["apply", "--yes", "--json"])
            let summary = resumed.stdout.split(separator: "\n").last.map(String.init) ?? ""
            guard let object = try JSONSerialization.jsonObject(with: Data(summary.utf8)) as? [String: Any],
                let fetched = object["blocks_fetched"] as? Int
            else { throw HarnessError("no summary from the second apply: \(summary)") }
            // syncthing's block size rule: 256 KiB blocks for 256 MiB, 1 MiB for 1 GiB.
            let blocks = (mib << 20) / Int(BlockSize.forFileSize(Int64(mib) << 20))
            fetchedShares.append(Double(fetched) / Double(blocks))
            missingAtKill.append(1 - killedAt)
            log(String(format: "run %d: killed at %.0f %% of the bytes; the next apply fetched %d of %d blocks (%.0f %%)", run, killedAt * 100, fetched, blocks, fetchedShares.last! * 100))
            try bench.run(["deselect", folderID, "big.bin"])
            try bench.run(["apply", "--yes", "--max-delete", "100%"])
        }
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    print("")
    print("== resume of a \(mib) MiB pull killed (SIGKILL) past half its bytes, \(runs) runs, medians ==")
    let each = fetchedShares.map { String(format: "%.0f %%", $0 * 100) }.joined(separator: ", ")
    print(String(format: "missing at the kill: %.0f %%; fetched by the next apply: %.0f %% of the blocks", median(missingAtKill) * 100, median(fetchedShares) * 100) + " (runs: \(each))")
    print("goal: killed at 50 %, the next apply fetches ≤ 55 %")
}

/// Starts `kaiten apply --yes --json`, reads its progress events and kills it with SIGKILL once
/// they report half the bytes in place; returns the share reported at that moment.
private func applyKilledHalfway(_ bench: BenchKaiten) throws -> Double {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: KaitenCLI.executable)
    process.arguments = ["apply", "--yes", "--json", "--home", bench.home]
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    var pending = ""
    var share = 0.0
    while process.isRunning {
        let chunk = output.fileHandleForReading.availableData
        if chunk.isEmpty { break }
        pending += String(decoding: chunk, as: UTF8.self)
        while let newline = pending.firstIndex(of: "\n") {
            let line = String(pending[..<newline])
            pending = String(pending[pending.index(after: newline)...])
            guard line.contains("\"progress\""),
                let event = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let done = event["bytes_done"] as? Int, let total = event["bytes_total"] as? Int, total > 0
            else { continue }
            share = Double(done) / Double(total)
            if share >= 0.5 {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                return share
            }
        }
    }
    process.waitUntilExit()
    throw HarnessError("apply finished before half its bytes were reported (last progress \(Int(share * 100)) %); use a larger --mib")
}
