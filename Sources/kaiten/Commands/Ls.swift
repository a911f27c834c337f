import ArgumentParser
import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenSelection
import KaitenReconcile
import KaitenScan
import KaitenSync

extension Kaiten {
    struct Ls: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the global tree of a folder, as peers announced it.",
            discussion: """
                Reads the index log as it is (run `kaiten index sync` first to refresh it). For \
                each entry: name, type, size, modification time, and the peers that hold the \
                global version. Deleted entries are left out unless --deleted.

                Examples:
                  kaiten ls photos
                  kaiten ls photos 2025/summer -l
                  kaiten ls photos -R --json | jq '.[] | select(.size > 1e9) | .path'
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "A directory inside the folder (its entries are listed) or a file (its own entry). When omitted: the folder root.")
        var path: String = ""

        @Flag(name: .short, help: "Long format: type, size, modification time and peers.")
        var long = false

        @Flag(name: .customShort("R"), help: "Everything below PATH, not just its direct entries.")
        var recursive = false

        @Flag(help: "Include deleted entries.")
        var deleted = false

        @Flag(help: "Print a JSON array of entries.")
        var json = false

        struct Row: Encodable {
            let path: String
            let type: String
            let size: Int64
            let modified: String
            let peers: [String]
            let deleted: Bool
            let version: [String]
            /// `explicit`, `parent` or `no`.
            let selected: String
            /// `in-sync`, `differs`, `absent`, `extraneous`, or `unknown` when the folder cannot be scanned.
            let local: String
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHomeForReading()
                let log = try FolderSelection.openLog(folder, in: opened)
                for warning in IndexCompleteness.warnings(opened, folder: folder, log: log) { Terminal.error("warning: \(warning)") }
                if log.checkpoints.isEmpty {
                    Terminal.note("no index of \(folder) yet: run `kaiten index sync \(folder)`")
                }
                let directory = path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
                // `ls F a/file.txt` prints that entry, as ls(1) does for a file operand.
                let named = directory.isEmpty ? nil : log.index.global(directory)
                let namesAFile = named.map { $0.file.type != .directory && (deleted || !$0.file.isDeleted) } ?? false
                let entries = namesAFile ? [named!] : log.index.list(under: directory, recursive: recursive, includeDeleted: deleted)
                if !directory.isEmpty && entries.isEmpty && named == nil {
                    throw ConfigError(.invalidValue, file: log.path, "\"\(directory)\" is not in the global index of \(folder)")
                }
                let names = Dictionary(
                    opened.config.devices.map { ($0.id, $0.name.isEmpty ? $0.id.shortDescription : $0.name) },
                    uniquingKeysWith: { a, _ in a })
                let config = opened.config.folders.first { $0.id == folder }!
                var localTree: LocalTree?
                var selection = Selection(SelectionFile(), global: log.index)
                do {
                    // Only the listed directory is scanned (the file's directory for a file).
                    let scanned = namesAFile ? (directory as NSString).deletingLastPathComponent : directory
                    localTree = try Planner.loadLocal(
                        config, home: opened, under: scanned, recursive: recursive && !namesAFile, global: log.index,
                        warn: { Terminal.error($0) })
                    let (file, _) = try Planner.readSelection(opened.home.selectionPath(folderID: folder))
                    selection = Selection(file, global: log.index)
                } catch let error as ScanError {
                    Terminal.error("\(error) (local state unknown)")
                    let (file, _) = try Planner.readSelection(opened.home.selectionPath(folderID: folder))
                    selection = Selection(file, global: log.index)
                }
                func localState(_ entry: GlobalEntry) -> String {
                    guard let localTree else { return "unknown" }
                    guard let mine = localTree[entry.path] else { return "absent" }
                    if entry.file.isDeleted { return "extraneous" }
                    if entry.file.type == .directory { return mine.kind == .directory ? "in-sync" : "differs" }
                    let same = Reconciler.contentHash(of: mine) == Reconciler.contentHash(of: entry.file)
                    return same ? "in-sync" : "differs"
                }
                var rows = entries.map { entry in
                    Row(
                        path: entry.path, type: Self.typeName(entry.file), size: entry.file.size,
                        modified: Self.rfc3339(entry.file), peers: entry.holders.map(\.description),
                        deleted: entry.file.isDeleted, version: entry.file.version.descriptions,
                        selected: selection.state(of: entry.path).rawValue, local: localState(entry))
                }
                // Local files the global index does not have, in the listed directory.
                if let localTree, !namesAFile {
                    let known = Set(entries.map(\.path))
                    for file in localTree.files where file.kind != .directory && !known.contains(file.path) {
                        let path = file.path
                        guard log.index.global(path) == nil else { continue }
                        let parent = (path as NSString).deletingLastPathComponent
                        guard recursive ? (directory.isEmpty || path.hasPrefix(directory + "/")) : parent == directory else { continue }
                        rows.append(
                            Row(
                                path: path, type: file.kind == .symlink ? "symlink" : "file", size: file.size,
                                modified: Self.rfc3339(nanoseconds: file.modifiedNs), peers: [], deleted: false, version: [],
                                selected: selection.state(of: path).rawValue, local: "extraneous"))
                    }
                    rows.sort { $0.path.utf8Precedes($1.path) }
                }
                if json {
                    try Terminal.json(rows)
                    return
                }
                for row in rows {
                    let bare = recursive || namesAFile ? row.path : String(row.path.dropFirst(directory.isEmpty ? 0 : directory.count + 1))
                    // Line breaks, tabs and edge spaces are shown quoted, as ls does, never raw.
                    let name = PathRules.unrepresentableReason(bare) != nil ? PathRules.quoted(bare) : bare
                    let shown = name + (row.type == "directory" ? "/" : "") + (row.deleted ? " (deleted)" : "")
                    if long {
                        let peers = row.peers.map { id in names.first { $0.key.description == id }?.value ?? String(id.prefix(7)) }.joined(separator: ",")
                        let mark = row.selected == "explicit" ? "S" : row.selected == "parent" ? "s" : "-"
                        print(
                            "\(row.type == "directory" ? "d" : row.type == "symlink" ? "l" : "-")  \(mark) \(row.local.padding(toLength: 10, withPad: " ", startingAt: 0))  \(Self.human(row.size).leftPad(9))  \(row.modified)  \(shown)  [\(peers)]"
                        )
                    } else {
                        print(shown)
                    }
                }
            }
        }

        static func typeName(_ file: FileEntry) -> String {
            switch file.type {
            case .directory: return "directory"
            case .file: return "file"
            default: return "symlink"
            }
        }

        static func rfc3339(_ file: FileEntry) -> String {
            rfc3339(nanoseconds: file.modifiedS * 1_000_000_000 + Int64(file.modifiedNs))
        }

        static func rfc3339(nanoseconds: Int64) -> String {
            // By hand: a formatter per row was a quarter of the time of a long listing.
            var seconds = time_t(nanoseconds / 1_000_000_000)
            var parts = tm()
            guard gmtime_r(&seconds, &parts) != nil else { return "?" }
            func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
            return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
        }

        static func human(_ bytes: Int64) -> String { TextFacts.human(bytes) }
    }
}

extension String {
    func leftPad(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
