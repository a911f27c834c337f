import CKaitenCRC32
import Foundation
import KaitenProtocol
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `<home>/scan/<folder>.synced`: the version apply writes at a path, recorded just before the
/// rename that puts it there, so the synced record never lags behind the disk.
///
/// The scan cache is saved once, after a folder's apply; a crash before that would forget which
/// version each file just written is, and a later plan could then take an older version on a
/// peer for an update. Each record is appended before its rename and carries the content it
/// belongs to: on load, a record counts only where the file on disk has that content (the
/// rename happened), so a record whose rename never happened is harmless. Records are
/// `[length u32][path, content hash, version][crc32 u32]`; loading stops at the first damaged
/// one (a torn tail). The journal is folded into the scan cache and emptied by the next plan.
public final class SyncedJournal: Sendable {
    let path: String
    private let fd: Mutex<Int32>

    /// Opens (creating) the journal for appending.
    public init(path: String) throws(ScanError) {
        try? FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ScanError(.io, path: path, "cannot open the synced journal: \(String(cString: strerror(errno)))") }
        self.path = path
        self.fd = Mutex(fd)
    }

    deinit { fd.withLock { _ = close($0) } }

    /// The journal beside a scan cache.
    public static func path(forCache cachePath: String) -> String {
        ((cachePath as NSString).deletingPathExtension as NSString).appendingPathExtension("synced")!
    }

    /// Appends one record. Not fsynced on its own: ``sync()`` runs before the directory fsync
    /// that makes a batch of renames durable. A record lost to a crash only makes a later plan
    /// more careful (the file looks never synced: a conflict, not an update).
    public func record(_ name: String, _ synced: SyncedVersion) throws(ScanError) {
        let bytes = Self.encode(name, synced)
        let written = fd.withLock { fd in bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
        guard written == bytes.count else {
            throw ScanError(.io, path: path, "cannot write the synced journal: \(String(cString: strerror(errno)))")
        }
    }

    /// Makes every record so far durable.
    public func sync() {
        fd.withLock { _ = fsync($0) }
    }

    static func encode(_ name: String, _ synced: SyncedVersion) -> [UInt8] {
        var payload: [UInt8] = []
        payload.putString(name)
        payload.putHash(synced.contentHash)
        payload.appendBigEndian(UInt32(synced.version.counters.count))
        for counter in synced.version.counters {
            payload.appendBigEndian(counter.id)
            payload.appendBigEndian(counter.value)
        }
        var out: [UInt8] = []
        out.appendBigEndian(UInt32(payload.count))
        out += payload
        out.appendBigEndian(payload.withUnsafeBufferPointer { kaiten_crc32(0, $0.baseAddress, $0.count) })
        return out
    }

    /// The records in the journal, oldest first, up to the first damaged one.
    public static func load(path: String) -> [(name: String, synced: SyncedVersion)] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        let bytes = [UInt8](data)
        var records: [(name: String, synced: SyncedVersion)] = []
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset + 8 <= raw.count {
                let length = Int(raw.bigEndianU32(at: offset))
                guard length <= raw.count - offset - 8 else { break }
                let start = offset + 4
                let crc = kaiten_crc32(0, raw.baseAddress! + start, length)
                guard crc == raw.bigEndianU32(at: start + length) else { break }
                var reader = ByteReader(bytes: raw, offset: start, end: start + length)
                guard let name = try? reader.string(), let hash = try? reader.hash(), let count = try? Int(reader.u32()),
                    count <= length / 16
                else { break }
                var version = BEPVector()
                var ok = true
                for _ in 0..<count {
                    guard let id = try? reader.u64(), let value = try? reader.u64() else {
                        ok = false
                        break
                    }
                    var counter = BEPCounter()
                    counter.id = id
                    counter.value = value
                    version.counters.append(counter)
                }
                guard ok else { break }
                records.append((name, SyncedVersion(version: version, contentHash: hash)))
                offset = start + length + 4
            }
        }
        return records
    }

    /// Folds the journal into a scanned tree: a record applies where the file on disk has the
    /// record's content and the record's version is newer than what the tree says (a record
    /// left from an earlier apply never rolls the synced record back).
    /// Returns how many entries changed.
    @discardableResult
    public static func merge(path: String, into tree: inout LocalTree, contentHash: (LocalFile) -> ContentHash?) -> Int {
        var changed = 0
        for (name, synced) in load(path: path) {
            guard let file = tree[name], contentHash(file) == synced.contentHash else { continue }
            if let existing = file.synced {
                let order = synced.version.compare(existing.version)
                guard order == .greater || (order == .equal && existing.contentHash != synced.contentHash) else { continue }
            }
            tree[name]?.synced = synced
            changed += 1
        }
        return changed
    }

    /// Empties the journal once the scan cache holds everything in it.
    public static func clear(path: String) {
        unlink(path)
    }
}
