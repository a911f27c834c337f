import ArgumentParser
import Foundation
import KaitenConfig
import KaitenProtocol

extension Kaiten {
    struct Folder: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add, share and list folders.",
            subcommands: [Add.self, Share.self, List.self])
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
            help: ArgumentHelp("A configured peer to share the folder with; repeatable.", valueName: "device-id"))
        var shares: [String] = []

        func validate() throws {
            guard !folderID.isEmpty, !folderID.contains("/"), folderID.trimmingCharacters(in: .whitespaces) == folderID
            else {
                throw ValidationError("the folder ID must be non-empty, without '/' or surrounding spaces")
            }
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try KaitenHome.open(global.resolvedHome)
                guard let folderType = FolderType(configValue: type), folderType != .receiveencrypted else {
                    throw ConfigError(
                        .unknownFolderType, file: opened.config.path,
                        "unknown folder type \"\(type)\" (receiveonly, sendreceive or sendonly)")
                }
                var devices = [opened.identity.deviceID]
                for text in shares { devices.append(try DeviceID(text)) }
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
            discussion: "Example:\n  kaiten folder share photos PEER-ID")

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folderID: String

        @Argument(help: "The peer's device ID; add it first with `kaiten peer add`.")
        var deviceID: String

        func run() async throws {
            try await reportingErrors {
                let opened = try KaitenHome.open(global.resolvedHome)
                let id = try DeviceID(deviceID)
                try opened.config.shareFolder(id: folderID, with: id)
                try opened.config.write()
                Terminal.note("shared folder \(folderID) with \(id)")
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
                let opened = try KaitenHome.open(global.resolvedHome)
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
