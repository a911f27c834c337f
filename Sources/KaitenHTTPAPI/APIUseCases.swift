import Foundation
import KaitenIndex
import KaitenProtocol

/// What the REST API asks of the use-case layer (KaitenApp gives it): the same calls the verbs
/// make, with their checks. A front-end, the API decides nothing about files itself.
///
/// Kaiten's own documents come back as JSON already encoded the way the verbs' `--json`
/// encodes them (one schema for both); syncthing's shapes are made by the router from values.
public protocol APIUseCases: Sendable {
    // Kaiten's own, under /rest/kaiten/.
    /// `{folder, file, paths, patterns, text}`.
    func selection(folder: String) throws -> Data
    /// Replaces the selection file with `text`, each new line checked as `kaiten select` checks
    /// an argument (unless `force`); the file is written once, after every line was accepted.
    func replaceSelection(folder: String, text: String, force: Bool) throws -> Data
    func select(folder: String, paths: [String], force: Bool) throws -> Data
    func deselect(folder: String, paths: [String]) throws -> Data
    /// The plan as `kaiten plan --json` prints it.
    func plan(folders: [String]) async throws -> Data
    /// As `kaiten conflicts --json`.
    func conflicts(folders: [String]) async throws -> Data
    func resolve(folder: String, path: String, choice: String) throws -> Data
    /// Files whose version no peer holds: deleting them here would lose them.
    func lastCopies(folders: [String]) throws -> Data
    /// One directory of the global tree as `kaiten ls --json` sees it: `{folder, directory, entries}`.
    func listing(folder: String, directory: String) throws -> Data
    /// The live global entries matching `query`: `{folder, total, entries, truncated}`.
    func search(folder: String, query: SearchQuery) throws -> Data
    /// {"url": …}: a signed link (an hour) to a file's global version on the service's on-demand
    /// server, ranges and all; to its thumbnail with `thumbnail` pixels.
    func link(folder: String, path: String, thumbnail: Int?) throws -> Data
    /// {"links": {path: url}}: signed links to the thumbnails of the images and videos directly
    /// in a directory of the global tree.
    func thumbnailLinks(folder: String, directory: String, size: Int) throws -> Data
    /// Applies `plan` (a plan document as `plan` gave it) as `kaiten apply PLAN` does:
    /// `{exit, message, report}`.
    /// {running, actions, done, failed, files_done, files_total, bytes_done, bytes_total,
    /// current}: how far the apply asked through `apply(plan:)` has come.
    func applyProgress() throws -> Data
    func apply(plan: Data) async throws -> Data

    // syncthing's db endpoints, read from the index log and the last scan (as `kaiten ls`).
    /// What a device needs of a folder, in path order: this device (nil) what its selection
    /// asks for and does not have, a peer every live global version it does not hold.
    func need(folder: String, device: DeviceID?) throws -> [FileEntry]
    /// The live global entries under `prefix` ("" the root), `levels` below it (nil: all).
    func browse(folder: String, prefix: String, levels: Int?) throws -> [GlobalEntry]
    /// One path: its global version, this device's, and who holds the global one.
    func file(folder: String, path: String) throws -> APIFileVersions
    /// In a receive-only folder, what was changed here (differs from the global version or is
    /// not in it); nothing in others.
    func localChanges(folder: String) throws -> [APILocalVersion]
    /// The folder's `.stignore` as written and as Kaiten reads it.
    func ignores(folder: String) throws -> (lines: [String], error: String?)

    // Configuration, with `kaiten folder`/`kaiten peer`'s checks and atomic write.
    /// Creates or changes a folder from syncthing's JSON object (`replace`: PUT; else PATCH).
    func putFolder(id: String, object: [String: Any], replace: Bool) throws
    func putDevice(id: DeviceID, object: [String: Any], replace: Bool) throws
    func removeFolder(id: String) throws
    func removeDevice(id: DeviceID) throws
    /// Pauses or resumes the devices named (every peer: nil).
    func setPaused(_ paused: Bool, devices: [DeviceID]?) throws
    /// Sets keys of `<gui>` or `<options>` (`section`).
    func patchSection(_ section: String, object: [String: Any]) throws
    /// A whole configuration in syncthing's JSON form: folders and devices added, changed and
    /// removed, `gui` and `options` changed.
    func replaceConfiguration(_ object: [String: Any]) throws
}

/// A refusal a use case explains: the HTTP status and the one line that says why.
public struct APIFailure: Error, Sendable, CustomStringConvertible {
    public let status: Int
    public let message: String

    public init(status: Int, _ message: String) {
        self.status = status
        self.message = message
    }

    public var description: String { message }
}

/// One path of a folder: its global version, this device's and who holds the global one.
public struct APIFileVersions: Sendable {
    public var global: FileEntry?
    /// As this device has it: announced (a folder that sends), else as the last scan saw it.
    public var local: APILocalVersion?
    public var holders: [DeviceID]

    public init(global: FileEntry?, local: APILocalVersion?, holders: [DeviceID]) {
        self.global = global
        self.local = local
        self.holders = holders
    }
}

/// A path as this device has it: what it announced, or what its last scan saw.
public struct APILocalVersion: Sendable {
    public var name: String
    public var type: BEPFileInfoType
    public var size: Int64
    public var modifiedNs: Int64
    public var permissions: UInt32
    public var deleted: Bool
    public var invalid: Bool
    public var version: BEPVector
    public var sequence: Int64
    public var modifiedBy: UInt64
    public var blockCount: Int

    public init(
        name: String, type: BEPFileInfoType, size: Int64, modifiedNs: Int64, permissions: UInt32, deleted: Bool = false, invalid: Bool = false,
        version: BEPVector = BEPVector(), sequence: Int64 = 0, modifiedBy: UInt64 = 0, blockCount: Int = 0
    ) {
        self.name = name
        self.type = type
        self.size = size
        self.modifiedNs = modifiedNs
        self.permissions = permissions
        self.deleted = deleted
        self.invalid = invalid
        self.version = version
        self.sequence = sequence
        self.modifiedBy = modifiedBy
        self.blockCount = blockCount
    }

    public init(_ entry: FileEntry) {
        self.init(
            name: entry.name, type: entry.type, size: entry.size, modifiedNs: entry.modifiedS * 1_000_000_000 + Int64(entry.modifiedNs),
            permissions: entry.permissions, deleted: entry.isDeleted, invalid: entry.isInvalid, version: entry.version, sequence: entry.sequence,
            modifiedBy: entry.modifiedBy, blockCount: Int(entry.blockCount))
    }
}
