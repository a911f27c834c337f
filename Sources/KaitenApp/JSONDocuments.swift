import Foundation
import KaitenMedia

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
