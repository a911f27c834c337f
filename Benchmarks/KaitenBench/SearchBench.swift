import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenSync
import KaitenTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The web page's search (`GET /rest/kaiten/search` of `kaiten run`, as the page asks it) over
/// an index of N paths (a synthetic one, written into the log as a peer's: the search reads the
/// index alone), next to `find -name` over the same N paths as files on disk (what a user
/// of a folder syncthing keeps whole would run). Times are curl's (the request alone), medians
/// of R; the first search after the service started (its log not yet open) is said apart.
func runSearchBench(paths: Int, runs: Int) async throws {
    let dir = try TemporaryDirectory(prefix: "kaiten-searchbench")
    defer { dir.remove() }
    log("work dir \(dir.path)")
    let home = dir.file("home")
    let created = try KaitenCLI.run(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:\(try FreePort.next())", "--gui-address", "127.0.0.1:0"])
    guard created.status == 0 else { throw HarnessError("kaiten init: \(created.stderr)") }
    let peer = try DeviceID(bytes: Array(repeating: 0x5A, count: 32))
    try FileManager.default.createDirectory(atPath: dir.file("data/.stfolder"), withIntermediateDirectories: true)
    for args in [["peer", "add", peer.description, "--name", "away", "--address", "tcp://127.0.0.1:1"], ["folder", "add", "f", "--path", dir.file("data"), "--share", peer.description]] {
        let result = try KaitenCLI.run(args + ["--home", home])
        guard result.status == 0 else { throw HarnessError("kaiten \(args[0]): \(result.stderr)") }
    }
    let files = SyntheticIndex.photos(count: paths)
    let opened = try KaitenHome.open(Home(path: home))
    let indexLog = try PeerGenerations.openLog(home: opened, folder: "f", readOnly: false)
    try indexLog.apply(device: peer, indexID: 7, files: files, isFullIndex: true)
    indexLog.close()
    // The same paths on disk, for find.
    let tree = dir.file("tree")
    for file in files {
        let path = tree + "/" + file.name
        if file.type == .directory {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } else {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            FileManager.default.createFile(atPath: path, contents: nil)
        }
    }

    let run = Process()
    run.executableURL = URL(fileURLWithPath: KaitenCLI.executable)
    run.arguments = ["run", "--home", home, "--apply", "none"]
    run.standardOutput = FileHandle.nullDevice
    run.standardError = FileHandle.nullDevice
    try run.run()
    defer {
        kill(run.processIdentifier, SIGTERM)
        run.waitUntilExit()
    }
    var base = ""
    let deadline = now() + 60
    while base.isEmpty && now() < deadline {
        let record = FileManager.default.contents(atPath: home + "/state/service.json").flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
        base = record?["rest_url"] as? String ?? ""
        if base.isEmpty { usleep(100_000) }
    }
    guard !base.isEmpty else { throw HarnessError("kaiten run did not serve its REST API within 60 s") }
    let config = try String(contentsOfFile: home + "/config.xml", encoding: .utf8)
    guard let key = config.firstMatch(of: /<apikey>([^<]+)<\/apikey>/)?.1 else { throw HarnessError("no API key in config.xml") }

    /// One search: curl's time for the request, and the total it answered.
    func search(_ query: String) throws -> (seconds: Double, total: Int) {
        let encoded = query.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? query
        let answer = try restGet(base + "/rest/kaiten/search?folder=f&q=" + encoded, key: String(key))
        guard let total = (answer.body as? [String: Any])?["total"] as? Int else { throw HarnessError("search \(query): \(answer.body)") }
        return (answer.seconds, total)
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    /// The page opening a directory of the folder (GET /rest/kaiten/ls), curl's time.
    func listing(_ directory: String) throws -> (seconds: Double, entries: Int) {
        let answer = try restGet(base + "/rest/kaiten/ls?folder=f&dir=" + directory, key: String(key))
        guard let entries = (answer.body as? [String: Any])?["entries"] as? [Any] else { throw HarnessError("ls: \(answer.body)") }
        return (answer.seconds, entries.count)
    }
    func find(_ arguments: [String]) throws -> Double {
        let start = now()
        let result = try ProcessRunner.run("/usr/bin/find", [tree] + arguments)
        guard result.status == 0 else { throw HarnessError("find: \(result.stderr)") }
        return now() - start
    }

    let name = (SyntheticIndex.path(of: paths * 7 / 9) as NSString).lastPathComponent
    let first = try search(name)
    let cases: [(label: String, query: String, find: [String])] = [
        ("one name", name, ["-name", name]),
        ("a glob (10 matches)", String(name.dropLast(5)) + "?.jpg", ["-name", String(name.dropLast(5)) + "?.jpg"]),
        ("text in every path", "photos", ["-path", "*photos*"]),
    ]
    print("## search: \(paths) paths, medians of \(runs) runs (release build; curl's time for the request)")
    print("| search | kaiten (GET /rest/kaiten/search) | find over the same paths on disk | goal |")
    print("| --- | --- | --- | --- |")
    print("| first search after the service started | \(String(format: "%.3f", first.seconds)) s (\(first.total) match) | | < 1 s |")
    for (label, directory) in [("the folder's root", ""), ("its largest directory", "photos")] {
        var times: [Double] = []
        var entries = 0
        for _ in 0..<runs {
            let listed = try listing(directory)
            times.append(listed.seconds)
            entries = listed.entries
        }
        print("| \(label) listed, as the page opens it (\(entries) entries; GET /rest/kaiten/ls) | \(String(format: "%.3f", median(times))) s | | < 1 s |")
    }
    for item in cases {
        var kaiten: [Double] = [], found: [Double] = []
        var total = 0
        for _ in 0..<runs {
            let answer = try search(item.query)
            kaiten.append(answer.seconds)
            total = answer.total
            found.append(try find(item.find))
        }
        print("| \(item.label) (\(total)) | \(String(format: "%.3f", median(kaiten))) s | \(String(format: "%.3f", median(found))) s | < 1 s |")
    }
}
