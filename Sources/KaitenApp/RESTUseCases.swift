import Foundation
import KaitenApply
import KaitenConfig
import KaitenHTTPAPI
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSelection
import KaitenService
import KaitenSync
import KaitenTransfer

/// The REST API's calls, each one of App's use cases: the verbs' checks, their writes, their
/// JSON documents. An error becomes the HTTP status that says whose fault it is.
public struct RESTUseCases: APIUseCases {
    let app: App
    /// The folders' logs, kept open between searches.
    let logs = IndexLogKeeper()
    /// How far the apply asked through the API has come.
    let progress = ApplyProgress()

    public init(app: App) { self.app = app }

    // MARK: Kaiten's own

    public func selection(folder: String) throws -> Data {
        try answering {
            let opened = try app.openForReading()
            _ = try App.folders([folder], in: opened)
            let file = opened.home.selectionPath(folderID: folder)
            let (selection, _) = try Planner.readSelection(file)
            return try JSONDocument.encode(SelectionDocument(folder: folder, file: file, selection))
        }
    }

    public func replaceSelection(folder: String, text: String, force: Bool) throws -> Data {
        try answering {
            let selection = try app.replaceSelection(folder, text: text, force: force)
            return try JSONDocument.encode(SelectionDocument(folder: folder, file: try app.openForReading().home.selectionPath(folderID: folder), selection))
        }
    }

    public func select(folder: String, paths: [String], force: Bool) throws -> Data {
        try answering { try JSONDocument.encode(try app.select(folder, paths, force: force).map(SelectedDocument.init)) }
    }

    public func deselect(folder: String, paths: [String]) throws -> Data {
        try answering { try JSONDocument.encode(try app.deselect(folder, paths).map(DeselectedDocument.init)) }
    }

    public func plan(folders: [String]) async throws -> Data {
        var request = PlanRequest()
        request.folders = folders
        do {
            return try JSONDocument.encode(try await app.plan(request))
        } catch {
            throw Self.failure(error)
        }
    }

    public func conflicts(folders: [String]) async throws -> Data {
        do {
            return try JSONDocument.encode(try await app.conflicts(folders: folders, requirePeers: nil))
        } catch {
            throw Self.failure(error)
        }
    }

    public func resolve(folder: String, path: String, choice: String) throws -> Data {
        try answering {
            guard let settles = Conflict.Choice(rawValue: choice) else {
                throw ArgumentError("choice \"\(choice)\": one of \(Conflict.Choice.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            let (clean, settled) = try app.resolve(folder, path: path, choice: settles)
            return try JSONDocument.encode(ResolvedDocument(folder: folder, path: clean, choice: choice, settled))
        }
    }

    public func lastCopies(folders: [String]) throws -> Data {
        try answering {
            let opened = try app.openForReading()
            var documents: [LastCopiesDocument] = []
            for id in try App.folders(folders, in: opened) {
                let log = try app.openLog(id, in: opened)
                defer { log.close() }
                let files = LastCopies.find(global: log.index, tree: Planner.lastScan(id, home: opened), me: opened.identity.deviceID)
                documents.append(LastCopiesDocument(folder: id, files))
            }
            return try JSONDocument.encode(documents)
        }
    }

    public func listing(folder: String, directory: String) throws -> Data {
        try answering {
            let listing = try app.list(folder, under: directory, recursive: false, deleted: false)
            return try JSONDocument.encode(ListingDocument(folder: folder, directory: listing.directory, entries: listing.entries))
        }
    }

    public func search(folder: String, query: SearchQuery) throws -> Data {
        try answering { try JSONDocument.encode(try app.search(folder, query, kept: logs)) }
    }

    public func link(folder: String, path: String, thumbnail: Int?) throws -> Data {
        try answering {
            let url = try app.link(folder, path: path, seconds: 3600, thumbnailSize: thumbnail)
            return try JSONSerialization.data(withJSONObject: ["url": url], options: [.sortedKeys])
        }
    }

    public func thumbnailLinks(folder: String, directory: String, size: Int) throws -> Data {
        try answering {
            let links = try app.thumbnailLinks(folder, directory: directory, size: size, seconds: 3600)
            return try JSONSerialization.data(withJSONObject: ["links": links], options: [.sortedKeys])
        }
    }

    public func applyProgress() throws -> Data {
        try JSONDocument.encode(progress.snapshot)
    }

    public func apply(plan data: Data) async throws -> Data {
        let plan: Plan
        do {
            plan = try PlanFile.decode(data, from: "the request's plan")
        } catch {
            throw APIFailure(status: 400, "\(error) (send the plan as /rest/kaiten/plan gave it)")
        }
        var request = ApplyRequest()
        request.plan = plan
        let progress = self.progress
        let frontEnd = ApplyFrontEnd(confirm: { _ in true }, events: { progress.record($0) }, stop: StopSignal(), installsSignals: false)
        progress.began()
        defer { progress.ended() }
        do {
            let outcome = try await app.apply(request, frontEnd)
            let status = outcome.status(failOnConflict: false)
            return try JSONDocument.encode(AppliedDocument(exit: status.code, message: nil, report: outcome.report))
        } catch let ended as VerbEnded {
            // A refusal (stale, a brake, the lock) is the verb's answer, with its exit code.
            return try JSONDocument.encode(AppliedDocument(exit: ended.status.code, message: ended.message, report: nil))
        } catch let refused as ControlFailure {
            // The same, said by the service that applies.
            return try JSONDocument.encode(AppliedDocument(exit: refused.code, message: refused.message, report: nil))
        } catch {
            throw Self.failure(error)
        }
    }

    // MARK: syncthing's db endpoints

    public func need(folder: String, device: DeviceID?) throws -> [FileEntry] {
        try answering {
            try reading(folder) { opened, config, log in
                var needed: [FileEntry] = []
                if let device, device != opened.identity.deviceID {
                    _ = FolderCompletion.remote(global: log.index, device: device) { needed.append($0.file) }
                } else {
                    _ = try Planner.completion(config, home: opened, log: log) { needed.append($0.file) }
                }
                return needed.sorted { $0.name < $1.name }
            }
        }
    }

    public func browse(folder: String, prefix: String, levels: Int?) throws -> [GlobalEntry] {
        try answering {
            try reading(folder) { _, _, log in
                let directory = prefix.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
                if !directory.isEmpty {
                    guard let entry = log.index.global(directory), !entry.file.isDeleted, entry.file.type == .directory else {
                        throw APIFailure(status: 404, "no directory \(directory) in the global index of \(folder)")
                    }
                }
                let depth = directory.isEmpty ? 0 : WireName.components(directory).count
                return log.index.list(under: directory, recursive: levels != 0, includeDeleted: false).filter { entry in
                    guard let levels, levels >= 0 else { return true }
                    return WireName.components(entry.path).count - depth <= levels + 1
                }
            }
        }
    }

    public func file(folder: String, path: String) throws -> APIFileVersions {
        try answering {
            try reading(folder) { opened, config, log in
                let clean = path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
                let global = log.index.global(clean)
                var local: APILocalVersion?
                if config.type == .sendreceive || config.type == .sendonly, let announced = Self.announced(clean, folder: folder, home: opened) {
                    local = APILocalVersion(announced)
                } else if let scanned = Planner.lastScan(folder, home: opened)[clean] {
                    local = Self.version(scanned, global: global?.file)
                }
                guard global != nil || local != nil else { throw APIFailure(status: 404, "no such object in the index") }
                return APIFileVersions(global: global?.file, local: local, holders: global?.holders ?? [])
            }
        }
    }

    public func localChanges(folder: String) throws -> [APILocalVersion] {
        try answering {
            try reading(folder) { opened, config, log in
                guard config.type == .receiveonly else { return [] }
                let tree = Planner.lastScan(folder, home: opened)
                var changed: [APILocalVersion] = []
                for file in tree.files {
                    let global = log.index.global(file.path)
                    if let global, !global.file.isDeleted, Self.same(file, global.file) { continue }
                    changed.append(Self.version(file, global: global?.file))
                }
                return changed.sorted { $0.name < $1.name }
            }
        }
    }

    public func ignores(folder: String) throws -> (lines: [String], error: String?) {
        try answering {
            let opened = try app.openForReading()
            let config = try opened.config.folders(named: [folder])[0]
            let path = (config.path as NSString).appendingPathComponent(".stignore")
            guard let data = FileManager.default.contents(atPath: path) else { return ([], nil) }
            guard let text = String(data: data, encoding: .utf8) else { return ([], "\(path): not UTF-8 text") }
            var lines = text.components(separatedBy: "\n").map { $0.hasSuffix("\r") ? String($0.dropLast()) : $0 }
            if lines.last == "" { lines.removeLast() }
            return (lines, nil)
        }
    }

    // MARK: Configuration

    public func putFolder(id: String, object: [String: Any], replace: Bool) throws {
        try editing { edit in try Self.put(folder: id, object, replace: replace, in: edit) }
    }

    public func putDevice(id: DeviceID, object: [String: Any], replace: Bool) throws {
        try editing { edit in try Self.put(device: id, object, replace: replace, in: edit) }
    }

    public func removeFolder(id: String) throws {
        try editing { try $0.removeFolder(id) }
    }

    public func removeDevice(id: DeviceID) throws {
        try editing { edit in
            guard edit.config.device(id: id) != nil else { throw APIFailure(status: 404, "No device with given ID") }
            try edit.removeDevice(id)
        }
    }

    public func setPaused(_ paused: Bool, devices: [DeviceID]?) throws {
        try editing { edit in
            for device in devices ?? edit.config.devices.map(\.id).filter({ $0 != edit.me }) {
                guard edit.config.device(id: device) != nil else { throw APIFailure(status: 404, "not found") }
                try edit.patchDevice(device, with: ["paused": NSNumber(value: paused)])
            }
        }
    }

    public func patchSection(_ section: String, object: [String: Any]) throws {
        try editing { try $0.patchSection(section, with: object) }
    }

    /// A whole configuration (what `syncthing cli config … set` sends back after changing one
    /// value): folders and devices added, changed and removed, `gui` and `options` changed;
    /// the other sections are Kaiten's to keep. One write.
    public func replaceConfiguration(_ object: [String: Any]) throws {
        try editing { edit in
            guard let folders = object["folders"] as? [[String: Any]], let devices = object["devices"] as? [[String: Any]] else {
                throw ArgumentError("a configuration has \"folders\" and \"devices\" lists")
            }
            var deviceIDs: [DeviceID] = []
            for device in devices {
                let text = device["deviceID"] as? String ?? ""
                guard let id = try? DeviceID(text) else { throw ArgumentError("\"\(text)\": not a device ID") }
                deviceIDs.append(id)
                // New devices first: a folder may be shared with one.
                if edit.config.device(id: id) == nil { try Self.put(device: id, device, replace: true, in: edit) }
            }
            for device in devices {
                let id = try DeviceID(device["deviceID"] as? String ?? "")
                try Self.put(device: id, device, replace: true, in: edit)
            }
            let folderIDs = folders.map { $0["id"] as? String ?? "" }
            for id in edit.config.folders.map(\.id) where !folderIDs.contains(id) { try edit.removeFolder(id) }
            for folder in folders { try Self.put(folder: folder["id"] as? String ?? "", folder, replace: true, in: edit) }
            for id in edit.config.devices.map(\.id) where id != edit.me && !deviceIDs.contains(id) { try edit.removeDevice(id) }
            for section in ["gui", "options"] {
                if let part = object[section] as? [String: Any] { try edit.patchSection(section, with: part) }
            }
        }
    }

    /// A folder PUT (`replace`: created when missing) or PATCHed.
    private static func put(folder id: String, _ object: [String: Any], replace: Bool, in edit: ConfigEdit) throws {
        guard !id.isEmpty else { throw ArgumentError("folder has empty ID") }
        if edit.config.folder(id: id) == nil {
            guard replace else { throw APIFailure(status: 404, "No folder with given ID") }
            let shares = try (object["devices"] as? [[String: Any]] ?? []).map { try DeviceID($0["deviceID"] as? String ?? "") }
            _ = try edit.addFolder(
                id, path: object["path"] as? String ?? "", label: object["label"] as? String, type: object["type"] as? String ?? "sendreceive",
                shares: shares)
        }
        try edit.patchFolder(id, with: object)
    }

    private static func put(device id: DeviceID, _ object: [String: Any], replace: Bool, in edit: ConfigEdit) throws {
        if edit.config.device(id: id) == nil {
            guard replace else { throw APIFailure(status: 404, "No device with given ID") }
            try edit.addDevice(
                id, name: object["name"] as? String ?? "", addresses: object["addresses"] as? [String] ?? [],
                compression: object["compression"] as? String ?? "metadata")
        }
        try edit.patchDevice(id, with: object)
    }

    /// One configuration change: the edits, then one checked write.
    private func editing(_ body: (ConfigEdit) throws -> Void) throws {
        try answering {
            let edit = ConfigEdit(try app.open())
            try body(edit)
            try edit.commit()
        }
    }

    // MARK: Parts

    /// Runs `body` with a folder's configuration and its index log open.
    private func reading<T>(_ folder: String, _ body: (KaitenHome, FolderConfiguration, IndexLog) throws -> T) throws -> T {
        let opened = try app.openForReading()
        let config = try opened.config.folders(named: [folder])[0]
        let log = try app.openLog(folder, in: opened)
        defer { log.close() }
        return try body(opened, config, log)
    }

    private static func announced(_ path: String, folder: String, home: KaitenHome) -> FileEntry? {
        let localPath = home.home.localIndexPath(folderID: folder)
        guard FileManager.default.fileExists(atPath: localPath), let log = try? IndexLog.open(path: localPath, folderID: folder, readOnly: true)
        else { return nil }
        defer { log.close() }
        return log.index.entry(path, from: home.identity.deviceID)
    }

    private static func same(_ file: LocalFile, _ global: FileEntry) -> Bool {
        switch file.kind {
        case .directory: return global.type == .directory
        case .symlink: return global.isSymlink && global.symlinkTarget == file.symlinkTarget
        case .file: return global.type == .file && Reconciler.contentHash(of: file) == Reconciler.contentHash(of: global)
        }
    }

    /// A scanned file as a version: the global one's version vector when the content is the same.
    private static func version(_ file: LocalFile, global: FileEntry?) -> APILocalVersion {
        let type: BEPFileInfoType = file.kind == .directory ? .directory : file.kind == .symlink ? .symlink : .file
        let matches = global.map { same(file, $0) } ?? false
        return APILocalVersion(
            name: file.path, type: type, size: file.size, modifiedNs: file.modifiedNs, permissions: file.permissions,
            version: matches ? global!.version : BEPVector(), blockCount: file.blocks.count)
    }

    private func answering<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch { throw Self.failure(error) }
    }

    /// Whose fault an error is, as an HTTP status: 404 what is not there, 400 what was asked
    /// wrong, 500 what went wrong here.
    static func failure(_ error: any Error) -> APIFailure {
        switch error {
        case let failure as APIFailure: return failure
        case let config as ConfigError:
            switch config.code {
            case .unknownFolder, .unknownDevice: return APIFailure(status: 404, "\(config)")
            case .missingFile, .unreadable, .writeFailed: return APIFailure(status: 500, "\(config)")
            default: return APIFailure(status: 400, "\(config)")
            }
        case is SelectionError, is ArgumentError, is DeviceIDError, is ApplyError: return APIFailure(status: 400, "\(error)")
        case let control as ControlFailure:
            return APIFailure(status: control.code == ExitStatus.usage.code ? 400 : 500, control.message)
        default: return APIFailure(status: 500, "\(error)")
        }
    }
}
