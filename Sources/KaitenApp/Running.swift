import Foundation
import KaitenApply
import KaitenConfig
import KaitenMedia
import KaitenReconcile
import KaitenService

/// What `kaiten run` asks for: the service's options, and the sources it imports from.
public struct RunRequest: Sendable {
    public var service = Service.Options()
    /// `SRC:FOLDER[/SUBDIR]`: imported from whenever the source appears or changes.
    public var imports: [String] = []
    /// Once this many peers hold an imported file, it is deselected (freed by the next round).
    public var offloadAfter: Int?
    /// `--mount FOLDER=DIR`: folders shown in the file system while the service runs.
    public var mounts: [MountRequest] = []

    public init() {}
}

/// What the service applies on its own (`--apply`).
public typealias AutoApply = KaitenReconcile.AutoApply

extension App {
    /// `kaiten run`: the long-running device (peers, rounds, the control socket, on demand with
    /// `serve`), with the import sources and every view's source watched, until `stop` is
    /// raised; each value of `reloads` reloads config.xml.
    public func run(
        _ request: RunRequest, events: @escaping @Sendable (ServiceEvent) -> Void, stop: StopSignal, reloads: AsyncStream<Void>
    ) async throws {
        let opened = try open()
        _ = try Self.folders(request.service.folders, in: opened)
        var options = request.service
        options.restAPI = true
        var inside = self
        inside.ownService = ControlClient.itself(opened.home)
        options.useCases = RESTUseCases(app: inside)
        options.imports =
            try request.imports.map { try Self.importWatch($0, opened: opened, offloadAfter: request.offloadAfter) }
            + Self.viewWatches(opened)
        let thumbnailCache = opened.home.thumbnailsDirectory
        let error = diagnostics.error
        options.thumbnails = { files in
            guard let served = await App.thumbnailMaker(files: files, cacheRoot: thumbnailCache, log: error) else { return nil }
            return (served.make, { await served.close() })
        }
        for mount in request.mounts {
            _ = try Self.folders([mount.folder], in: opened)
            try Self.refuseCiphertext(mount.folder, in: opened, "--mount")
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: mount.directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw ArgumentError("--mount \(mount.folder)=\(mount.directory): not a directory (make it first: mkdir -p \(mount.directory))")
            }
        }
        let service = Service(home: home, options: options, logger: logger, events: events)
        let mounts = request.mounts.isEmpty ? nil : hostMounts(request.mounts, home: opened.home, stop: stop, events: events)
        do {
            try await service.run(stop: stop, reload: reloads)
        } catch {
            stop.raise(SIGTERM)
            await mounts?.value
            throw error
        }
        stop.raise(SIGTERM)
        await mounts?.value
    }

    /// `SRC:FOLDER[/SUBDIR]` (split at the last ':' whose right side names a folder), as a watch
    /// that imports as `kaiten import` does and, with `offloadAfter`, deselects what is held.
    static func importWatch(_ argument: String, opened: KaitenHome, offloadAfter: Int?) throws -> ImportWatch {
        guard let colon = argument.lastIndex(of: ":") else { throw ArgumentError("--import takes SRC:FOLDER, e.g. /media/card/DCIM:photos") }
        let source = String(argument[..<colon])
        let (folder, subdirectory) = try split(String(argument[argument.index(after: colon)...]), in: opened)
        guard folder.type == .sendreceive || folder.type == .sendonly else {
            throw ArgumentError("--import \(argument): \(folder.id) is a \(folder.type.rawValue) folder; import into a sendreceive or sendonly one")
        }
        let absolute = URL(fileURLWithPath: source).standardizedFileURL.path
        let folderPath = URL(fileURLWithPath: folder.path).standardizedFileURL.path
        if absolute == folderPath || absolute.hasPrefix(folderPath + "/") || folderPath.hasPrefix(absolute + "/") {
            throw ArgumentError("--import \(argument): the source and the folder \(folder.id) overlap")
        }
        let homePath = opened.home
        return ImportWatch(source: absolute, folder: folder.id) {
            do {
                let home = try KaitenHome.open(homePath)
                let helpers = (try? MediaHelpers.locate()).map { MediaHelpers(executable: $0, count: 1) }
                defer { helpers?.close() }
                let done = try await Importer.run(
                    source: URL(fileURLWithPath: absolute).resolvingSymlinksInPath().path, folder: folder, subdirectory: subdirectory,
                    layout: try ImportLayout(ImportLayout.standard), home: home, dryRun: false, helpers: helpers)
                let failures = done.items.compactMap { item -> String? in
                    if case .failed(let why) = item.decision { return "\((item.source as NSString).lastPathComponent): \(why)" }
                    return nil
                }
                return "imported \(done.imported.count) of \(done.items.count) files from \(absolute)"
                    + (failures.isEmpty ? "" : "; failed: " + failures.joined(separator: "; "))
            } catch {
                return "import from \(absolute) failed: \(error)"
            }
        } tick: {
            guard let offloadAfter else { return nil }
            do {
                let home = try KaitenHome.open(homePath)
                let record = ImportRecord(home: homePath, folder: folder.id)
                let (deselected, _) = try Importer.deselectHeld(
                    home: home, folder: folder.id, paths: record.entries.map(\.path), peers: offloadAfter)
                guard !deselected.isEmpty else { return nil }
                return "\(deselected.count) imported file\(deselected.count == 1 ? "" : "s") held by \(offloadAfter) peer\(offloadAfter == 1 ? "" : "s"): deselected, freed by the next round"
            } catch {
                return "offload: \(error)"
            }
        }
    }

    /// Every view folder's source, watched like an import source: a change re-links the view.
    static func viewWatches(_ opened: KaitenHome) -> [ImportWatch] {
        let homePath = opened.home
        return opened.config.folders.compactMap { folder -> ImportWatch? in
            guard let definition = try? ViewDefinition.load(opened.home, folder: folder.id) else { return nil }
            let id = folder.id
            return ImportWatch(source: definition.source, folder: id) {
                do {
                    let report = try await syncView(id, opened: try KaitenHome.open(homePath))
                    return "view of \(definition.source): \(report.linked.count) linked, \(report.relinked.count) linked again, \(report.removed.count) removed"
                        + (report.failed.isEmpty ? "" : "; failed: " + report.failed.map { "\($0.path): \($0.why)" }.joined(separator: "; "))
                } catch {
                    return "view of \(definition.source): \(error)"
                }
            }
        }
    }
}
