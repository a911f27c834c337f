import Foundation
import KaitenApply
import KaitenMedia
import KaitenReconcile
import KaitenSelection

// The `--json` documents of verbs whose results are not already Encodable, defined here so that
// every front-end (the command line, an HTTP API) writes the same fields.

/// One file of `kaiten import --json`: `{source, destination, decision, date, date_source, existing, error}`.
public struct ImportItemDocument: Encodable, Sendable {
    public var source: String
    public var destination: String?
    /// import, import-renamed, already-there, duplicate or failed.
    public var decision: String
    /// YYYY-MM-DD, the capture date the layout used.
    public var date: String?
    public var date_source: String?
    /// The file already holding this content (already-there, duplicate).
    public var existing: String?
    public var error: String?

    public init(_ item: ImportItem) {
        source = item.source
        date_source = item.date?.source.rawValue
        if let date = item.date { self.date = String(format: "%04d-%02d-%02d", date.year, date.month, date.day) }
        switch item.decision {
        case .copy:
            decision = item.renamed ? "import-renamed" : "import"
            destination = item.destination
        case .alreadyThere(let existing):
            decision = "already-there"
            self.existing = existing
        case .duplicate(let first):
            decision = "duplicate"
            existing = first
        case .failed(let why):
            decision = "failed"
            error = why
        }
    }
}

/// `kaiten thumb --json`: every file's outcome and the totals.
public struct ThumbnailRunDocument: Encodable, Sendable {
    public struct File: Encodable, Sendable {
        public var path: String
        /// made, cached or failed.
        public var status: String
        public var thumbnail: String?
        public var width: Int?
        public var height: Int?
        public var method: String?
        public var local: Bool
        public var size: Int64
        public var error: String?
    }

    public var files: [File]
    public var made: Int
    public var cached: Int
    public var failed: Int
    public var fetched_bytes: Int
    public var fetched_blocks: Int

    public init(_ run: ThumbnailRun) {
        files = run.outcomes.map {
            File(
                path: $0.path, status: $0.status.rawValue, thumbnail: $0.thumbnail, width: $0.width, height: $0.height,
                method: $0.method?.rawValue, local: $0.local, size: $0.size, error: $0.error)
        }
        made = run.outcomes.filter { $0.status == .made }.count
        cached = run.outcomes.filter { $0.status == .cached }.count
        failed = run.outcomes.filter { $0.status == .failed }.count
        fetched_bytes = run.fetchedBytes
        fetched_blocks = run.fetchedBlocks
    }
}

/// How every `--json` document and every Kaiten document of the REST API is encoded: sorted
/// keys, so that a diff of two runs shows what changed.
public enum JSONDocument {
    public static func encode<T: Encodable>(_ value: T) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        var data = try encoder.encode(value)
        data.append(0x0A)
        return data
    }
}

/// A folder's selection file (`GET /rest/kaiten/selection`): its lines as paths and patterns,
/// and the text itself.
public struct SelectionDocument: Encodable, Sendable {
    public let folder: String
    public let file: String
    public let paths: [String]
    public let patterns: [String]
    public let text: String

    public init(folder: String, file: String, _ selection: SelectionFile) {
        self.folder = folder
        self.file = file
        paths = selection.paths
        patterns = selection.patterns.map(\.pattern)
        text = selection.render()
    }
}

/// What selecting one argument did: `{argument, outcome, parent?, matching?}`; outcome is
/// selected, pattern, already-selected or covered.
public struct SelectedDocument: Encodable, Sendable {
    public let argument: String
    public let outcome: String
    public let parent: String?
    public let matching: Int?

    public init(_ selected: Selected) {
        switch selected {
        case .path(let path): (argument, outcome, parent, matching) = (path, "selected", nil, nil)
        case .pattern(let pattern, let count): (argument, outcome, parent, matching) = (pattern, "pattern", nil, count)
        case .alreadySelected(let path): (argument, outcome, parent, matching) = (path, "already-selected", nil, nil)
        case .coveredBy(let path, let by): (argument, outcome, parent, matching) = (path, "covered", by, nil)
        }
    }
}

/// What deselecting one argument did: outcome is deselected, pattern-removed, not-selected, or
/// (refused) selected-through a parent or selected-by-pattern.
public struct DeselectedDocument: Encodable, Sendable {
    public let argument: String
    public let outcome: String
    public let refused: Bool
    /// The parent directory or the pattern that keeps it selected.
    public let by: String?

    public init(_ deselected: Deselected) {
        refused = deselected.refused
        switch deselected {
        case .path(let path): (argument, outcome, by) = (path, "deselected", nil)
        case .pattern(let pattern): (argument, outcome, by) = (pattern, "pattern-removed", nil)
        case .notSelected(let path): (argument, outcome, by) = (path, "not-selected", nil)
        case .selectedThrough(let path, let parent): (argument, outcome, by) = (path, "selected-through", parent)
        case .selectedByPattern(let path, let pattern, _): (argument, outcome, by) = (path, "selected-by-pattern", pattern)
        }
    }
}

/// A conflict settled: `{folder, path, choice, outcome, copy?}`.
public struct ResolvedDocument: Encodable, Sendable {
    public let folder: String
    public let path: String
    public let choice: String
    /// selected-and-kept, kept-as-it-is, deleted-locally, local-kept-as-copy.
    public let outcome: String
    public let copy: String?

    public init(folder: String, path: String, choice: String, _ settled: Settled) {
        self.folder = folder
        self.path = path
        self.choice = choice
        switch settled {
        case .selectedAndKept: (outcome, copy) = ("selected-and-kept", nil)
        case .keptAsItIs: (outcome, copy) = ("kept-as-it-is", nil)
        case .deletedLocally: (outcome, copy) = ("deleted-locally", nil)
        case .localKeptAs(let path): (outcome, copy) = ("local-kept-as-copy", path)
        }
    }
}

/// A folder's files no peer holds in the same content (`GET /rest/kaiten/lastcopies`).
public struct LastCopiesDocument: Encodable, Sendable {
    public struct File: Encodable, Sendable {
        public let path: String
        public let size: Int64
        /// local-only (no device announced the path) or local-version (peers have other content).
        public let reason: String
    }

    public let folder: String
    public let files: [File]
    public let bytes: Int64

    public init(folder: String, _ files: [LastCopies.File]) {
        self.folder = folder
        self.files = files.map { File(path: $0.path, size: $0.size, reason: $0.reason) }
        bytes = files.reduce(0) { $0 + $1.size }
    }
}

/// One directory of a folder's global tree (`GET /rest/kaiten/ls`): the entries as `kaiten ls
/// --json` prints them.
public struct ListingDocument: Encodable, Sendable {
    public let folder: String
    public let directory: String
    public let entries: [Listing.Entry]
}

/// How an apply asked through the REST API ended: the exit code `kaiten apply` would exit with,
/// why when it was refused, and what was done.
public struct AppliedDocument: Encodable, Sendable {
    public let exit: Int32
    public let message: String?
    public let report: ApplyReport?
}

/// `kaiten decrypt --json`: every stored file's outcome and the totals.
public struct DecryptRunDocument: Encodable, Sendable {
    public struct File: Encodable, Sendable {
        /// The encrypted path, relative to the folder.
        public var stored: String
        /// The plain name, once decrypted.
        public var name: String?
        public var size: Int64
        /// written, verified, unchanged or failed.
        public var status: String
        public var error: String?
    }

    public var folder_id: String
    public var files: [File]
    public var written: Int
    public var verified: Int
    public var unchanged: Int
    public var failed: Int

    public init(_ run: DecryptRun) {
        folder_id = run.folderID
        files = run.outcomes.map { File(stored: $0.stored, name: $0.name, size: $0.size, status: $0.status.rawValue, error: $0.error) }
        written = run.outcomes.count { $0.status == .written }
        verified = run.outcomes.count { $0.status == .verified }
        unchanged = run.outcomes.count { $0.status == .unchanged }
        failed = run.failed
    }
}
