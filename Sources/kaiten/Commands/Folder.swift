import ArgumentParser
import KaitenApp
import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenSync

extension Kaiten {
    struct Folder: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add, share, unshare, remove and list folders.",
            subcommands: [Add.self, Share.self, Unshare.self, Remove.self, List.self])

        /// The folder `id` of config.xml, or the error that says it is not configured.
        static func configured(_ id: String, in config: ConfigFile) throws -> FolderConfiguration {
            guard let folder = config.folder(id: id) else {
                throw ConfigError(.unknownFolder, file: config.path, "folder \"\(id)\" is not configured")
            }
            return folder
        }
    }
}

extension Kaiten.Folder {
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a folder to config.xml.",
            discussion: """
                The folder ID must be the same on every device sharing it. Every field syncthing \
                reads is written out (a field syncthing finds missing becomes zero: maxConflicts 0 \
                would delete conflicting files). If --path does not exist it is created together \
                with its .stfolder marker; an existing directory is left as it is.

                Example:
                  kaiten folder add photos --path ~/Photos --label Photos --share PEER-ID
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID, as on the other devices.")
        var folderID: String

        @Option(help: "Where the folder lives on this machine.")
        var path: String

        @Option(help: "A human label. When omitted: the folder ID.")
        var label: String?

        @Option(help: "receiveonly, sendreceive or sendonly. When omitted: sendreceive, as in syncthing.")
        var type: String = "sendreceive"

        @Option(
            name: .customLong("share"),
            help: ArgumentHelp("A configured peer to share the folder with, by device ID or name; repeatable.", valueName: "peer"))
        var shares: [String] = []

        func validate() throws {
            guard !folderID.isEmpty, !folderID.contains("/"), folderID.trimmingCharacters(in: .whitespaces) == folderID
            else {
                throw ValidationError("the folder ID must be non-empty, without '/' or surrounding spaces")
            }
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                guard let folderType = FolderType(configValue: type), folderType != .receiveencrypted else {
                    // A mistake in the argument, not in config.xml: a usage error, exit 64.
                    throw ArgumentError("--type \(type): not a folder type Kaiten adds (receiveonly, sendreceive or sendonly)")
                }
                var devices = [opened.identity.deviceID]
                for text in shares { devices.append(try opened.config.resolveDevice(text)) }
                let absolutePath = Home(path: path).path
                let folder = FolderConfiguration(
                    id: folderID, label: label ?? folderID, path: absolutePath, type: folderType, devices: devices)
                try opened.config.addFolder(folder)
                let created = try FolderDirectory.prepare(path: absolutePath, markerName: folder.markerName)
                do {
                    try opened.config.write()
                } catch {
                    if created { try? FileManager.default.removeItem(atPath: absolutePath) }
                    throw error
                }
                Terminal.note("added folder \(folderID) at \(absolutePath)\(created ? " (created, with .stfolder)" : "")")
            }
        }
    }

    struct Share: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Share a folder with a configured peer.",
            discussion: """
                The peer is named by device ID or by its name in config.xml (when only one peer has it).

                Example:
                  kaiten folder share photos nas
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folderID: String

        @Argument(help: "The peer: device ID or name; add it first with `kaiten peer add`.")
        var peer: String

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                let id = try opened.config.resolveDevice(peer)
                try opened.config.shareFolder(id: folderID, with: id)
                try opened.config.write()
                Terminal.note("shared folder \(folderID) with \(Kaiten.Peer.label(id, in: opened.config))")
            }
        }
    }

    struct Unshare: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop sharing a folder with a peer.",
            discussion: """
                The peer's index of the folder is dropped from the index log, so what it announced \
                no longer counts (nor does it hold any file for a deselect). Local files are not touched.

                Example:
                  kaiten folder unshare photos old-laptop
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folderID: String

        @Argument(help: "The peer: device ID or name.")
        var peer: String

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                let id = try opened.config.resolveDevice(peer)
                let folder = try Kaiten.Folder.configured(folderID, in: opened.config)
                guard folder.devices.contains(id) else {
                    Terminal.note("folder \(folderID) is not shared with \(Kaiten.Peer.label(id, in: opened.config)); nothing to do")
                    return
                }
                try Membership.forgetPeer(id, folders: [folderID], home: opened) {
                    try opened.config.unshareFolder(id: folderID, from: id)
                    try opened.config.write()
                }
                Terminal.note("folder \(folderID) is no longer shared with \(Kaiten.Peer.label(id, in: opened.config)); its index of the folder is dropped")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rm",
            abstract: "Remove a folder from config.xml and drop Kaiten's records of it.",
            discussion: """
                The folder's files on disk are not touched, and neither is its selection file \
                (yours, perhaps in git). Kaiten's index log, scan cache and synced record of the \
                folder are deleted; adding the folder again starts with a fresh index sync.

                Example:
                  kaiten folder rm photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folderID: String

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                let folder = try Kaiten.Folder.configured(folderID, in: opened.config)
                try Membership.forgetFolder(folderID, home: opened) {
                    try opened.config.removeFolder(id: folderID)
                    try opened.config.write()
                }
                let selection = opened.home.selectionPath(folderID: folderID)
                let kept = FileManager.default.fileExists(atPath: selection) ? "; kept \(selection)" : ""
                Terminal.note("removed folder \(folderID); its files in \(folder.path) are untouched\(kept)")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls",
            abstract: "List the configured folders.",
            discussion: """
                Examples:
                  kaiten folder ls
                  kaiten folder ls --json | jq -r '.[].path'
                """)

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Print a JSON array of folders instead of a table.")
        var json = false

        struct Row: Encodable {
            let id: String
            let label: String
            let path: String
            let type: String
            let devices: [String]
            let rescan_interval_s: Int
            let ignore_perms: Bool
            let versioning: String
            let max_conflicts: Int
            let marker_name: String
            let paused: Bool
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                let rows = opened.config.folders.map {
                    Row(
                        id: $0.id, label: $0.label, path: $0.path, type: $0.type.rawValue,
                        devices: $0.devices.map(\.description), rescan_interval_s: $0.rescanIntervalS,
                        ignore_perms: $0.ignorePerms, versioning: $0.versioningType, max_conflicts: $0.maxConflicts,
                        marker_name: $0.markerName, paused: $0.isPaused)
                }
                if json {
                    try Terminal.json(rows)
                } else {
                    let me = opened.identity.deviceID
                    let names = Dictionary(
                        opened.config.devices.map { ($0.id.description, $0.name.isEmpty ? $0.id.shortDescription : $0.name) },
                        uniquingKeysWith: { a, _ in a })
                    Terminal.table(
                        ["ID", "TYPE", "PATH", "SHARED WITH"],
                        rows.map { row in
                            [
                                row.id + (row.paused ? " (paused)" : ""), row.type, row.path,
                                row.devices.filter { $0 != me.description }.map { names[$0] ?? String($0.prefix(7)) }
                                    .joined(separator: ","),
                            ]
                        })
                }
            }
        }
    }
}
