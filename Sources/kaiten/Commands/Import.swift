import ArgumentParser
import KaitenApp
import KaitenConfig
import KaitenIndex
import KaitenMedia
import KaitenProtocol
import KaitenScan
import KaitenSelection
import KaitenService
import KaitenSync
import KaitenTransfer
import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension Kaiten {
    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "import",
            abstract: "Copy new photos and videos into a folder by capture date, select them and send them.",
            discussion: """
                Copies each image and video under SRC (a mounted camera card, a phone's DCIM, a \
                download folder; hidden files skipped) into FOLDER (or FOLDER/SUBDIR) at --layout, \
                dated by EXIF DateTimeOriginal, else the video's creation time, else its \
                modification time. Each file lands through a temp file, fsynced, renamed without \
                replacing anything. Idempotent by content: a file whose content the folder has \
                (any name, in the global index or on disk) or had (imported before, deleted since: \
                state/imports/FOLDER.txt) is not imported again; two files of SRC with the same \
                content are imported once. A name taken by other content gets " (2)", never an \
                overwrite.

                Then the imported files are added to the selection and `kaiten apply` runs for \
                the folder (sendreceive or sendonly): they are announced and apply waits until \
                --require-peers peers hold them (exit 5 if --send-timeout passes first).

                --offload-after K then frees the space: each imported file that K peers hold \
                at its exact version is deselected and its local copy removed (the last-copy rule: \
                apply re-checks with the peers connected right now). --purge-source removes an \
                original from SRC only after that (and never when SRC is inside the folder).

                Examples:
                  kaiten import /media/card/DCIM photos --dry-run
                  kaiten import /media/card/DCIM photos/camera --layout '{yyyy}/{yyyy}-{mm}-{dd}/{name}'
                  kaiten import ~/Phone/DCIM photos --offload-after 2 --purge-source
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The directory to import from.")
        var source: String

        @Argument(help: "The folder ID, optionally with a subdirectory: photos or photos/camera.")
        var destination: String

        @Option(help: "Where each file goes: {yyyy}, {mm}, {dd}, {name}, {stem}, {ext}.")
        var layout: String = ImportLayout.standard

        @Flag(help: "Show what would be imported; change nothing.")
        var dryRun = false

        @Flag(help: "Copy and select only; send with a later `kaiten apply`.")
        var noSend = false

        @Option(help: "Peers that must hold what is sent before apply ends.")
        var requirePeers: Int = 1

        @Option(help: "Seconds to wait for the peers to hold what is sent (exit 5 after).")
        var sendTimeout: Double = 300

        @Option(help: ArgumentHelp("Once K peers hold an imported file, deselect it and remove the local copy.", valueName: "K"))
        var offloadAfter: Int?

        @Flag(help: "With --offload-after: then remove the original from SRC.")
        var purgeSource = false

        @Flag(help: "Print the import as JSON: {items: [{source, destination, decision, date, date_source, existing}]}.")
        var json = false

        func validate() throws {
            guard requirePeers >= 1 else { throw ValidationError("--require-peers must be at least 1") }
            if let offloadAfter, offloadAfter < 1 { throw ValidationError("--offload-after must be at least 1") }
            if purgeSource && offloadAfter == nil { throw ValidationError("--purge-source needs --offload-after: originals go only once peers hold the copies") }
        }

        struct Row: Encodable {
            var source: String
            var destination: String?
            var decision: String
            var date: String?
            var date_source: String?
            var existing: String?
            var error: String?
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                let (folder, subdirectory) = try Self.split(destination, in: opened)
                guard folder.type == .sendreceive || folder.type == .sendonly else {
                    throw ArgumentError("\(folder.id) is a \(folder.type.rawValue) folder: what is imported would never reach the peers (import into a sendreceive or sendonly folder)")
                }
                let sourceRoot = try Self.checkedSource(source, folder: folder)
                let layout = try ImportLayout(layout)
                let helpers = (try? MediaHelpers.locate()).map { MediaHelpers(executable: $0, count: 1) }
                if helpers == nil { Terminal.error("kaiten-media is not installed: videos are dated by their modification time") }
                let done = try await Importer.run(
                    source: sourceRoot, folder: folder, subdirectory: subdirectory, layout: layout, home: opened, dryRun: dryRun,
                    helpers: helpers)
                helpers?.close()
                let items = done.items
                let imported = done.imported
                let failed = done.failed
                let rows = items.map(Self.row)
                if !json { for item in items { Self.print(item, dryRun: dryRun) } }
                if json { try Terminal.json(["items": rows]) }
                let copies = items.filter { $0.decision == .copy }.count
                if !json {
                    Swift.print(
                        "\(dryRun ? "would import" : "imported") \(dryRun ? copies : imported.count) of \(items.count) files (\(items.count - copies - failed) already in \(folder.id) or repeated, \(failed) failed)"
                    )
                }
                if dryRun || imported.isEmpty {
                    if failed > 0 { throw ExitCode(1) }
                    return
                }
                if noSend {
                    if failed > 0 { throw ExitCode(1) }
                    return
                }
                let peers = max(requirePeers, offloadAfter ?? 1)
                try await ApplyVerb(folders: [folder.id], yes: true, json: json, requirePeers: peers, sendTimeout: sendTimeout, app: global.app)
                    .run()
                if let offloadAfter {
                    let offloaded = try await Offload.run(
                        folder: folder.id, paths: imported.map(\.destination), peers: offloadAfter, opened: opened, global: global, json: json)
                    if purgeSource {
                        let purged = Self.purge(imported.filter { offloaded.contains($0.destination) })
                        if !json { Swift.print("removed \(purged) original\(purged == 1 ? "" : "s") from \(sourceRoot)") }
                    }
                }
                if failed > 0 { throw ExitCode(1) }
            }
        }

        /// `photos/camera` → the folder `photos` and `camera`; the longest configured folder ID
        /// that the argument starts with wins (IDs may hold a '/').
        static func split(_ argument: String, in home: KaitenHome) throws -> (FolderConfiguration, String) {
            let trimmed = argument.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
            let candidates = home.config.folders.filter { trimmed == $0.id || trimmed.hasPrefix($0.id + "/") }
            guard let folder = candidates.max(by: { $0.id.count < $1.id.count }) else {
                throw ArgumentError("\(argument): no configured folder (see `kaiten folder ls`)")
            }
            let subdirectory = String(trimmed.dropFirst(folder.id.count)).trimmingCharacters(in: CharacterSet(charactersIn: "/"))
            if !subdirectory.isEmpty, let problem = Self.problem(subdirectory) {
                throw ArgumentError("\(argument): \(problem)")
            }
            return (folder, subdirectory.precomposedStringWithCanonicalMapping)
        }

        static func problem(_ path: String) -> String? {
            do {
                try SafePath.validate(path)
                return nil
            } catch {
                return error.hint
            }
        }

        /// The source, absolute: a directory that is neither inside the folder nor holds it.
        static func checkedSource(_ source: String, folder: FolderConfiguration) throws -> String {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw ArgumentError("\(source): not a directory")
            }
            let real = URL(fileURLWithPath: source).resolvingSymlinksInPath().path
            let folderReal = URL(fileURLWithPath: folder.path).resolvingSymlinksInPath().path
            if real == folderReal || real.hasPrefix(folderReal + "/") || folderReal.hasPrefix(real + "/") {
                throw ArgumentError("\(source) and the folder \(folder.id) (\(folder.path)) overlap: import from outside the folder")
            }
            return real
        }

        static func row(_ item: ImportItem) -> Row {
            var row = Row(source: item.source, destination: nil, decision: "", date: nil, date_source: item.date?.source.rawValue)
            if let date = item.date { row.date = String(format: "%04d-%02d-%02d", date.year, date.month, date.day) }
            switch item.decision {
            case .copy:
                row.decision = item.renamed ? "import-renamed" : "import"
                row.destination = item.destination
            case .alreadyThere(let existing):
                row.decision = "already-there"
                row.existing = existing
            case .duplicate(let first):
                row.decision = "duplicate"
                row.existing = first
            case .failed(let why):
                row.decision = "failed"
                row.error = why
            }
            return row
        }

        static func print(_ item: ImportItem, dryRun: Bool) {
            switch item.decision {
            case .copy:
                let how = item.date.map { " (\($0.source.rawValue) date)" } ?? ""
                Swift.print("+ \(item.destination)  ← \(item.source)\(how)\(item.renamed ? ", renamed: the name was taken" : "")")
            case .alreadyThere(let existing):
                Swift.print("= \(item.source): already in the folder as \(existing)")
            case .duplicate(let first):
                Swift.print("= \(item.source): the same content as \(first)")
            case .failed(let why):
                Terminal.error("\(item.source): \(why)")
            }
        }

        /// Removes originals whose copies the peers hold, each only if it is still the content
        /// that was imported. The count removed.
        static func purge(_ items: [ImportItem]) -> Int {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
            defer { buffer.deallocate() }
            var removed = 0
            for item in items {
                guard let (_, hash) = try? FolderScanner.hashFile(item.source, blockSize: Int(BlockSize.forFileSize(item.size)), buffer: buffer),
                    hash == item.hash
                else {
                    Terminal.error("\(item.source): changed since it was imported; kept")
                    continue
                }
                if unlink(item.source) == 0 { removed += 1 } else { Terminal.error("\(item.source): \(String(cString: strerror(errno)))") }
            }
            return removed
        }
    }

    struct OffloadCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "offload",
            abstract: "Free the space of imported files the peers hold: deselect them, remove the local copies.",
            discussion: """
                For each file `kaiten import` put into FOLDER that is still selected: once \
                --peers peers hold its exact version (the index, refreshed now), it is deselected \
                and `kaiten apply` removes the local copy — which apply re-checks against the \
                peers connected at that moment, so a file no peer holds is never removed. Files \
                not yet held stay selected and local; run it again later.

                Examples:
                  kaiten offload photos
                  kaiten offload photos --peers 2
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Option(help: "Peers that must hold a file's exact version.")
        var peers: Int = 1

        @Flag(help: "apply's JSON events.")
        var json = false

        func validate() throws {
            guard peers >= 1 else { throw ValidationError("--peers must be at least 1") }
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                _ = try App.folders([folder], in: opened)
                let record = ImportRecord(home: opened.home, folder: folder)
                _ = try await Offload.run(folder: folder, paths: record.entries.map(\.path), peers: peers, opened: opened, global: global, json: json)
            }
        }
    }
}

/// Deselect what K peers hold, then apply: the offload shared by `import --offload-after` and `offload`.
enum Offload {
    /// The paths deselected and applied.
    static func run(folder: String, paths: [String], peers: Int, opened: KaitenHome, global: GlobalOptions, json: Bool) async throws -> Set<String> {
        if ControlClient.running(opened.home) == nil {
            let reports = try await IndexSync.run(home: opened, folders: [folder], logger: global.logger, warn: { Terminal.error($0) })
            if reports.contains(where: { !$0.ok }) && !json { Terminal.error("some peers did not answer; their copies do not count") }
        }
        let (deselectedPaths, waiting) = try Importer.deselectHeld(home: opened, folder: folder, paths: paths, peers: peers)
        let deselected = Set(deselectedPaths)
        if json {
            // Said even when nothing is to be done: a script reads one event either way.
            ApplyOutput(json: true).emit(["type": "offload", "folder": folder, "deselected": deselected.count, "waiting": waiting, "peers": peers])
        } else {
            print("offload: \(deselected.count) held by \(peers) peer\(peers == 1 ? "" : "s") and deselected; \(waiting) not yet held, kept")
        }
        guard !deselected.isEmpty else { return [] }
        try await ApplyVerb(folders: [folder], yes: true, json: json, maxDelete: "100%", requirePeers: peers, app: global.app).run()
        return deselected
    }
}
