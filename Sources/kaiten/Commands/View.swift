import ArgumentParser
import KaitenApp
import KaitenConfig
import KaitenMedia
import KaitenSync
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
                    let opened = try global.openHome()
                    guard let config = opened.config.folders.first(where: { $0.id == folder }) else {
                        throw ArgumentError("\(folder): no such folder (see `kaiten folder ls`)")
                    }
                    guard config.type == .sendonly else {
                        throw ArgumentError("\(folder) is \(config.type.rawValue): a view is announced as a sendonly folder (kaiten folder add ID --path DIR --type sendonly)")
                    }
                    _ = try ImportLayout(layout)
                    let sourcePath = try Import.checkedSource(source, folder: config)
                    if let existing = try ViewDefinition.load(opened.home, folder: folder) {
                        throw ArgumentError("\(folder) is already the view of \(existing.source) (kaiten view rm \(folder) first)")
                    }
                    let present = ((try? FileManager.default.contentsOfDirectory(atPath: config.path)) ?? [])
                        .filter { ![".stfolder", ".stignore", ".stversions"].contains($0) }
                    guard present.isEmpty else {
                        throw ArgumentError("\(config.path) holds \(present.count) entr\(present.count == 1 ? "y" : "ies") (\(present.prefix(3).joined(separator: ", "))): a view's directory must be empty")
                    }
                    try FileManager.default.createDirectory(atPath: config.path + "/.stfolder", withIntermediateDirectories: true)
                    var sourceInfo = stat()
                    var folderInfo = stat()
                    guard stat(sourcePath, &sourceInfo) == 0, stat(config.path, &folderInfo) == 0, sourceInfo.st_dev == folderInfo.st_dev else {
                        throw ArgumentError("\(sourcePath) and \(config.path) are on different file systems: a view links its files and needs one")
                    }
                    try ViewDefinition(source: sourcePath, layout: layout).save(opened.home, folder: folder)
                    print("\(folder) is now the view of \(sourcePath) (\(layout))")
                    try await View.syncAndSend(folder, opened: opened, send: !noSend, app: global.app)
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
                    let opened = try global.openHome()
                    let ids = folders.isEmpty
                        ? opened.config.folders.map(\.id).filter { (try? ViewDefinition.load(opened.home, folder: $0)) != nil } : folders
                    guard !ids.isEmpty else {
                        print("no view folders (kaiten view add FOLDER --source DIR makes one)")
                        return
                    }
                    for id in ids { try await View.syncAndSend(id, opened: opened, send: !noSend, app: global.app) }
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
                    let opened = try global.openHome()
                    guard try ViewDefinition.load(opened.home, folder: folder) != nil else { throw ArgumentError("\(folder) is not a view") }
                    ViewDefinition.remove(opened.home, folder: folder)
                    print("\(folder) is no longer a view; its files stay as they are")
                }
            }
        }

        /// Links the view, selects its top-level entries (so that all of it is sent), and applies.
        static func syncAndSend(_ folder: String, opened: KaitenHome, send: Bool, app: App) async throws {
            let report = try await sync(folder, opened: opened)
            for (path, why) in report.failed { Terminal.error("\(folder)/\(path): \(why)") }
            print(
                "\(folder): \(report.linked.count) linked, \(report.relinked.count) linked again (replaced in the source), \(report.removed.count) removed (gone from the source), \(report.kept) unchanged"
            )
            if !report.foreign.isEmpty {
                Terminal.error("\(folder): \(report.foreign.count) file\(report.foreign.count == 1 ? "" : "s") in the view that Kaiten did not link, left alone (\(report.foreign.prefix(3).joined(separator: ", ")))")
            }
            if send { try await ApplyVerb(folders: [folder], yes: true, app: app).run() }
            if !report.failed.isEmpty { throw ExitCode(1) }
        }

        /// The view's links, and its top-level entries selected: what `view sync` and `run` do.
        static func sync(_ folder: String, opened: KaitenHome) async throws -> ViewFolder.Report {
            guard let definition = try ViewDefinition.load(opened.home, folder: folder) else { throw ArgumentError("\(folder) is not a view") }
            guard let config = opened.config.folders.first(where: { $0.id == folder }) else {
                throw ArgumentError("\(folder): no such folder (see `kaiten folder ls`)")
            }
            let helpers = (try? MediaHelpers.locate()).map { MediaHelpers(executable: $0, count: 1) }
            defer { helpers?.close() }
            let report = try await ViewFolder.sync(definition, home: opened.home, folder: folder, root: config.path, helpers: helpers)
            try Importer.selectPaths(report.topLevel, folder: folder, home: opened)
            return report
        }
    }
}
