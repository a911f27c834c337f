import ArgumentParser
import KaitenApp
import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenSelection
import KaitenSync

extension Kaiten {
    struct Select: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add paths to a folder's selection file.",
            discussion: """
                Edits <home>/selections/FOLDER.txt, keeping its comments and order. A directory \
                selects everything in it, now and in future. Nothing is fetched: run `kaiten plan` \
                to see what would change.

                A path absent from the global index is refused (it is most likely a typo) unless \
                --force, except, in a folder that sends, a file on disk: selecting it is how a new \
                file is shared (the plan then sends it). A path already covered by a selected \
                parent is reported and not added. \
                An argument with glob characters (`*`, `?`, `[...]`, `**`) that names no file \
                literally becomes a pattern line, expanded at every plan (against the files on \
                disk too, in a folder that sends); one that matches nothing is refused unless --force. `deselect` removes a pattern written the same way.

                Examples:
                  kaiten select photos 2025/summer
                  kaiten select docs 'reports/[draft] q3.pdf'
                  kaiten select photos 'photos/2024/*/IMG_000?.jpg'
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "Folder-relative paths (a leading / is optional).")
        var paths: [String]

        @Flag(help: "Add paths even when the global index does not have them.")
        var force = false

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                let log = try global.app.openLog(folder, in: opened)
                let file = opened.home.selectionPath(folderID: folder)
                var (selection, _) = try Planner.readSelection(file)
                // In a folder that sends, a file on disk is selected as one of the index is: that
                // is how a new file is shared.
                let sendsFrom = opened.config.folder(id: folder).flatMap { $0.type == .sendreceive || $0.type == .sendonly ? $0.path : nil }
                let onDisk = sendsFrom.map { LocalPaths(root: $0) }
                var added = 0
                // Said once the file is written: a selection that could not be saved selected nothing.
                var said: [String] = []
                for path in paths {
                    // Written in the selection file's escaped spelling (`\[`, `\*`, `\\`), an
                    // argument names that file literally; otherwise it is taken as it is.
                    let unescaped = Glob.unescape(path)
                    let spelledEscaped = !Glob.hasMetacharacters(path) && unescaped != path
                        && PathRules.escapeGlobCharacters(unescaped) == path
                    let clean = try SelectionFile.normalizeArgument(spelledEscaped ? unescaped : path)
                    let literal = (log.index.global(clean).map { !$0.file.isDeleted } ?? false) || onDisk?.exists(clean) == true
                    // A glob that names no file literally is a pattern line, kept as written and
                    // expanded at every plan, if it matches something now.
                    if !literal, Glob.hasMetacharacters(path), let glob = try? Glob(SelectionFile.normalizePattern(path)) {
                        var matched = 0
                        log.index.forEachGlobal { entry in if !entry.file.isDeleted && glob.matches(entry.path) { matched += 1 } }
                        for local in onDisk?.all() ?? [] where glob.matches(local) {
                            if log.index.global(local).map({ !$0.file.isDeleted }) != true { matched += 1 }
                        }
                        if matched > 0 || force {
                            if try selection.addPattern(path) {
                                added += 1
                                said.append("selected the pattern \(glob.pattern) (\(matched) path\(matched == 1 ? "" : "s") now)")
                            } else {
                                said.append("\(glob.pattern): already selected")
                            }
                            continue
                        }
                        throw SelectionError(
                            .badPattern, file: "argument", line: 0,
                            "the pattern \"\(glob.pattern)\" matches nothing in the global index of \(folder)\(onDisk == nil ? "" : " nor on disk") (--force adds it anyway)")
                    }
                    if !force, !literal {
                        throw SelectionError(
                            .badPattern, file: "argument", line: 0,
                            "\"\(clean)\" is not in the global index of \(folder)\(onDisk == nil ? "" : " nor on disk") (a typo? `kaiten ls \(folder)` lists it; --force adds it anyway)")
                    }
                    switch try selection.select(clean) {
                    case .added:
                        added += 1
                        said.append("selected \(clean)")
                    case .alreadySelected:
                        said.append("\(clean): already selected")
                    case .coveredBy(let parent):
                        said.append("\(clean): already selected through \(parent)")
                    }
                }
                if added > 0 { try Planner.writeSelection(selection, to: file) }
                for line in said { print(line) }
            }
        }
    }

    struct Deselect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove paths from a folder's selection file.",
            discussion: """
                Removes the path's own line from <home>/selections/FOLDER.txt. Nothing is deleted \
                now: `kaiten plan` shows which local copies would be freed (only those at least \
                --require-peers peers hold in full).

                Example:
                  kaiten deselect photos 2019
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "Folder-relative paths, as they were selected.")
        var paths: [String]

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                _ = try App.folders([folder], in: opened)
                let file = opened.home.selectionPath(folderID: folder)
                var (selection, _) = try Planner.readSelection(file)
                var removed = 0
                var failed = false
                for path in paths {
                    let clean = try SelectionFile.normalizeArgument(path)
                    if try selection.deselect(clean) {
                        removed += 1
                        print("deselected \(clean)")
                    } else if Glob.hasMetacharacters(path), selection.removePattern(path) {
                        removed += 1
                        print("deselected the pattern \(path)")
                    } else if let parent = selection.paths.first(where: { PathRules.isAncestor($0, of: clean) }) {
                        Terminal.error("\(clean) is selected through \(parent); deselect \(parent) and select what to keep")
                        failed = true
                    } else if let pattern = selection.patterns.first(where: { $0.matches(clean) }) {
                        Terminal.error("\(clean) is selected by the pattern \"\(pattern.pattern)\"; edit \(file)")
                        failed = true
                    } else {
                        print("\(clean): not selected")
                    }
                }
                if removed > 0 { try Planner.writeSelection(selection, to: file) }
                if failed { throw ExitCode(1) }
            }
        }
    }

    struct Adopt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Import a folder's existing .stignore into its selection file.",
            discussion: """
                For a folder whose .stignore was written by Sushitrain or by hand in the \
                selective grammar ((?d) lines, !/path lines, a final *), its lines become the \
                selection file, so Kaiten manages the folder from now on. A .stignore with lines \
                Kaiten cannot represent is refused, and those lines are quoted. The .stignore \
                itself is not changed.

                Example:
                  kaiten adopt photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        func run() async throws {
            try await reportingErrors {
                let opened = try global.openHome()
                _ = try App.folders([folder], in: opened)
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
                        "not in the selective grammar; Kaiten cannot represent: "
                            + lines.map { "\"\($0)\"" }.joined(separator: ", "))
                case .managed(let ignores, let selected):
                    let file = opened.home.selectionPath(folderID: folder)
                    var (selection, _) = try Planner.readSelection(file)
                    var added = 0
                    for name in ignores where !selection.globalIgnores.contains(name) {
                        selection.addGlobalIgnore(name)
                        added += 1
                    }
                    for path in selected {
                        do {
                            if case .added = try selection.select(path) { added += 1 }
                        } catch let error as SelectionError {
                            // Name the .stignore line, not the argument the path became.
                            let rows = TextLines.split(text)
                            let line = (rows.firstIndex { $0.trimmingCharacters(in: .whitespaces) == StIgnore.line(forSelecting: path) } ?? -1) + 1
                            throw SelectionError(error.code, file: stignorePath, line: line, error.hint)
                        }
                    }
                    try Planner.writeSelection(selection, to: file)
                    print("adopted \(stignorePath): \(selected.count) selected path(s), \(ignores.count) (?d) line(s); \(added) added to \(file)")
                }
            }
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
