import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Thumbnails (issue 14): the bytes fetched from a peer per thumbnail as a share of the file —
/// camera JPEGs with an EXIF thumbnail (goal ≤ 5 %), a large H.264 MP4 with its index at the end
/// as cameras write it (goal ≤ 10 %) — and thumbnails per second of local files next to libvips's
/// own `vipsthumbnail` on the same files in the same run. Medians of `runs`, each into an empty cache.
func runThumbBench(photos: Int, videoMiB: Int, runs: Int) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-thumbbench")
    defer { dir.remove() }
    log("work dir \(dir.path)")
    let data = dir.file("data")
    // Camera pictures: 4000 × 3000 (12 MP) with noise, so that they weigh what a camera's do,
    // and EXIF's 160 × 120 thumbnail, what most cameras embed.
    log("making \(photos) camera JPEGs and a \(videoMiB) MiB video")
    try TestMedia.jpeg(dir.file("exif-thumb.jpg"), width: 160, height: 120)
    try TestMedia.jpeg(data + "/camera/IMG_0000.JPG", width: 4000, height: 3000, quality: 3, noise: true)
    try TestMedia.exif(data + "/camera/IMG_0000.JPG", thumbnail: dir.file("exif-thumb.jpg"), orientation: 1, dateTimeOriginal: "2025:07:01 12:00:00")
    let template = try Data(contentsOf: URL(fileURLWithPath: data + "/camera/IMG_0000.JPG"))
    for i in 1..<photos {
        // Distinct content where it is read: a capture date of its own in each file's EXIF (the
        // first block), so that no first block is another file's (fetched once, then cached).
        let path = data + String(format: "/camera/IMG_%04d.JPG", i)
        try template.write(to: URL(fileURLWithPath: path))
        try TestMedia.exif(path, dateTimeOriginal: String(format: "2025:07:01 12:%02d:%02d", i / 60 % 60, i % 60))
    }
    // 40 Mbit/s of 720p noise: a camera's bitrate; its size decides the length.
    let seconds = max(4, videoMiB * 8 / 40)
    try TestMedia.video(data + "/clips/long.mp4", seconds: seconds, width: 1280, height: 720, bitrate: "40M", noise: true)
    let photoBytes = try (0..<photos).map { i in
        try FileManager.default.attributesOfItem(atPath: data + String(format: "/camera/IMG_%04d.JPG", i))[.size] as! Int
    }.reduce(0, +)
    let videoBytes = try FileManager.default.attributesOfItem(atPath: data + "/clips/long.mp4")[.size] as! Int

    let source = try SyncthingInstance.generate(in: dir.path, name: "source")
    let bench = try BenchKaiten(home: dir.file("kaiten"))
    struct Report: Decodable {
        var made: Int
        var failed: Int
        var fetched_bytes: Int
    }
    func thumb(_ args: [String]) throws -> (report: Report, seconds: Double) {
        let start = now()
        let result = try KaitenCLI.run(["thumb", "bench"] + args + ["--json", "--home", bench.home])
        let seconds = now() - start
        guard let report = try? JSONDecoder().decode(Report.self, from: Data(result.stdout.utf8)) else {
            throw HarnessError("kaiten thumb failed: \(result.stderr)")
        }
        return (report, seconds)
    }

    var photoShares: [Double] = []
    var videoShares: [Double] = []
    var kaitenRates: [Double] = []
    var vipsRates: [Double] = []
    var parallelRates: [Double] = []
    try await withSyncthing(source) { a in
        try await a.addDevice(bench.me, name: "kaiten")
        try await a.shareScanned("bench", path: data, devices: [bench.me], files: photos + 1)
        try bench.run(["peer", "add", a.deviceID.description, "--address", a.address])
        try bench.run(["folder", "add", "bench", "--path", dir.file("kaiten-data"), "--share", a.deviceID.description])
        try bench.run(["index", "sync"])

        for run in 0..<runs {
            let photoRun = try thumb(["camera", "--cache", dir.file("cache-photos-\(run)")])
            guard photoRun.report.made == photos else { throw HarnessError("only \(photoRun.report.made) of \(photos) thumbnails made") }
            photoShares.append(Double(photoRun.report.fetched_bytes) / Double(photoBytes))
            let videoRun = try thumb(["clips/long.mp4", "--cache", dir.file("cache-video-\(run)")])
            guard videoRun.report.made == 1 else { throw HarnessError("no thumbnail of the video") }
            videoShares.append(Double(videoRun.report.fetched_bytes) / Double(videoBytes))
            log(String(format: "run %d: photos %.2f %% fetched, video %.2f %%", run + 1, photoShares.last! * 100, videoShares.last! * 100))
        }

        // Local files: the same pictures in Kaiten's folder, scanned (current local copies).
        try FileManager.default.copyItem(atPath: data + "/camera", toPath: dir.file("kaiten-data/camera"))
        try bench.run(["plan", "--offline"])
        let vips = ProcessRunner.which("vipsthumbnail") ?? "/usr/bin/vipsthumbnail"
        let files = (0..<photos).map { dir.file("kaiten-data") + String(format: "/camera/IMG_%04d.JPG", $0) }
        for run in 0..<runs {
            let ours = try thumb(["camera", "--force", "--cache", dir.file("cache-local-\(run)")])
            guard ours.report.made == photos && ours.report.fetched_bytes == 0 else {
                throw HarnessError("local thumbnails: \(ours.report.made) made, \(ours.report.fetched_bytes) bytes fetched")
            }
            kaitenRates.append(Double(photos) / ours.seconds)
            let out = dir.file("vips-\(run)")
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            let start = now()
            let result = try ProcessRunner.run(vips, ["--size", "255", "-o", out + "/%s.jpg[Q=80,strip]"] + files)
            let seconds = now() - start
            guard result.status == 0 else { throw HarnessError("vipsthumbnail: \(result.stderr)") }
            vipsRates.append(Double(photos) / seconds)
            // The same on every core: one vipsthumbnail per core, each on its share of the files
            // (kaiten thumb runs one decoder process per core).
            let cores = ProcessInfo.processInfo.activeProcessorCount
            let parallelStart = now()
            let processes = try (0..<cores).map { core -> Process in
                let process = Process()
                process.executableURL = URL(fileURLWithPath: vips)
                process.arguments = ["--size", "255", "-o", out + "/%s.p.jpg[Q=80,strip]"] + files.enumerated().filter { $0.offset % cores == core }.map(\.element)
                process.standardOutput = FileHandle.nullDevice
                process.standardError = FileHandle.nullDevice
                try process.run()
                return process
            }
            for process in processes { process.waitUntilExit() }
            parallelRates.append(Double(photos) / (now() - parallelStart))
            log(String(format: "run %d: kaiten thumb %.1f/s, vipsthumbnail %.1f/s, %d × vipsthumbnail %.1f/s", run + 1, kaitenRates.last!, vipsRates.last!, cores, parallelRates.last!))
        }
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    func spread(_ values: [Double], _ scale: Double = 1) -> String {
        String(format: "%.2f–%.2f", (values.min() ?? 0) * scale, (values.max() ?? 0) * scale)
    }
    print("")
    print("== thumbnails: \(photos) camera JPEGs (12 MP, \(photoBytes / photos / 1024) KiB each, 160×120 EXIF thumbnail), one \(videoBytes >> 20) MiB H.264 MP4 (index at the end); \(runs) runs ==")
    print(String(format: "fetched per camera JPEG, share of the file:   %.2f %% (%@)   goal ≤ 5 %%", median(photoShares) * 100, spread(photoShares, 100)))
    print(String(format: "fetched for the video's frame, share of it:   %.2f %% (%@)   goal ≤ 10 %%", median(videoShares) * 100, spread(videoShares, 100)))
    print(String(format: "local files: kaiten thumb %.1f thumbnails/s (%@), vipsthumbnail %.1f/s (%@): ratio %.2f", median(kaitenRates),
                 spread(kaitenRates), median(vipsRates), spread(vipsRates), median(kaitenRates) / median(vipsRates)))
    print(String(format: "             vipsthumbnail, one per core (%d): %.1f/s (%@): ratio %.2f", ProcessInfo.processInfo.activeProcessorCount,
                 median(parallelRates), spread(parallelRates), median(kaitenRates) / median(parallelRates)))
}
