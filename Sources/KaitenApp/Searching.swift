import Foundation
import KaitenConfig
import KaitenIndex
import KaitenReconcile
import KaitenSelection
import KaitenService
import KaitenSync
import KaitenTransfer

/// The web page's search box (`GET /rest/kaiten/search`): a folder's global index searched by
/// name, type, size and date (``SearchQuery``), read from the index alone (no scan), so that it
/// answers at once whatever the folder's size.
public struct SearchResult: Encodable, Sendable {
    public struct Entry: Encodable, Sendable {
        public let path: String
        public let type: String
        public let size: Int64
        public let modified: String
        /// How many devices hold the global version.
        public let peers: Int
        /// `explicit`, `parent` or `no`, as `kaiten ls` says it.
        public let selected: String
    }
    public let folder: String
    /// Every entry that matched; `entries` holds the first `limit` of them, in path order.
    public let total: Int
    public let entries: [Entry]
    public let truncated: Bool
}

extension App {
    /// The live global entries of `folder` that match `query`, in path order.
    /// - Throws: ``ConfigError`` for an unknown folder; ``ArgumentError`` for a bad glob or type.
    /// - Parameter kept: logs kept open between requests (a long-running front-end's).
    public func search(_ folder: String, _ query: SearchQuery, kept: IndexLogKeeper? = nil) throws -> SearchResult {
        let matcher = try SearchMatcher(query)
        let opened = try openForReading()
        let log = try kept?.log(folder, in: opened) { try openLog(folder, in: opened) } ?? openLog(folder, in: opened)
        var matched: [GlobalEntry] = []
        var total = 0
        log.index.forEachGlobal(below: "", recursive: true, named: matcher.mayMatch(name:)) { entry in
            guard !entry.holders.isEmpty, !entry.file.isDeleted, matcher.matches(entry) else { return }
            total += 1
            matched.append(entry)
        }
        matched.sort { $0.path < $1.path }
        let shown = matched.prefix(max(0, min(query.limit, SearchQuery.maximumLimit)))
        let (file, _) = try Planner.readSelection(opened.home.selectionPath(folderID: folder))
        let selection = Selection(file, global: log.index)
        let entries = shown.map { entry in
            SearchResult.Entry(
                path: entry.path, type: Listing.typeName(entry.file), size: entry.file.size, modified: Listing.rfc3339(entry.file),
                peers: entry.holders.count, selected: selection.state(of: entry.path).rawValue)
        }
        return SearchResult(folder: folder, total: total, entries: entries, truncated: total > entries.count)
    }
}

/// Whether a global entry matches a query: the pure part of ``App/search(_:_:)``.
struct SearchMatcher {
    enum Name {
        case any
        case glob(Glob, wholePath: Bool)
        /// Lowercased, and its bytes when it is ASCII.
        case substring(String, ascii: [UInt8]?)
    }
    let name: Name
    let query: SearchQuery

    init(_ query: SearchQuery) throws(ArgumentError) {
        self.query = query
        if let type = query.type, !SearchQuery.types.contains(type) {
            throw ArgumentError("type \"\(type)\" is not one of \(SearchQuery.types.joined(separator: ", "))")
        }
        let text = query.text.trimmingCharacters(in: .whitespaces)
        if text.isEmpty {
            name = .any
        } else if Glob.hasMetacharacters(text) {
            do {
                name = .glob(try Glob(text), wholePath: text.contains("/"))
            } catch {
                throw ArgumentError("\(error)")
            }
        } else {
            let lowered = Glob.unescape(text).lowercased()
            name = .substring(lowered, ascii: lowered.utf8.allSatisfy { $0 < 0x80 } ? Array(lowered.utf8) : nil)
        }
    }

    /// Whether a path named `name` (UTF-8) can match, from its name alone: a search passes over
    /// the rest of every other path without reading it.
    func mayMatch(name: UnsafeRawBufferPointer) -> Bool {
        switch self.name {
        case .any: return true
        case .glob(let glob, let wholePath):
            let path = String(decoding: name, as: UTF8.self)
            return glob.matches(wholePath ? path : String(SafePath.lastComponent(path)))
        case .substring(let text, let ascii):
            if let ascii { return Self.contains(name, ascii: ascii) }
            return String(decoding: name, as: UTF8.self).lowercased().contains(text)
        }
    }

    func matches(_ entry: GlobalEntry) -> Bool {
        matches(path: entry.path, type: Listing.typeName(entry.file), size: entry.file.size, modifiedS: entry.file.modifiedS)
    }

    func matches(path: String, type: String, size: Int64, modifiedS: Int64) -> Bool {
        if let wanted = query.type, type != wanted { return false }
        if let minSize = query.minSize, size < minSize { return false }
        if let maxSize = query.maxSize, size > maxSize { return false }
        if let after = query.modifiedAfter, modifiedS < after { return false }
        if let before = query.modifiedBefore, modifiedS >= before { return false }
        switch name {
        case .any: return true
        case .glob(let glob, let wholePath): return glob.matches(wholePath ? path : String(SafePath.lastComponent(path)))
        case .substring(let text, let ascii): return Self.contains(path, lowercased: text, ascii: ascii)
        }
    }

    /// Case-insensitive containment; ASCII names (most) compared byte by byte, without a copy.
    static func contains(_ path: String, lowercased text: String, ascii needle: [UInt8]?) -> Bool {
        if let needle {
            // A non-ASCII path may still contain an ASCII needle: only ASCII bytes were folded,
            // which is exact for an ASCII needle (UTF-8 never puts ASCII bytes inside a
            // multi-byte character).
            let found = path.utf8.withContiguousStorageIfAvailable { contains(UnsafeRawBufferPointer($0), ascii: needle) }
            if let found { return found }
        }
        return path.lowercased().contains(text)
    }

    /// Whether `bytes`, ASCII letters folded to lower case, contain the lower-case ASCII `needle`.
    static func contains(_ bytes: UnsafeRawBufferPointer, ascii needle: [UInt8]) -> Bool {
        guard needle.count <= bytes.count else { return false }
        var start = 0
        while start + needle.count <= bytes.count {
            var at = 0
            while at < needle.count {
                var byte = bytes[start + at]
                if byte >= 0x41 && byte <= 0x5A { byte += 0x20 }
                if byte != needle[at] { break }
                at += 1
            }
            if at == needle.count { return true }
            start += 1
        }
        return false
    }
}

/// Index logs kept open between a long-running front-end's requests (the REST API's): a folder's
/// log is read again only when its file changed (appended to, or replaced by a compaction), so
/// that a search of 100,000 paths does not replay the log each time.
public final class IndexLogKeeper: @unchecked Sendable {  // state behind the lock
    private let lock = NSLock()
    private var logs: [String: (log: IndexLog, stamp: FileStamp?)] = [:]

    public init() {}

    func log(_ folder: String, in home: KaitenHome, open: () throws -> IndexLog) throws -> IndexLog {
        let stamp = FileStamp(home.home.indexLogPath(folderID: folder))
        lock.lock()
        defer { lock.unlock() }
        if let kept = logs[folder], kept.stamp == stamp { return kept.log }
        let log = try open()
        logs[folder] = (log, stamp)
        return log
    }
}
