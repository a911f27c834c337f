import Foundation
import KaitenApply
import KaitenConfig
import KaitenMedia
import KaitenScan
import KaitenService
import KaitenSync
import KaitenTransfer

#if canImport(Glibc)
import Glibc
#endif

/// What `kaiten import` asks for.
public struct ImportRequest: Sendable {
    public var source: String
    /// `photos` or `photos/camera`: a folder, optionally with a subdirectory.
    public var destination: String
    public var layout = ImportLayout.standard
    public var dryRun = false
    /// Apply (send) what was imported; off: copy and select only.
    public var send = true
    public var requirePeers = 1
    public var sendTimeout: Double = 300
    /// Once this many peers hold an imported file, deselect it and remove the local copy.
    public var offloadAfter: Int?
    /// With `offloadAfter`: then remove the original from the source.
    public var purgeSource = false

    public init(source: String, destination: String) {
        self.source = source
        self.destination = destination
    }
}

/// The copy an import made (or would make, dry): every item and its decision.
public struct ImportCopy: Sendable {
    public let folder: String
    public let sourceRoot: String
    public let items: [ImportItem]
    public let imported: Int
    public let failed: Int
}

/// An offload's step: deselected (then applied), and what is not yet held and kept.
public struct OffloadStep: Sendable {
    public let folder: String
    public let deselected: Int
    public let waiting: Int
    public let peers: Int
}

/// How the verbs that end with an apply (import, offload, view) have it run: the front-end's
/// apply, with its output and its exit code, given the request this layer decided.
public typealias Applying = (ApplyRequest) async throws -> Void

extension App {
    /// Imports new photos and videos from a source into a folder (dated by their metadata,
    /// repeated content skipped), selects them, and sends them through `applying`; with
    /// `offloadAfter`, offloads what the peers then hold, and with `purgeSource` removes those
    /// originals. Returns how many originals were removed, when asked to.
    public func importMedia(
        _ request: ImportRequest, copied: (ImportCopy) -> Void, applying: Applying, offloaded: (OffloadStep) -> Void
    ) async throws -> Int? {
        let opened = try open()
        let (folder, subdirectory) = try Self.split(request.destination, in: opened)
        guard folder.type == .sendreceive || folder.type == .sendonly else {
            throw ArgumentError(
                "\(folder.id) is a \(folder.type.rawValue) folder: what is imported would never reach the peers (import into a sendreceive or sendonly folder)"
            )
        }
        let sourceRoot = try Self.checkedSource(request.source, folder: folder)
        let layout = try ImportLayout(request.layout)
        let helpers = (try? MediaHelpers.locate()).map { MediaHelpers(executable: $0, count: 1) }
        if helpers == nil { diagnostics.error("kaiten-media is not installed: videos are dated by their modification time") }
        let done = try await Importer.run(
            source: sourceRoot, folder: folder, subdirectory: subdirectory, layout: layout, home: opened, dryRun: request.dryRun,
            helpers: helpers)
        helpers?.close()
        let failed = done.failed
        copied(ImportCopy(folder: folder.id, sourceRoot: sourceRoot, items: done.items, imported: done.imported.count, failed: failed))
        var purged: Int?
        if !request.dryRun, !done.imported.isEmpty, request.send {
            var apply = ApplyRequest()
            apply.folders = [folder.id]
            apply.requirePeers = max(request.requirePeers, request.offloadAfter ?? 1)
            apply.sendTimeout = request.sendTimeout
            try await applying(apply)
            if let peers = request.offloadAfter {
                let offloadedPaths = try await offload(
                    folder.id, paths: done.imported.map(\.destination), peers: peers, applying: applying, step: offloaded)
                if request.purgeSource {
                    purged = purge(done.imported.filter { offloadedPaths.contains($0.destination) })
                }
            }
        }
        if failed > 0 { throw VerbEnded(.failure) }
        return purged
    }

    /// Frees the space of imported files the peers hold: those `peers` peers hold in their exact
    /// version (the index refreshed now, unless a service keeps it) are deselected and applied
    /// away. `paths` nil: everything `kaiten import` put into the folder. The paths deselected.
    public func offload(
        _ folder: String, paths: [String]? = nil, peers: Int, applying: Applying, step: (OffloadStep) -> Void
    ) async throws -> Set<String> {
        let opened = try open()
        _ = try Self.folders([folder], in: opened)
        let paths = paths ?? ImportRecord(home: opened.home, folder: folder).entries.map(\.path)
        if case .here = try route("offload", .readsFromService, in: opened) {
            let reports = try await IndexSync.run(home: opened, folders: [folder], logger: logger, warn: diagnostics.error)
            if reports.contains(where: { !$0.ok }) { diagnostics.error("some peers did not answer; their copies do not count") }
        }
        let (deselectedPaths, waiting) = try Importer.deselectHeld(home: opened, folder: folder, paths: paths, peers: peers)
        let deselected = Set(deselectedPaths)
        step(OffloadStep(folder: folder, deselected: deselected.count, waiting: waiting, peers: peers))
        guard !deselected.isEmpty else { return [] }
        var apply = ApplyRequest()
        apply.folders = [folder]
        apply.maxDelete = .percent(100)
        apply.requirePeers = peers
        try await applying(apply)
        return deselected
    }

    /// Removes originals whose copies the peers hold, each only if it is still the content that
    /// was imported. The count removed.
    func purge(_ items: [ImportItem]) -> Int {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
        defer { buffer.deallocate() }
        var removed = 0
        for item in items {
            guard let (_, hash) = try? FolderScanner.hashFile(item.source, blockSize: Int(BlockSize.forFileSize(item.size)), buffer: buffer),
                hash == item.hash
            else {
                diagnostics.error("\(item.source): changed since it was imported; kept")
                continue
            }
            if unlink(item.source) == 0 { removed += 1 } else { diagnostics.error("\(item.source): \(String(cString: strerror(errno)))") }
        }
        return removed
    }

    /// `photos/camera` → the folder `photos` and `camera`; the longest configured folder ID
    /// that the argument starts with wins (IDs may hold a '/').
    static func split(_ argument: String, in home: KaitenHome) throws -> (FolderConfiguration, String) {
        let trimmed = argument.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        let candidates = home.config.folders.filter { trimmed == $0.id || trimmed.hasPrefix($0.id + "/") }
        guard let folder = candidates.max(by: { $0.id.count < $1.id.count }) else {
            throw ArgumentError("\(argument): no configured folder (see `kaiten folder ls`)")
        }
        let subdirectory = String(trimmed.dropFirst(folder.id.count)).trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        if !subdirectory.isEmpty {
            do {
                try SafePath.validate(subdirectory)
            } catch {
                throw ArgumentError("\(argument): \(error.hint)")
            }
        }
        return (folder, subdirectory.precomposedStringWithCanonicalMapping)
    }

    /// The source, absolute: a directory that is neither inside the folder nor holds it.
    static func checkedSource(_ source: String, folder: FolderConfiguration) throws -> String {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw ArgumentError("\(source): not a directory")
        }
        let real = URL(fileURLWithPath: source).resolvingSymlinksInPath().path
        let folderReal = URL(fileURLWithPath: folder.path).resolvingSymlinksInPath().path
        if real == folderReal || real.hasPrefix(folderReal + "/") || folderReal.hasPrefix(real + "/") {
            throw ArgumentError("\(source) and the folder \(folder.id) (\(folder.path)) overlap: import from outside the folder")
        }
        return real
    }
}

/// One item of an import and its decision.
public typealias ImportItem = KaitenMedia.ImportItem
/// Where each imported file goes: {yyyy}, {mm}, {dd}, {name}, {stem}, {ext}.
public typealias ImportLayout = KaitenMedia.ImportLayout
