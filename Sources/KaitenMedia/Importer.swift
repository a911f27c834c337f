import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenScan
import KaitenSync

#if canImport(Glibc)
import Glibc
#endif

/// Where an imported file goes, from a template: `{yyyy}`, `{mm}`, `{dd}` (the capture date),
/// `{name}` (the file's name), `{stem}` and `{ext}` (its parts). The result must be a clean
/// folder-relative path.
public struct ImportLayout: Sendable {
    public let template: String

    public static let standard = "{yyyy}/{mm}/{name}"

    public init(_ template: String) throws {
        guard template.contains("{name}") || template.contains("{stem}") else {
            throw MediaError("--layout \(template): must contain {name} or {stem}, or every file would get the same name")
        }
        let known = ["{yyyy}", "{mm}", "{dd}", "{name}", "{stem}", "{ext}"]
        var rest = template
        for token in known { rest = rest.replacingOccurrences(of: token, with: "") }
        if rest.contains("{") || rest.contains("}") {
            throw MediaError("--layout \(template): the tokens are {yyyy}, {mm}, {dd}, {name}, {stem} and {ext}")
        }
        self.template = template
    }

    public func path(name: String, date: CaptureDate) -> String {
        let dot = name.lastIndex(of: ".").flatMap { $0 == name.startIndex ? nil : $0 }
        let stem = dot.map { String(name[..<$0]) } ?? name
        let ext = dot.map { String(name[name.index(after: $0)...]) } ?? ""
        return template
            .replacingOccurrences(of: "{yyyy}", with: String(format: "%04d", date.year))
            .replacingOccurrences(of: "{mm}", with: String(format: "%02d", date.month))
            .replacingOccurrences(of: "{dd}", with: String(format: "%02d", date.day))
            .replacingOccurrences(of: "{name}", with: name)
            .replacingOccurrences(of: "{stem}", with: stem)
            .replacingOccurrences(of: "{ext}", with: ext)
    }
}

/// The day a picture was taken, and how that is known.
public struct CaptureDate: Sendable, Equatable {
    public enum Source: String, Sendable, Codable {
        /// EXIF DateTimeOriginal (the camera's clock).
        case exif
        /// The container's creation time (QuickTime/MP4), in this machine's time zone.
        case video
        /// The file's modification time, in this machine's time zone.
        case mtime
    }

    public var year: Int
    public var month: Int
    public var day: Int
    public var source: Source

    /// `YYYY:MM:DD HH:MM:SS` (EXIF) or `YYYY-MM-DDTHH:MM:SS…Z` (ffmpeg's creation_time).
    static func parse(exif text: String) -> CaptureDate? {
        let digits = text.prefix(10).split(whereSeparator: { $0 == ":" || $0 == "-" }).compactMap { Int($0) }
        guard digits.count == 3, (1900...2999).contains(digits[0]), (1...12).contains(digits[1]), (1...31).contains(digits[2]) else {
            return nil
        }
        return CaptureDate(year: digits[0], month: digits[1], day: digits[2], source: .exif)
    }

    static func local(_ seconds: Int64, source: Source) -> CaptureDate {
        var time = time_t(seconds)
        var parts = tm()
        localtime_r(&time, &parts)
        return CaptureDate(year: Int(parts.tm_year) + 1900, month: Int(parts.tm_mon) + 1, day: Int(parts.tm_mday), source: source)
    }

    /// ffmpeg's ISO 8601 UTC creation time, as a day in this machine's time zone.
    static func parse(iso text: String) -> CaptureDate? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let date = formatter.date(from: text) ?? ISO8601DateFormatter().date(from: text)
        guard let date, date.timeIntervalSince1970 > 86_400 else { return nil }  // 1970-01-01: a camera that never set it
        return local(Int64(date.timeIntervalSince1970), source: .video)
    }
}

/// One file of the source and what importing it does.
public struct ImportItem: Sendable {
    public enum Decision: Sendable, Equatable {
        /// Copied to `destination` (folder-relative).
        case copy
        /// Its content is in the folder already (under `existing`, perhaps another name) or was
        /// imported before (and perhaps deleted since): not again.
        case alreadyThere(existing: String)
        /// The same content as another file of this import.
        case duplicate(of: String)
        case failed(String)
    }

    /// The file in the source (absolute).
    public var source: String
    public var size: Int64
    public var modifiedNs: Int64
    public var hash: ContentHash
    public var date: CaptureDate?
    public var destination: String
    public var decision: Decision
    /// The destination was taken by other content: a suffix was added.
    public var renamed = false
}

/// What was imported into a folder, ever: `<home>/state/imports/<folder>.txt`, one line per
/// file, `HASH<TAB>PATH`, appended and fsynced as each file lands. It is what makes an import
/// idempotent for content the folder no longer has (deleted on the peers since: not again).
public struct ImportRecord: Sendable {
    public let path: String
    public private(set) var entries: [(hash: ContentHash, path: String)] = []

    public init(home: Home, folder: String) {
        path = ((home.stateDirectory as NSString).appendingPathComponent("imports") as NSString)
            .appendingPathComponent(Home.fileSafeName(folder) + ".txt")
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        for line in TextLines.nonEmpty(text) {
            let parts = line.split(separator: "\t", maxSplits: 1)
            guard parts.count == 2, let bytes = Hex.decode(parts[0]), let hash = ContentHash(bytes: bytes) else { continue }
            entries.append((hash, String(parts[1])))
        }
    }

    public mutating func append(_ hash: ContentHash, path name: String) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw MediaError("\(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let line = Array("\(hash.hex)\t\(name)\n".utf8)
        guard line.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == line.count, fsync(fd) == 0 else {
            throw MediaError("\(path): \(String(cString: strerror(errno)))")
        }
        entries.append((hash, name))
    }
}

/// `kaiten import`: new photos and videos from a card, a phone's mount or a download folder,
/// copied into a folder in a dated layout, each once by content.
public enum Importer {
    /// The media files under `source`, hashed (syncthing's blocks, as the scan cuts them) and
    /// dated, and what to do with each: the pure part of an import (nothing is written).
    /// - Parameters:
    ///   - known: content already in the folder (global index, local scan, earlier imports) → a path.
    ///   - taken: paths the folder has (global index and disk), which a new file must not take.
    ///   - root: the folder's directory (a name taken on disk since the last scan is taken too).
    public static func plan(
        source: String, root: String, subdirectory: String, layout: ImportLayout, known: [ContentHash: String], taken: Set<String>,
        helpers: MediaHelpers?
    ) async throws -> [ImportItem] {
        var files: [(path: String, size: Int64, mtime: Int64)] = []
        let root = (source as NSString).standardizingPath
        guard let media = MediaWalk.files(under: root) else { throw MediaError("\(source): cannot read this directory") }
        for (full, info) in media {
            files.append((full, Int64(info.st_size), Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)))
        }
        files.sort { $0.path < $1.path }
        var items: [ImportItem] = []
        var seen: [ContentHash: String] = [:]
        var claimed = taken
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
        defer { buffer.deallocate() }
        for file in files {
            let name = (file.path as NSString).lastPathComponent
            let hash: ContentHash
            do {
                hash = try FolderScanner.hashFile(file.path, blockSize: Int(BlockSize.forFileSize(file.size)), buffer: buffer).1
            } catch {
                items.append(ImportItem(source: file.path, size: file.size, modifiedNs: file.mtime, hash: .zero, date: nil, destination: "", decision: .failed("\(error)")))
                continue
            }
            var item = ImportItem(source: file.path, size: file.size, modifiedNs: file.mtime, hash: hash, date: nil, destination: "", decision: .copy)
            if let existing = known[hash] {
                item.decision = .alreadyThere(existing: existing)
                items.append(item)
                continue
            }
            if let first = seen[hash] {
                item.decision = .duplicate(of: first)
                items.append(item)
                continue
            }
            let date = await captureDate(of: file.path, modifiedNs: file.mtime, helpers: helpers)
            item.date = date
            var destination = layout.path(name: name, date: date)
            if !subdirectory.isEmpty { destination = subdirectory + "/" + destination }
            destination = destination.precomposedStringWithCanonicalMapping
            // A name taken by other content gets a suffix: "IMG_0001 (2).JPG".
            var attempt = 1
            let base = destination
            func occupied(_ path: String) -> Bool {
                var info = stat()
                return claimed.contains(path) || lstat((root as NSString).appendingPathComponent(path), &info) == 0
            }
            while occupied(destination) {
                attempt += 1
                destination = Self.suffixed(base, attempt)
                item.renamed = true
            }
            item.destination = destination
            claimed.insert(destination)
            seen[hash] = destination
            items.append(item)
        }
        return items
    }

    static func suffixed(_ path: String, _ n: Int) -> String {
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        let dot = name.lastIndex(of: ".").flatMap { $0 == name.startIndex ? nil : $0 }
        let renamed = dot.map { "\(name[..<$0]) (\(n))\(name[$0...])" } ?? "\(name) (\(n))"
        return directory.isEmpty ? renamed : directory + "/" + renamed
    }

    /// EXIF DateTimeOriginal for a JPEG, the container's creation time for a video (through
    /// the helper), else the modification time.
    static func captureDate(of path: String, modifiedNs: Int64, helpers: MediaHelpers?) async -> CaptureDate {
        if MediaKind.isJPEG(path), let handle = FileHandle(forReadingAtPath: path) {
            let prefix = [UInt8](handle.readData(ofLength: 128 << 10))
            try? handle.close()
            if let text = JPEGMetadata(prefix: prefix)?.dateTimeOriginal, let date = CaptureDate.parse(exif: text) { return date }
        }
        if MediaKind(path: path) == .video, let helpers, case .success(let text) = await helpers.videoCreationTime(path),
            let date = CaptureDate.parse(iso: text)
        {
            return date
        }
        // HEIC, PNG, WebP, TIFF: their EXIF as libvips reads it.
        if MediaKind(path: path) == .image, !MediaKind.isJPEG(path), let helpers, case .success(let text) = await helpers.imageCaptureTime(path),
            let date = CaptureDate.parse(exif: text)
        {
            return date
        }
        return CaptureDate.local(modifiedNs / 1_000_000_000, source: .mtime)
    }

    /// Copies one planned file into the folder: a temp file beside its place, fsynced, its
    /// modification time kept, renamed into place without replacing anything (a name taken
    /// meanwhile is an error, never an overwrite), the directory fsynced.
    public static func copy(_ item: ImportItem, into root: String) throws {
        let target = (root as NSString).appendingPathComponent(item.destination)
        let directory = (target as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let temp = (directory as NSString).appendingPathComponent(".syncthing.\((target as NSString).lastPathComponent).tmp")
        let input = open(item.source, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard input >= 0 else { throw MediaError("\(item.source): \(String(cString: strerror(errno)))") }
        defer { close(input) }
        unlink(temp)
        let output = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard output >= 0 else { throw MediaError("\(temp): \(String(cString: strerror(errno)))") }
        var finished = false
        defer {
            close(output)
            if !finished { unlink(temp) }
        }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var copied: Int64 = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw MediaError("\(item.source): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            var done = 0
            while done < n {
                let w = buffer.withUnsafeBytes { write(output, $0.baseAddress! + done, n - done) }
                if w < 0 && errno == EINTR { continue }
                guard w > 0 else { throw MediaError("\(temp): \(String(cString: strerror(errno)))") }
                done += w
            }
            copied += Int64(n)
        }
        guard copied == item.size else { throw MediaError("\(item.source): changed while it was copied (\(copied) bytes, not \(item.size))") }
        var times = [
            timespec(tv_sec: time_t(item.modifiedNs / 1_000_000_000), tv_nsec: Int(item.modifiedNs % 1_000_000_000)),
            timespec(tv_sec: time_t(item.modifiedNs / 1_000_000_000), tv_nsec: Int(item.modifiedNs % 1_000_000_000)),
        ]
        guard futimens(output, &times) == 0, fsync(output) == 0 else { throw MediaError("\(temp): \(String(cString: strerror(errno)))") }
        // link() never replaces (rename would): the place may have been taken since the plan (a
        // peer's file pulled). A crash between link and unlink leaves a temp name beside it.
        guard link(temp, target) == 0 else {
            let why = errno == EEXIST ? "the name was taken meanwhile; import again for a new one" : String(cString: strerror(errno))
            throw MediaError("\(item.destination): \(why)")
        }
        finished = true
        unlink(temp)
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 {
            fsync(fd)
            close(fd)
        }
    }

    /// Content the folder has: every live path of the global index, the local scan, and the
    /// import record (content imported once is never imported again, even deleted since).
    public static func known(home: KaitenHome, folder: String, record: ImportRecord) throws -> (known: [ContentHash: String], taken: Set<String>) {
        let log = try PeerGenerations.openLog(home: home, folder: folder, readOnly: true)
        defer { log.close() }
        var known: [ContentHash: String] = [:]
        var taken = Set<String>()
        for entry in record.entries { known[entry.hash] = entry.path }
        log.index.forEachGlobal { entry in
            // Every device's announcement: content a peer still holds (an older version, one
            // deleted elsewhere) counts as there.
            for (_, announced) in entry.announcements where !announced.isDeleted && announced.type == .file {
                known[announced.contentHash] = known[announced.contentHash] ?? entry.path
            }
            guard !entry.file.isDeleted else { return }
            taken.insert(entry.path)
            if entry.file.type == .file { known[entry.file.contentHash] = entry.path }
        }
        let scan = ScanCache.load(path: home.home.scanCachePath(folderID: folder))
        for file in scan.files {
            taken.insert(file.path)
            if file.kind == .file { known[file.contentHash] = file.path }
        }
        return (known, taken)
    }
}

/// One import into a folder, done: what was planned for each file of the source, what landed.
public struct ImportRun: Sendable {
    public var items: [ImportItem]
    /// The files copied in (and recorded, and selected).
    public var imported: [ImportItem]
    public var failed: Int { items.filter { if case .failed = $0.decision { return true } else { return false } }.count }
}

extension Importer {
    /// Plans the import of `source` into `folder`, and unless `dryRun` copies the new files in,
    /// records each in the import record as it lands, and selects them (a line each, so that
    /// each can be freed alone). Sending is the caller's next step (apply, or a service round).
    public static func run(
        source: String, folder: FolderConfiguration, subdirectory: String, layout: ImportLayout, home: KaitenHome, dryRun: Bool,
        helpers: MediaHelpers?
    ) async throws -> ImportRun {
        var record = ImportRecord(home: home.home, folder: folder.id)
        let (known, taken) = try Importer.known(home: home, folder: folder.id, record: record)
        var items = try await Importer.plan(
            source: source, root: folder.path, subdirectory: subdirectory, layout: layout, known: known, taken: taken, helpers: helpers)
        var imported: [ImportItem] = []
        if !dryRun {
            for i in items.indices where items[i].decision == .copy {
                do {
                    try Importer.copy(items[i], into: folder.path)
                    try record.append(items[i].hash, path: items[i].destination)
                    imported.append(items[i])
                } catch {
                    items[i].decision = .failed("\(error)")
                }
            }
            if !imported.isEmpty { try selectPaths(imported.map(\.destination), folder: folder.id, home: home) }
        }
        return ImportRun(items: items, imported: imported)
    }

    /// Adds `paths` to the folder's selection file (each its own line; those covered already
    /// are left as they are).
    public static func selectPaths(_ paths: [String], folder: String, home: KaitenHome) throws {
        let file = home.home.selectionPath(folderID: folder)
        var (selection, _) = try Planner.readSelection(file)
        var changed = false
        for path in paths {
            if case .added = try selection.select(path) { changed = true }
        }
        guard changed else { return }
        try Planner.writeSelection(selection, to: file)
    }
}

extension Importer {
    /// Offload's decision: of `paths` (imported into `folder`), those that at least `peers`
    /// devices hold at exactly the imported version (the global index as last refreshed) are
    /// deselected; the rest stay. Apply (or a service round) then frees what was deselected,
    /// re-checking each deletion against the peers connected at that moment.
    public static func deselectHeld(home: KaitenHome, folder: String, paths: [String], peers: Int) throws -> (deselected: [String], waiting: Int) {
        let log = try PeerGenerations.openLog(home: home, folder: folder, readOnly: true)
        let record = ImportRecord(home: home.home, folder: folder)
        var imported: [String: ContentHash] = [:]
        for entry in record.entries { imported[entry.path] = entry.hash }
        var held: [String] = []
        var waiting = 0
        for path in paths {
            guard let g = log.index.global(path), !g.file.isDeleted, g.file.contentHash == imported[path], g.holders.count >= peers else {
                waiting += 1
                continue
            }
            held.append(path)
        }
        log.close()
        let file = home.home.selectionPath(folderID: folder)
        var (selection, _) = try Planner.readSelection(file)
        var deselected: [String] = []
        for path in held where try selection.deselect(path) { deselected.append(path) }
        if !deselected.isEmpty { try Planner.writeSelection(selection, to: file) }
        return (deselected, waiting)
    }
}
