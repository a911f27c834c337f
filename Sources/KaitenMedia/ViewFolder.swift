import Foundation
import KaitenFiles
import KaitenConfig

#if canImport(Glibc)
import Glibc
#endif

/// A view folder (Sushitrain's photo folders): a sendonly folder whose files are the media of a
/// source directory laid out by a rule (by capture date), without copying a byte — each file of
/// the view is a *hard link* to its source file, so the scan, the announcements, the block server
/// (which reads the source's own inode and checks every block's SHA-256 before sending) and the
/// sends are the folder machinery Kaiten already has, verified against syncthing.
///
/// The definition lives in Kaiten's state (`state/views/FOLDER.json`), not in config.xml: the
/// folder there is a plain sendonly folder that syncthing itself would load.
///
/// A hard link needs the view and its source on one file system (`kaiten view add` checks);
/// it changes the source's link count and ctime, never its bytes, names or mtimes.
public struct ViewDefinition: Codable, Sendable, Equatable {
    /// The source directory (absolute).
    public var source: String
    public var layout: String

    public init(source: String, layout: String) {
        self.source = source
        self.layout = layout
    }

    static func path(_ home: Home, folder: String) -> String {
        ((home.stateDirectory as NSString).appendingPathComponent("views") as NSString).appendingPathComponent(Home.fileSafeName(folder) + ".json")
    }

    public static func load(_ home: Home, folder: String) throws -> ViewDefinition? {
        let file = path(home, folder: folder)
        guard let data = FileManager.default.contents(atPath: file) else { return nil }
        do {
            return try JSONDecoder().decode(ViewDefinition.self, from: data)
        } catch {
            throw MediaError("\(file): not a view definition (\(error)); remove it with `kaiten view rm \(folder)`")
        }
    }

    public func save(_ home: Home, folder: String) throws {
        let file = Self.path(home, folder: folder)
        try FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try AtomicFile.write(Array(try encoder.encode(self)), to: file)
    }

    public static func remove(_ home: Home, folder: String) {
        unlink(path(home, folder: folder))
        unlink(linksPath(home, folder: folder))
    }

    /// The view paths Kaiten linked, with the inode of each: only those are ever removed from
    /// the view (a file someone else put in the folder is left alone).
    static func linksPath(_ home: Home, folder: String) -> String {
        ((home.stateDirectory as NSString).appendingPathComponent("views") as NSString).appendingPathComponent(Home.fileSafeName(folder) + ".links")
    }
}

public enum ViewFolder {
    public struct Report: Sendable {
        /// View paths linked to a source file for the first time.
        public var linked: [String] = []
        /// View paths whose source file was replaced (a new inode under its name): linked again.
        public var relinked: [String] = []
        /// View paths whose source file is gone: removed from the view (deleted on the peers).
        public var removed: [String] = []
        public var kept = 0
        public var failed: [(path: String, why: String)] = []
        /// Files in the view's directory that Kaiten did not link: left alone.
        public var foreign: [String] = []
        /// The view's top-level entries (what the selection must hold for all of it to be sent).
        public var topLevel: [String] = []
    }

    /// Names in a folder's root that are syncthing's and never part of a view.
    static let reserved: Set<String> = [".stfolder", ".stignore", ".stversions"]

    /// Makes `root` (the folder's directory) the view of `definition.source`: each media file of
    /// the source linked at its layout path (a file already linked keeps its path, so a view is
    /// stable as the source grows; a new file taking a taken name gets " (2)"); links whose source
    /// is gone, removed; empty directories left behind, removed.
    public static func sync(_ definition: ViewDefinition, home: Home, folder: String, root: String, helpers: MediaHelpers?) async throws -> Report {
        let layout = try ImportLayout(definition.layout)
        var rootInfo = stat()
        guard stat(root, &rootInfo) == 0 else { throw MediaError("\(root): the view's folder directory is missing") }
        var sourceInfo = stat()
        guard stat(definition.source, &sourceInfo) == 0, (sourceInfo.st_mode & S_IFMT) == S_IFDIR else {
            throw MediaError("\(definition.source): the view's source is missing (an unmounted disk?); the view is left as it is")
        }
        guard sourceInfo.st_dev == rootInfo.st_dev else {
            throw MediaError("\(definition.source) and \(root) are on different file systems: a view links its files and cannot")
        }
        struct Inode: Hashable {
            let device: UInt64
            let number: UInt64
        }
        // What Kaiten linked before: view path → "device:inode".
        let manifestPath = ViewDefinition.linksPath(home, folder: folder)
        let manifest = FileManager.default.contents(atPath: manifestPath).flatMap { try? JSONDecoder().decode([String: String].self, from: $0) } ?? [:]
        // What the view holds now (Kaiten's links only): inode → view path.
        var viewed: [Inode: String] = [:]
        var viewFiles: [String: Inode] = [:]
        var foreign = Set<String>()
        if let walker = FileManager.default.enumerator(atPath: root) {
            while let relative = walker.nextObject() as? String {
                let name = (relative as NSString).lastPathComponent
                if !relative.contains("/") && reserved.contains(name) || name.hasPrefix(".syncthing.") {
                    if (walker.fileAttributes?[.type] as? FileAttributeType) == .typeDirectory { walker.skipDescendants() }
                    continue
                }
                var info = stat()
                guard lstat((root as NSString).appendingPathComponent(relative), &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
                let inode = Inode(device: UInt64(info.st_dev), number: UInt64(info.st_ino))
                guard manifest[relative] == "\(inode.device):\(inode.number)" else {
                    foreign.insert(relative)
                    continue
                }
                viewed[inode] = relative
                viewFiles[relative] = inode
            }
        }
        // The source's media, in path order (the order a new file's suffix is decided in).
        var sources: [(path: String, inode: Inode, modifiedNs: Int64)] = []
        for (full, info) in MediaWalk.files(under: definition.source) ?? [] {
            sources.append(
                (full, Inode(device: UInt64(info.st_dev), number: UInt64(info.st_ino)),
                 Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)))
        }
        sources.sort { $0.path < $1.path }
        // A source with nothing in it, under a view that has files, is far likelier an unmounted
        // disk than a library emptied on purpose: the view (and the peers' copies) stay.
        if sources.isEmpty && !viewFiles.isEmpty {
            throw MediaError(
                "\(definition.source) holds no pictures or videos now, and the view \(viewFiles.count): an unmounted disk? The view is left as it is (remove what it shows from the source one by one, or `kaiten view rm`)")
        }
        var report = Report()
        report.foreign = foreign.sorted()
        var claimed = foreign
        var toLink: [(source: String, view: String)] = []
        for source in sources where viewed[source.inode] != nil {
            claimed.insert(viewed[source.inode]!)
            report.kept += 1
        }
        for source in sources where viewed[source.inode] == nil {
            let date = await Importer.captureDate(of: source.path, modifiedNs: source.modifiedNs, helpers: helpers)
            let base = layout.path(name: (source.path as NSString).lastPathComponent, date: date).precomposedStringWithCanonicalMapping
            var destination = base
            var attempt = 1
            while claimed.contains(destination) {
                attempt += 1
                destination = Importer.suffixed(base, attempt)
            }
            claimed.insert(destination)
            toLink.append((source.path, destination))
        }
        // The manifest first, as it will be: a link shares its source's inode, so a crash after
        // any link below leaves each one recorded as Kaiten's.
        var links: [String: String] = [:]
        for source in sources {
            if let path = viewed[source.inode] { links[path] = "\(source.inode.device):\(source.inode.number)" }
        }
        var inodeOf: [String: Inode] = [:]
        for source in sources { inodeOf[source.path] = source.inode }
        for (source, view) in toLink { if let inode = inodeOf[source] { links[view] = "\(inode.device):\(inode.number)" } }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        try FileManager.default.createDirectory(atPath: (manifestPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try AtomicFile.write(Array(try encoder.encode(links)), to: manifestPath)
        // Links whose source is gone (or was replaced under a new inode): out of the view. One
        // that a new link takes the place of counts as relinked, not removed.
        let replaced = Set(toLink.map(\.view))
        for (path, _) in viewFiles where !claimed.contains(path) || replaced.contains(path) {
            let full = (root as NSString).appendingPathComponent(path)
            guard unlink(full) == 0 else {
                report.failed.append((path, String(cString: strerror(errno))))
                continue
            }
            if !replaced.contains(path) { report.removed.append(path) }
        }
        for (source, view) in toLink {
            let full = (root as NSString).appendingPathComponent(view)
            do {
                try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            } catch {
                report.failed.append((view, "\(error)"))
                continue
            }
            guard link(source, full) == 0 else {
                report.failed.append((view, "cannot link \(source): \(String(cString: strerror(errno)))"))
                continue
            }
            if viewFiles[view] != nil { report.relinked.append(view) } else { report.linked.append(view) }
        }
        removeEmptyDirectories(root, top: true)
        report.topLevel = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .filter { !reserved.contains($0) && !$0.hasPrefix(".syncthing.") }.sorted()
        report.removed.sort()
        return report
    }

    /// Removes directories that hold nothing (bottom-up); true when `path` itself was removed.
    @discardableResult
    static func removeEmptyDirectories(_ path: String, top: Bool = false) -> Bool {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else { return false }
        var left = names.count
        for name in names where !(top && reserved.contains(name)) {
            let child = (path as NSString).appendingPathComponent(name)
            var info = stat()
            if lstat(child, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR, removeEmptyDirectories(child) { left -= 1 }
        }
        return !top && left == 0 && rmdir(path) == 0
    }
}
