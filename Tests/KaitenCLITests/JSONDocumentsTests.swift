import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Docs/json.md is the one description of every verb's `--json` document: each verb is run on a
/// home with a folder, a peer and an index, and the keys it prints are held against the page (no
/// key printed that the page does not list; every key the page marks always-present printed).
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct JSONDocumentsTests {
    static let nas = "LXONAJ2-BUJHTRL-4AZYOG4-5H4JWNG-XA4OJHO-JEGBUIY-D5N2DL5-KCJ33AQ"

    @Test func everyVerbsJSONIsTheDocumentedOne() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-json")
        defer { dir.remove() }
        let home = dir.file("home")
        func kaiten(_ args: [String], allow: Set<Int32> = [0]) throws -> Any {
            let result = try KaitenCLI.run(args + ["--home", home])
            #expect(allow.contains(result.status), "\(args): \(result.status) \(result.stderr)")
            let text = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            // One document, or (apply's, index sync's events) one per line.
            if let whole = try? JSONSerialization.jsonObject(with: Data(text.utf8)) { return whole }
            return try text.split(separator: "\n").map { try JSONSerialization.jsonObject(with: Data($0.utf8)) }
        }
        let data = dir.file("photos")
        var outputs: [(String, Any)] = []
        outputs.append(("kaiten init", try kaiten(["init", "--name", "ci", "--listen", "tcp://127.0.0.1:0", "--json"])))
        outputs.append(("kaiten id", try kaiten(["id", "--json"])))
        #expect(try KaitenCLI.run(["peer", "add", Self.nas, "--name", "nas", "--address", "tcp://127.0.0.1:1", "--home", home]).status == 0)
        #expect(try KaitenCLI.run(["folder", "add", "photos", "--path", data, "--share", "nas", "--home", home]).status == 0)

        // The peer's index: a directory, a file in it, a file elsewhere, a deleted file.
        let nas = try DeviceID(Self.nas)
        func entry(_ name: String, _ type: BEPFileInfoType, size: Int64 = 0, deleted: Bool = false) -> BEPFileInfo {
            var file = BEPFileInfo()
            file.name = name
            file.type = type
            file.size = size
            file.deleted = deleted
            file.sequence = 1
            file.modifiedS = 1_700_000_000
            var counter = BEPCounter()
            counter.id = nas.shortID
            counter.value = 1
            file.version.counters = [counter]
            if type == .file && !deleted {
                var block = BEPBlockInfo()
                block.size = Int32(size)
                block.hash = Data(repeating: 1, count: 32)
                file.blocks = [block]
                file.blockSize = 128 << 10
            }
            return file
        }
        let logPath = Home(path: home).indexLogPath(folderID: "photos")
        try FileManager.default.createDirectory(atPath: (logPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let log = try IndexLog.open(path: logPath, folderID: "photos")
        try log.apply(
            device: nas, indexID: 7,
            files: [entry("2025", .directory), entry("2025/a.jpg", .file, size: 100), entry("b.txt", .file, size: 5), entry("gone.txt", .file, deleted: true)],
            isFullIndex: true)
        log.close()
        #expect(try KaitenCLI.run(["select", "photos", "2025", "--home", home]).status == 0)
        try "only here\n".write(toFile: data + "/notes.txt", atomically: true, encoding: .utf8)

        outputs.append(("kaiten peer ls", try kaiten(["peer", "ls", "--json"])))
        outputs.append(("kaiten folder ls", try kaiten(["folder", "ls", "--json"])))
        outputs.append(("kaiten status", try kaiten(["status", "--json"])))
        outputs.append(("kaiten ls", try kaiten(["ls", "photos", "-R", "--deleted", "--json"])))
        outputs.append(("kaiten free", try kaiten(["free", "photos", "2025", "b.txt", "--json"])))
        outputs.append(("kaiten plan", try kaiten(["plan", "--offline", "--json", "--out", dir.file("p.plan")])))
        // A saved plan is the document plan printed: the same tables.
        outputs.append(("kaiten plan", try kaiten(["show", dir.file("p.plan"), "--json"])))
        outputs.append(("kaiten conflicts", try kaiten(["conflicts", "--json"])))
        // Unreachable (port 1): each peer's result says so, exit 1.
        outputs.append(("kaiten peer check", try kaiten(["peer", "check", "--timeout", "2", "--json"], allow: [1])))
        outputs.append(("kaiten index sync", try kaiten(["index", "sync", "--timeout", "2", "--json"], allow: [1])))

        let pages = try DocumentedJSON.tables()
        var seen: Set<String> = []
        for (path, value) in outputs {
            let (problems, used) = DocumentedJSON.problems(value, at: path, tables: pages)
            #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
            seen.formUnion(used)
        }
        // A table for something no verb printed here is a page out of date or a verb not run.
        let unseen = Set(pages.keys).subtracting(seen)
        let unexplained = unseen.filter { path in !Self.notRunHere.contains { path.hasPrefix($0) } }
        #expect(unexplained.isEmpty, "documented but not printed: \(unexplained.sorted())")
        if ProcessInfo.processInfo.environment["KAITEN_JSON_DUMP"] != nil {
            for (path, value) in outputs {
                let data = try JSONSerialization.data(withJSONObject: value, options: [.prettyPrinted, .sortedKeys])
                print("== \(path)\n" + String(decoding: data, as: UTF8.self))
            }
        }
    }

    /// Documents this home cannot make without a live peer, media or a service (ImportInteropTests
    /// and MediaInteropTests hold theirs against the page), and parts printed only then: this device's own index
    /// (after it announced one) and renames followed (a peer's rename under `--follow-renames`).
    static let notRunHere = [
        "kaiten import", "kaiten thumb", "kaiten status[].announced", "kaiten plan.folders[].renames[]",
        // A running mount's record (MountInteropTests).
        "kaiten status[].mounts[]",
        // A folder an untrusted device stored (EncryptedFolderInteropTests).
        "kaiten decrypt",
    ]
}
