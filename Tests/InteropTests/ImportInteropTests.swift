import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// `kaiten import` and `kaiten offload` against a real syncthing peer (issue 14, part 2): a
/// synthetic camera card (JPEGs with EXIF dates made by exiftool, a video with a creation time,
/// a duplicate, content the folder has, a name clash), the peer receiving every imported file,
/// an import that is idempotent, and offload freeing space only once the peer holds the copies
/// (with the peer stopped, nothing is removed).
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct ImportInteropTests {
    static let folder = ApplyInteropTests.folder
    typealias World = ApplyInteropTests.World

    struct Items: Decodable {
        struct Item: Decodable {
            var source: String
            var destination: String?
            var decision: String
            var date: String?
            var date_source: String?
            var existing: String?
        }

        var items: [Item]
    }

    @Test func aCameraCardImportedSentAndOffloaded() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-import")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        // The peer already has a picture under the name the card's first one will want, and one
        // with the content of the card's "known.jpg" under another name.
        try TestMedia.png(world.peerData + "/2024/05/IMG_0001.JPG", width: 64, height: 64)
        try TestMedia.jpeg(world.peerData + "/old/known.jpg", width: 320, height: 240)
        let card = dir.file("card/DCIM/100CANON")
        try TestMedia.jpeg(card + "/IMG_0001.JPG", width: 800, height: 600, noise: true)
        try TestMedia.exif(card + "/IMG_0001.JPG", dateTimeOriginal: "2024:05:06 07:08:09")
        try TestMedia.jpeg(card + "/IMG_0002.JPG", width: 640, height: 480, noise: true)
        try TestMedia.exif(card + "/IMG_0002.JPG", dateTimeOriginal: "2023:12:31 23:59:00")
        try FileManager.default.copyItem(atPath: card + "/IMG_0002.JPG", toPath: card + "/IMG_0002_copy.JPG")
        try FileManager.default.copyItem(atPath: world.peerData + "/old/known.jpg", toPath: card + "/known.jpg")
        try TestMedia.ffmpeg(["-f", "lavfi", "-i", "testsrc=duration=2:size=320x240:rate=25", "-c:v", "libx264", "-preset", "ultrafast",
                              "-metadata", "creation_time=2022-01-02T12:04:05Z", card + "/MVI_0003.MP4"])
        try TestFiles.write(card + "/notes.txt", "not a picture\n")
        try TestMedia.jpeg(dir.file("card/DCIM/.thumbnails/t.jpg"), width: 16, height: 16)

        try await withSyncthing(st) { st in
            try await world.share(st, files: 2)
            // Dry run: the decisions, nothing written.
            let dry = try world.kaiten("import", dir.file("card"), Self.folder, "--dry-run", "--json")
            let documented = try DocumentedJSON.problems(stdout: dry.stdout, at: "kaiten import")
            #expect(documented.isEmpty, "\(documented.joined(separator: "\n"))")
            #expect(dry.status == 0, "\(dry.stderr)")
            let planned = try JSONDecoder().decode(Items.self, from: Data(dry.stdout.utf8)).items
            var by: [String: Items.Item] = [:]
            for item in planned { by[(item.source as NSString).lastPathComponent] = item }
            #expect(Set(by.keys) == ["IMG_0001.JPG", "IMG_0002.JPG", "IMG_0002_copy.JPG", "known.jpg", "MVI_0003.MP4"])
            #expect(by["IMG_0001.JPG"]?.decision == "import-renamed" && by["IMG_0001.JPG"]?.destination == "2024/05/IMG_0001 (2).JPG")
            #expect(by["IMG_0001.JPG"]?.date_source == "exif")
            #expect(by["IMG_0002.JPG"]?.destination == "2023/12/IMG_0002.JPG" && by["IMG_0002.JPG"]?.date == "2023-12-31")
            #expect(by["IMG_0002_copy.JPG"]?.decision == "duplicate" && by["IMG_0002_copy.JPG"]?.existing == "2023/12/IMG_0002.JPG")
            #expect(by["known.jpg"]?.decision == "already-there" && by["known.jpg"]?.existing == "old/known.jpg")
            #expect(by["MVI_0003.MP4"]?.destination == "2022/01/MVI_0003.MP4" && by["MVI_0003.MP4"]?.date_source == "video")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/2023"))

            // The import: copied, selected, sent; the peer holds every file, byte-identical.
            let imported = try world.kaiten("import", dir.file("card"), Self.folder)
            #expect(imported.status == 0, "\(imported.stdout)\(imported.stderr)")
            let names = ["2024/05/IMG_0001 (2).JPG", "2023/12/IMG_0002.JPG", "2022/01/MVI_0003.MP4"]
            for name in names {
                #expect(ApplyInteropTests.sha(world.local + "/" + name) != nil, "\(name) here")
                #expect(ApplyInteropTests.sha(world.peerData + "/" + name) == ApplyInteropTests.sha(world.local + "/" + name), "\(name) on the peer")
            }
            #expect(ApplyInteropTests.sha(world.local + "/2023/12/IMG_0002.JPG") == ApplyInteropTests.sha(card + "/IMG_0002.JPG"))
            // The peer's own picture under the taken name is untouched.
            #expect(ApplyInteropTests.sha(world.peerData + "/2024/05/IMG_0001.JPG") != ApplyInteropTests.sha(card + "/IMG_0001.JPG"))
            let selection = try String(contentsOfFile: world.home + "/selections/\(Self.folder).txt", encoding: .utf8)
            for name in names { #expect(selection.contains(name), "\(selection)") }

            // Again: nothing new.
            let again = try world.kaiten("import", dir.file("card"), Self.folder)
            #expect(again.status == 0 && again.stdout.contains("imported 0 of 5 files"), "\(again.stdout)")

            // Offload: every imported file the peer holds is deselected, its local copy removed.
            let offload = try world.kaiten("offload", Self.folder)
            #expect(offload.status == 0, "\(offload.stdout)\(offload.stderr)")
            for name in names {
                #expect(!FileManager.default.fileExists(atPath: world.local + "/" + name), "\(name) freed")
                #expect(FileManager.default.fileExists(atPath: world.peerData + "/" + name), "\(name) still on the peer")
            }
            // Deleted on the peer since, it is still not imported again.
            try FileManager.default.removeItem(atPath: world.peerData + "/2023/12/IMG_0002.JPG")
        }

        // The peer is stopped: a new picture is imported and kept, selected, and so is its original.
        let card2 = dir.file("card2")
        try TestMedia.jpeg(card2 + "/IMG_0004.JPG", width: 400, height: 300, noise: true)
        try TestMedia.exif(card2 + "/IMG_0004.JPG", dateTimeOriginal: "2025:01:02 03:04:05")
        let offline = try world.kaiten("import", card2, Self.folder, "--offload-after", "1", "--purge-source", "--send-timeout", "3")
        // Copied and announced; not held by any peer: exit 5, as apply says it.
        #expect(offline.status == 5 && offline.stderr.contains("NOT YET HELD"), "\(offline.stdout)\(offline.stderr)")
        #expect(FileManager.default.fileExists(atPath: world.local + "/2025/01/IMG_0004.JPG"))
        #expect(FileManager.default.fileExists(atPath: card2 + "/IMG_0004.JPG"))
        let offloadOffline = try world.kaiten("offload", Self.folder)
        #expect(offloadOffline.stdout.contains("0 held by 1 peer and deselected; 1 not yet held, kept"), "\(offloadOffline.stdout)")
        // --json says it too, as one event, when there is nothing to do.
        let offloadJSON = ApplyInteropTests.json(try world.kaiten("offload", Self.folder, "--json").stdout)
        #expect(offloadJSON.count == 1 && offloadJSON.first?["type"] as? String == "offload", "\(offloadJSON)")
        #expect(offloadJSON.first?["deselected"] as? Int == 0 && offloadJSON.first?["waiting"] as? Int == 1, "\(offloadJSON)")
        #expect(FileManager.default.fileExists(atPath: world.local + "/2025/01/IMG_0004.JPG"))

        try await withSyncthing(st) { st in
            // Back: the card re-imported changes nothing (IMG_0002 was deleted on the peer).
            let again = try world.kaiten("import", dir.file("card"), Self.folder)
            #expect(again.status == 0 && again.stdout.contains("imported 0 of 5 files"), "\(again.stdout)\(again.stderr)")
            // A third card, with the peer up: sent, held, freed here, and the original removed.
            let card3 = dir.file("card3")
            try TestMedia.jpeg(card3 + "/IMG_0005.JPG", width: 400, height: 300, noise: true)
            try TestMedia.exif(card3 + "/IMG_0005.JPG", dateTimeOriginal: "2025:02:03 04:05:06")
            let full = try world.kaiten("import", card3, Self.folder, "--offload-after", "1", "--purge-source")
            #expect(full.status == 0, "\(full.stdout)\(full.stderr)")
            #expect(FileManager.default.fileExists(atPath: world.peerData + "/2025/02/IMG_0005.JPG"))
            #expect(!FileManager.default.fileExists(atPath: world.local + "/2025/02/IMG_0005.JPG"))
            #expect(!FileManager.default.fileExists(atPath: card3 + "/IMG_0005.JPG"))
            // The picture imported while the peer was away goes once it is sent and held.
            let delivered = try world.kaiten("apply", "--yes")
            #expect(delivered.status == 0, "\(delivered.stdout)\(delivered.stderr)")
            // Apply delivers what was sent while the peer was away: held when it returns.
            #expect(ApplyInteropTests.sha(world.peerData + "/2025/01/IMG_0004.JPG") == ApplyInteropTests.sha(world.local + "/2025/01/IMG_0004.JPG"))
            let later = try world.kaiten("offload", Self.folder)
            #expect(later.status == 0, "\(later.stdout)\(later.stderr)")
            #expect(FileManager.default.fileExists(atPath: world.peerData + "/2025/01/IMG_0004.JPG"))
            #expect(!FileManager.default.fileExists(atPath: world.local + "/2025/01/IMG_0004.JPG"))
        }
    }

    /// `kaiten run --import CARD:FOLDER`: nothing while the card is absent; inserted (the
    /// directory appears with pictures), they are imported and the service's next round sends
    /// them to the peer; a second card's pictures follow, the first card's are not imported again.
    @Test func theServiceImportsACardWhenItAppears() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-import-run")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/x.txt", "x\n")
        let mount = dir.file("media/card")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            let running = try RunInteropTests.Running.start(
                home: world.home, logPath: dir.file("run.log"),
                // An offloading folder frees most of what it holds: the brake is opened for it.
                ["--import", "\(mount):\(Self.folder)/camera", "--apply", "safe", "--offload-after", "1", "--max-delete", "100%"])
            defer { running.stop() }
            try await RunInteropTests.waitFor("the service is up", log: running) { running.log.contains("running: folders") }
            // The card is inserted: a staging directory renamed into place, as a mount appears at once.
            try TestMedia.jpeg(dir.file("staging/DCIM/IMG_0101.JPG"), width: 320, height: 240, noise: true)
            try TestMedia.exif(dir.file("staging/DCIM/IMG_0101.JPG"), dateTimeOriginal: "2024:08:09 10:11:12")
            try FileManager.default.createDirectory(atPath: dir.file("media"), withIntermediateDirectories: true)
            try FileManager.default.moveItem(atPath: dir.file("staging"), toPath: mount)
            let landed = world.peerData + "/camera/2024/08/IMG_0101.JPG"
            try await RunInteropTests.waitFor("the peer holds the imported picture", timeout: 90, log: running) {
                ApplyInteropTests.sha(landed) != nil && ApplyInteropTests.sha(landed) == ApplyInteropTests.sha(mount + "/DCIM/IMG_0101.JPG")
            }
            #expect(running.log.contains("imported 1 of 1 files from \(mount)"), "\(running.log)")
            // Another card in the same slot: only what is new is imported.
            try FileManager.default.moveItem(atPath: mount, toPath: dir.file("first-card"))
            try TestMedia.jpeg(dir.file("staging2/DCIM/IMG_0102.JPG"), width: 320, height: 240, noise: true)
            try TestMedia.exif(dir.file("staging2/DCIM/IMG_0102.JPG"), dateTimeOriginal: "2024:08:10 10:11:12")
            try FileManager.default.copyItem(atPath: dir.file("first-card/DCIM/IMG_0101.JPG"), toPath: dir.file("staging2/DCIM/IMG_0101.JPG"))
            try FileManager.default.moveItem(atPath: dir.file("staging2"), toPath: mount)
            try await RunInteropTests.waitFor("the second card's new picture reaches the peer", timeout: 90, log: running) {
                ApplyInteropTests.sha(world.peerData + "/camera/2024/08/IMG_0102.JPG") != nil
            }
            #expect(running.log.contains("imported 1 of 2 files from \(mount)"), "\(running.log)")
            // --offload-after 1: once the peer holds them, the local copies go; the peer keeps them.
            try await RunInteropTests.waitFor("the imported pictures are freed here", timeout: 90, log: running) {
                !FileManager.default.fileExists(atPath: world.local + "/camera/2024/08/IMG_0101.JPG")
                    && !FileManager.default.fileExists(atPath: world.local + "/camera/2024/08/IMG_0102.JPG")
            }
            #expect(ApplyInteropTests.sha(world.peerData + "/camera/2024/08/IMG_0101.JPG") != nil)
            #expect(ApplyInteropTests.sha(world.peerData + "/camera/2024/08/IMG_0102.JPG") != nil)
            #expect(running.log.contains("held by 1 peer: deselected, freed by the next round"), "\(running.log)")
        }
    }

    /// A source inside the folder, and a receiveonly folder, are refused before anything is written.
    @Test func refusals() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-import")
        defer { dir.remove() }
        let world = try World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/x.txt", "x\n")
        try await withSyncthing(st) { st in
            try await world.share(st, files: 1)
            try TestMedia.jpeg(world.local + "/inbox/a.jpg", width: 32, height: 32)
            let inside = try world.kaiten("import", world.local + "/inbox", Self.folder)
            #expect(inside.status == 64 && inside.stderr.contains("overlap"), "\(inside.stderr)")
            let unknown = try world.kaiten("import", dir.file("nowhere"), Self.folder)
            #expect(unknown.status == 64 && unknown.stderr.contains("not a directory"), "\(unknown.stderr)")
            try TestMedia.jpeg(dir.file("card/b.jpg"), width: 32, height: 32)
            let layout = try world.kaiten("import", dir.file("card"), Self.folder, "--layout", "{yyyy}/{foo}")
            #expect(layout.status != 0, "\(layout.stderr)")
        }
    }
}
