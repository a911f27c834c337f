import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenSelection
import KaitenSync

#if canImport(Glibc)
import Glibc
#endif

/// What `select` did with one argument.
public enum Selected: Sendable {
    case path(String)
    case pattern(String, matching: Int)
    case alreadySelected(String)
    case coveredBy(String, parent: String)
}

/// What `deselect` did with one argument; the last two are refusals (the file is unchanged for them).
public enum Deselected: Sendable {
    case path(String)
    case pattern(String)
    case notSelected(String)
    case selectedThrough(String, parent: String)
    case selectedByPattern(String, pattern: String, file: String)

    public var refused: Bool {
        switch self {
        case .selectedThrough, .selectedByPattern: return true
        default: return false
        }
    }
}

/// What `adopt` took from a folder's .stignore.
public struct Adopted: Sendable {
    public let stignore: String
    public let selected: Int
    public let ignores: Int
    public let added: Int
    public let selectionFile: String
}

extension App {
    /// Adds `paths` to `folder`'s selection file. A path the global index has (or, in a folder
    /// that sends, the disk) is selected literally; a glob that names no file literally is a
    /// pattern line, kept as written, if it matches something now. Anything else is refused
    /// unless `force`. The file is written once, after every argument was accepted.
    public func select(_ folder: String, _ paths: [String], force: Bool) throws -> [Selected] {
        let opened = try open()
        try Self.refuseCiphertext(folder, in: opened, "a selection")
        let log = try openLog(folder, in: opened)
        let file = opened.home.selectionPath(folderID: folder)
        var (selection, _) = try Planner.readSelection(file)
        let names = SelectableNames(folder: folder, config: opened.config, index: log.index)
        var changed = false
        var results: [Selected] = []
        for path in paths {
            // Written in the selection file's escaped spelling (`\[`, `\*`, `\\`), an argument
            // names that file literally; otherwise it is taken as it is.
            let unescaped = Glob.unescape(path)
            let spelledEscaped = !Glob.hasMetacharacters(path) && unescaped != path && PathRules.escapeGlobCharacters(unescaped) == path
            let clean = try SelectionFile.normalizeArgument(spelledEscaped ? unescaped : path)
            let literal = names.exists(clean)
            if !literal, Glob.hasMetacharacters(path), let glob = try? Glob(SelectionFile.normalizePattern(path)) {
                let matched = try names.checkPattern(glob, force: force)
                if try selection.addPattern(path) {
                    changed = true
                    results.append(.pattern(glob.pattern, matching: matched))
                } else {
                    results.append(.alreadySelected(glob.pattern))
                }
                continue
            }
            if !force, !literal { throw names.notFound(clean) }
            switch try selection.select(clean) {
            case .added:
                changed = true
                results.append(.path(clean))
            case .alreadySelected: results.append(.alreadySelected(clean))
            case .coveredBy(let parent): results.append(.coveredBy(clean, parent: parent))
            }
        }
        if changed { try Planner.writeSelection(selection, to: file) }
        return results
    }

    /// Replaces `folder`'s selection file with `text` (the REST API's PUT): the text must parse
    /// as a selection file, and each path or pattern line it adds is checked as `select` checks
    /// an argument (unless `force`). Written once, crash-safely; returns the file written.
    public func replaceSelection(_ folder: String, text: String, force: Bool) throws -> SelectionFile {
        let opened = try open()
        try Self.refuseCiphertext(folder, in: opened, "a selection")
        let log = try openLog(folder, in: opened)
        let file = opened.home.selectionPath(folderID: folder)
        let (current, _) = try Planner.readSelection(file)
        let replacement = try SelectionFile.parse(text, file: file)
        if !force {
            let names = SelectableNames(folder: folder, config: opened.config, index: log.index)
            for path in Set(replacement.paths).subtracting(current.paths).sorted() where !names.exists(path) { throw names.notFound(path) }
            let old = Set(current.patterns.map(\.pattern))
            for glob in replacement.patterns where !old.contains(glob.pattern) { _ = try names.checkPattern(glob, force: false) }
        }
        if replacement != current { try Planner.writeSelection(replacement, to: file) }
        return replacement
    }

    /// Removes `paths` (as they were selected: paths or pattern lines) from `folder`'s selection
    /// file. A path selected through a parent or a pattern is not removable alone: refused.
    public func deselect(_ folder: String, _ paths: [String]) throws -> [Deselected] {
        let opened = try open()
        try Self.refuseCiphertext(folder, in: opened, "a selection")
        _ = try Self.folders([folder], in: opened)
        let file = opened.home.selectionPath(folderID: folder)
        var (selection, _) = try Planner.readSelection(file)
        var changed = false
        var results: [Deselected] = []
        for path in paths {
            let clean = try SelectionFile.normalizeArgument(path)
            if try selection.deselect(clean) {
                changed = true
                results.append(.path(clean))
            } else if Glob.hasMetacharacters(path), selection.removePattern(path) {
                changed = true
                results.append(.pattern(path))
            } else if let parent = selection.paths.first(where: { PathRules.isAncestor($0, of: clean) }) {
                results.append(.selectedThrough(clean, parent: parent))
            } else if let pattern = selection.patterns.first(where: { $0.matches(clean) }) {
                results.append(.selectedByPattern(clean, pattern: pattern.pattern, file: file))
            } else {
                results.append(.notSelected(clean))
            }
        }
        if changed { try Planner.writeSelection(selection, to: file) }
        return results
    }

    /// Imports `folder`'s .stignore (in Sushitrain's selective grammar) into its selection file.
    public func adopt(_ folder: String) throws -> Adopted {
        let opened = try open()
        _ = try Self.folders([folder], in: opened)
        let config = opened.config.folders.first { $0.id == folder }!
        let stignorePath = (config.path as NSString).appendingPathComponent(".stignore")
        guard let data = FileManager.default.contents(atPath: stignorePath) else {
            throw ConfigError(.invalidValue, file: stignorePath, "there is no .stignore to adopt")
        }
        let text = String(decoding: data, as: UTF8.self)
        switch StIgnore.parse(text) {
        case .unmanaged(let lines):
            throw ConfigError(
                .invalidValue, file: stignorePath,
                "not in the selective grammar; Kaiten cannot represent: " + lines.map { "\"\($0)\"" }.joined(separator: ", "))
        case .managed(let ignores, let selected):
            let file = opened.home.selectionPath(folderID: folder)
            var (selection, _) = try Planner.readSelection(file)
            var added = 0
            for name in ignores where !selection.globalIgnores.contains(name) {
                selection.addGlobalIgnore(name)
                added += 1
            }
            for path in selected {
                switch Result(catching: { try selection.select(path) }) {
                case .success(.added): added += 1
                case .success: break
                case .failure(let error):
                    guard let error = error as? SelectionError else { throw error }
                    // Name the .stignore line, not the argument the path became.
                    let rows = TextLines.split(text)
                    let line = (rows.firstIndex { $0.trimmingCharacters(in: .whitespaces) == StIgnore.line(forSelecting: path) } ?? -1) + 1
                    throw SelectionError(error.code, file: stignorePath, line: line, error.hint)
                }
            }
            try Planner.writeSelection(selection, to: file)
            return Adopted(stignore: stignorePath, selected: selected.count, ignores: ignores.count, added: added, selectionFile: file)
        }
    }
}

/// The files and directories of a folder on disk, by folder-relative path, without
/// syncthing's own (`.stfolder`, `.stignore`, `.stversions`, temporary files).
struct LocalPaths {
    let root: String

    func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat((root as NSString).appendingPathComponent(path), &info) == 0
    }

    func all() -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: root) else { return [] }
        var found: [String] = []
        while let path = walker.nextObject() as? String {
            let name = (path as NSString).lastPathComponent
            if [".stfolder", ".stignore", ".stversions"].contains(path) || name.hasPrefix(".syncthing.") {
                walker.skipDescendants()
                continue
            }
            found.append(path)
        }
        return found
    }
}

/// The names a folder's selection may name: live paths of the global index, and in a folder
/// that sends, files on disk (that is how a new file is shared). `select` and a replaced
/// selection check what they add against it.
struct SelectableNames {
    let folder: String
    let index: GlobalIndex
    let onDisk: LocalPaths?

    init(folder: String, config: ConfigFile, index: GlobalIndex) {
        self.folder = folder
        self.index = index
        let sendsFrom = config.folder(id: folder).flatMap { $0.type == .sendreceive || $0.type == .sendonly ? $0.path : nil }
        onDisk = sendsFrom.map { LocalPaths(root: $0) }
    }

    func exists(_ path: String) -> Bool {
        (index.global(path).map { !$0.file.isDeleted } ?? false) || onDisk?.exists(path) == true
    }

    /// How many names `glob` matches now; none is refused unless `force`.
    func checkPattern(_ glob: Glob, force: Bool) throws -> Int {
        var matched = 0
        index.forEachGlobal { entry in if !entry.file.isDeleted && glob.matches(entry.path) { matched += 1 } }
        for local in onDisk?.all() ?? [] where glob.matches(local) {
            if index.global(local).map({ !$0.file.isDeleted }) != true { matched += 1 }
        }
        guard matched > 0 || force else {
            throw SelectionError(
                .badPattern, file: "argument", line: 0,
                "the pattern \"\(glob.pattern)\" matches nothing in the global index of \(folder)\(onDisk == nil ? "" : " nor on disk") (--force adds it anyway)")
        }
        return matched
    }

    func notFound(_ path: String) -> SelectionError {
        SelectionError(
            .badPattern, file: "argument", line: 0,
            "\"\(path)\" is not in the global index of \(folder)\(onDisk == nil ? "" : " nor on disk") (a typo? `kaiten ls \(folder)` lists it; --force adds it anyway)")
    }
}
