import ArgumentParser
import KaitenApp
import KaitenTerminal
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

extension Kaiten {
    struct View: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "View folders: a sendonly folder that shows a source directory's media by date, nothing copied.",
            discussion: """
                A view folder's files are hard links to the media of a source directory, laid out \
                by --layout (capture date: EXIF, a video's creation time, else mtime). Peers get \
                them as from any sendonly folder; every block is read from the source file itself \
                and checked against what was announced before it is sent. A file removed from the \
                source leaves the view (and is deleted on the peers); a new one joins it. The \
                definition is kept in Kaiten's state (state/views/FOLDER.json); config.xml holds a \
                plain sendonly folder syncthing itself would load.

                The view and its source must be on one file system. Only the links Kaiten made are \
                ever removed from the view's directory. `kaiten run` keeps every view current.

                Examples:
                  kaiten folder add photo-view --path ~/Views/photos --type sendonly --share nas
                  kaiten view add photo-view --source ~/Pictures --layout '{yyyy}/{mm}/{name}'
                  kaiten view sync photo-view
                """,
            subcommands: [Add.self, Sync.self, Remove.self])

        struct Add: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Make a sendonly folder the view of a source directory, link it, and send it.",
                discussion: """
                    The folder must be sendonly and its directory empty (or hold only .stfolder, \
                    .stignore): a view never mixes with other files.

                    Example:
                      kaiten view add photo-view --source ~/Pictures
                    """)

            @OptionGroup var global: GlobalOptions

            @Argument(help: "The folder ID (a sendonly folder).")
            var folder: String

            @Option(help: ArgumentHelp("The directory whose media the view shows.", valueName: "dir"))
            var source: String

            @Option(help: "Where each file appears: {yyyy}, {mm}, {dd}, {name}, {stem}, {ext}.")
            var layout: String = ImportLayout.standard

            @Flag(help: "Link only; send with a later `kaiten apply`.")
            var noSend = false

            func run() async throws {
                try await reportingErrors {
                    let sourcePath = try global.app.addView(folder, source: source, layout: layout)
                    print("\(folder) is now the view of \(sourcePath) (\(layout))")
                    try await View.syncAndSend(folder, send: !noSend, app: global.app)
                }
            }
        }

        struct Sync: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Bring views up to date with their sources, and send what changed.",
                discussion: """
                    Example:
                      kaiten view sync photo-view
                    """)

            @OptionGroup var global: GlobalOptions

            @Argument(help: "View folders (all when none).")
            var folders: [String] = []

            @Flag(help: "Link only; send with a later `kaiten apply`.")
            var noSend = false

            func run() async throws {
                try await reportingErrors {
                    let ids = try global.app.viewFolders(folders)
                    guard !ids.isEmpty else {
                        print("no view folders (kaiten view add FOLDER --source DIR makes one)")
                        return
                    }
                    for id in ids { try await View.syncAndSend(id, send: !noSend, app: global.app) }
                }
            }
        }

        struct Remove: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "rm",
                abstract: "Stop a folder being a view (its links stay; the source is untouched).",
                discussion: """
                    Example:
                      kaiten view rm photo-view
                    """)

            @OptionGroup var global: GlobalOptions

            @Argument(help: "The folder ID.")
            var folder: String

            func run() async throws {
                try await reportingErrors {
                    try global.app.removeView(folder)
                    print("\(folder) is no longer a view; its files stay as they are")
                }
            }
        }

        /// Links the view, selects its top-level entries (so that all of it is sent), and applies.
        static func syncAndSend(_ folder: String, send: Bool, app: App) async throws {
            let report = try await app.syncView(
                folder, send: send,
                linked: { report in
                    for (path, why) in report.failed { Terminal.error("\(folder)/\(path): \(why)") }
                    print(MediaView.summary(report, folder: folder))
                    if let foreign = MediaView.foreign(report, folder: folder) { Terminal.error(foreign) }
                },
                applying: { try await ApplyVerb(request: $0, yes: true, app: app).run() })
            if !report.failed.isEmpty { throw VerbEnded(.failure) }
        }
    }
}
