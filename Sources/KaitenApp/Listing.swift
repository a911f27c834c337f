import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSelection
import KaitenStream
import KaitenSync

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten ls`: a directory of a folder's global tree (or one entry), each entry with its
/// holders, whether it is selected and what the disk holds of it; local files the global index
/// does not have, beside them. The JSON of `ls --json` is `entries`, as it is.
public struct Listing: Sendable {
    public struct Entry: Encodable, Sendable {
        public let path: String
        public let type: String
        public let size: Int64
        public let modified: String
        public let peers: [String]
        public let deleted: Bool
        public let version: [String]
        /// `explicit`, `parent` or `no`.
        public let selected: String
        /// `in-sync`, `differs`, `absent`, `extraneous`, or `unknown` when the folder cannot be scanned.
        public let local: String
        /// What this device holds of it, as the mount's `user.kaiten.state` says: `online-only`,
        /// `partial`, `cached`, `pinned`, `local-only` or `conflict` (files and links only).
        public let state: String?
    }

    public let entries: [Entry]
    /// The directory listed, without slashes at its ends ("" for the root).
    public let directory: String
    /// The path named a file: its own entry is the listing, as ls(1) does for a file operand.
    public let namesAFile: Bool
    /// Configured peers' names by device ID (their short IDs when unnamed).
    public let peerNames: [String: String]

    /// A name as a listing shows it: line breaks, tabs and edge spaces quoted, as ls does, never raw.
    public static func displayed(_ name: String) -> String {
        PathRules.unrepresentableReason(name) != nil ? PathRules.quoted(name) : name
    }

    public static func typeName(_ file: FileEntry) -> String {
        switch file.type {
        case .directory: return "directory"
        case .file: return "file"
        default: return "symlink"
        }
    }

    public static func rfc3339(_ file: FileEntry) -> String {
        rfc3339(nanoseconds: file.modifiedS * 1_000_000_000 + Int64(file.modifiedNs))
    }

    public static func rfc3339(nanoseconds: Int64) -> String {
        // By hand: a formatter per row was a quarter of the time of a long listing.
        var seconds = time_t(nanoseconds / 1_000_000_000)
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return "?" }
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}

extension App {
    /// Lists `path` of `folder` (a directory's entries, everything below it with `recursive`,
    /// or a file's own entry) from the index log as it is.
    public func list(_ folder: String, under path: String, recursive: Bool, deleted: Bool) throws -> Listing {
        let opened = try openForReading()
        let log = try openLog(folder, in: opened)
        for warning in IndexCompleteness.warnings(opened, folder: folder, log: log) { diagnostics.error("warning: \(warning)") }
        if log.checkpoints.isEmpty {
            diagnostics.note("no index of \(folder) yet: run `kaiten index sync \(folder)`")
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
            opened.config.devices.map { ($0.id, DeviceID.label($0.id.description, name: $0.name)) },
            uniquingKeysWith: { a, _ in a })
        let config = opened.config.folders.first { $0.id == folder }!
        var localTree: LocalTree?
        var selection = Selection(SelectionFile(), global: log.index)
        do {
            // Only the listed directory is scanned (the file's directory for a file).
            let scanned = namesAFile ? (directory as NSString).deletingLastPathComponent : directory
            localTree = try Planner.loadLocal(
                config, home: opened, under: scanned, recursive: recursive && !namesAFile, global: log.index,
                warn: diagnostics.error)
            let (file, _) = try Planner.readSelection(opened.home.selectionPath(folderID: folder))
            selection = Selection(file, global: log.index)
        } catch let error as ScanError {
            diagnostics.error("\(error) (local state unknown)")
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
        let cache = opened.home.blockCacheDirectory
        func placeholder(_ entry: GlobalEntry, local: String) -> String? {
            guard entry.file.type != .directory, !entry.file.isDeleted else { return nil }
            let copy: PlaceholderState.LocalCopy = local == "in-sync" ? .same : local == "differs" ? .differs : .absent
            let selected = selection.state(of: entry.path) != .no
            var cached = 0
            var blocks = 0
            if copy == .absent && !selected && entry.file.type == .file {
                let hashes = ((try? log.blocks(of: entry.file)) ?? []).compactMap { ContentHash(data: $0.hash) }
                blocks = hashes.count
                cached = DiskBlockCache.count(of: hashes, in: cache)
            }
            return PlaceholderState.of(
                name: (entry.path as NSString).lastPathComponent, inGlobalIndex: true, local: copy, selected: selected, cachedBlocks: cached,
                blocks: blocks
            ).rawValue
        }
        var rows = entries.map { entry in
            let local = localState(entry)
            return Listing.Entry(
                path: entry.path, type: Listing.typeName(entry.file), size: entry.file.size,
                modified: Listing.rfc3339(entry.file), peers: entry.holders.map(\.description),
                deleted: entry.file.isDeleted, version: entry.file.version.descriptions,
                selected: selection.state(of: entry.path).rawValue, local: local, state: placeholder(entry, local: local))
        }
        // Local files the global index does not have, in the listed directory.
        if let localTree, !namesAFile {
            let known = Set(entries.map(\.path))
            for file in localTree.files where file.kind != .directory && !known.contains(file.path) {
                let path = file.path
                guard log.index.global(path) == nil else { continue }
                let parent = (path as NSString).deletingLastPathComponent
                guard recursive ? (directory.isEmpty || path.utf8.starts(with: (directory + "/").utf8)) : parent == directory else { continue }
                rows.append(
                    Listing.Entry(
                        path: path, type: file.kind == .symlink ? "symlink" : "file", size: file.size,
                        modified: Listing.rfc3339(nanoseconds: file.modifiedNs), peers: [], deleted: false, version: [],
                        selected: selection.state(of: path).rawValue, local: "extraneous",
                        state: PlaceholderState.localOnly.rawValue))
            }
            rows.sort { $0.path.utf8Precedes($1.path) }
        }
        return Listing(
            entries: rows, directory: directory, namesAFile: namesAFile,
            peerNames: Dictionary(names.map { ($0.key.description, $0.value) }, uniquingKeysWith: { a, _ in a }))
    }
}
