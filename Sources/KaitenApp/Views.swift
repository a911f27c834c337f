import Foundation
import KaitenConfig
import KaitenMedia
import KaitenSync

#if canImport(Glibc)
import Glibc
#endif

/// What a view's sync did: linked, linked again, removed, unchanged, failed, and foreign files.
public typealias ViewReport = ViewFolder.Report

extension App {
    /// Makes a sendonly folder with an empty directory the view of `source`: its media linked
    /// there under `layout`. Returns the source, absolute; `syncView` links it.
    public func addView(_ folder: String, source: String, layout: String) throws -> String {
        let opened = try open()
        guard let config = opened.config.folders.first(where: { $0.id == folder }) else {
            throw ArgumentError("\(folder): no such folder (see `kaiten folder ls`)")
        }
        guard config.type == .sendonly else {
            throw ArgumentError(
                "\(folder) is \(config.type.rawValue): a view is announced as a sendonly folder (kaiten folder add ID --path DIR --type sendonly)")
        }
        _ = try ImportLayout(layout)
        let sourcePath = try Self.checkedSource(source, folder: config)
        if let existing = try ViewDefinition.load(opened.home, folder: folder) {
            throw ArgumentError("\(folder) is already the view of \(existing.source) (kaiten view rm \(folder) first)")
        }
        let present = ((try? FileManager.default.contentsOfDirectory(atPath: config.path)) ?? [])
            .filter { ![".stfolder", ".stignore", ".stversions"].contains($0) }
        guard present.isEmpty else {
            throw ArgumentError(
                "\(config.path) holds \(present.count) entr\(present.count == 1 ? "y" : "ies") (\(present.prefix(3).joined(separator: ", "))): a view's directory must be empty"
            )
        }
        try FileManager.default.createDirectory(atPath: config.path + "/.stfolder", withIntermediateDirectories: true)
        var sourceInfo = stat()
        var folderInfo = stat()
        guard stat(sourcePath, &sourceInfo) == 0, stat(config.path, &folderInfo) == 0, sourceInfo.st_dev == folderInfo.st_dev else {
            throw ArgumentError("\(sourcePath) and \(config.path) are on different file systems: a view links its files and needs one")
        }
        try ViewDefinition(source: sourcePath, layout: layout).save(opened.home, folder: folder)
        return sourcePath
    }

    /// The view folders named (all of them when none).
    public func viewFolders(_ requested: [String]) throws -> [String] {
        let opened = try open()
        guard requested.isEmpty else { return requested }
        return opened.config.folders.map(\.id).filter { (try? ViewDefinition.load(opened.home, folder: $0)) != nil }
    }

    /// Links the view and selects its top-level entries (so that all of it is sent), says so
    /// through `linked`, and with `send` applies through `applying`.
    public func syncView(_ folder: String, send: Bool, linked: (ViewReport) -> Void, applying: Applying) async throws -> ViewReport {
        let report = try await Self.syncView(folder, opened: try open())
        linked(report)
        if send {
            var apply = ApplyRequest()
            apply.folders = [folder]
            try await applying(apply)
        }
        return report
    }

    /// Stops a folder being a view; its links stay.
    public func removeView(_ folder: String) throws {
        let opened = try open()
        guard try ViewDefinition.load(opened.home, folder: folder) != nil else { throw ArgumentError("\(folder) is not a view") }
        ViewDefinition.remove(opened.home, folder: folder)
    }

    /// The view's links, and its top-level entries selected: what `view sync` and `run` do.
    static func syncView(_ folder: String, opened: KaitenHome) async throws -> ViewReport {
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
