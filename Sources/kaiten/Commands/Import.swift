import ArgumentParser
import KaitenApp
import KaitenTerminal
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

        func run() async throws {
            try await reportingErrors {
                var request = ImportRequest(source: source, destination: destination)
                request.layout = layout
                request.dryRun = dryRun
                request.send = !noSend
                request.requirePeers = requirePeers
                request.sendTimeout = sendTimeout
                request.offloadAfter = offloadAfter
                request.purgeSource = purgeSource
                var sourceRoot = source
                let purged = try await global.app.importMedia(
                    request,
                    copied: { copy in
                        sourceRoot = copy.sourceRoot
                        if json {
                            try? Terminal.json(["items": copy.items.map(ImportItemDocument.init)])
                            return
                        }
                        for item in copy.items {
                            if let line = MediaView.line(item) { Swift.print(line) }
                            if case .failed(let why) = item.decision { Terminal.error("\(item.source): \(why)") }
                        }
                        Swift.print(MediaView.summary(copy, dryRun: dryRun))
                    },
                    applying: { try await ApplyVerb(request: $0, yes: true, json: json, app: global.app).run() },
                    offloaded: { OffloadCommand.say($0, json: json) })
                if let purged, !json { Swift.print("removed \(purged) original\(purged == 1 ? "" : "s") from \(sourceRoot)") }
            }
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
                _ = try await global.app.offload(
                    folder, peers: peers, applying: { try await ApplyVerb(request: $0, yes: true, json: json, app: global.app).run() },
                    step: { Self.say($0, json: json) })
            }
        }

        /// An offload's step: one JSON event (said even when nothing is to be done: a script
        /// reads one either way), or a line.
        static func say(_ step: OffloadStep, json: Bool) {
            if json { ApplyOutput(json: true).emit(MediaView.event(step)) } else { print(MediaView.line(step)) }
        }
    }
}
