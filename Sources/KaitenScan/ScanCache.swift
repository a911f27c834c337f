import CKaitenCRC32
import Foundation
import KaitenFiles
import KaitenConfig
import KaitenProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The scan cache and synced record of one folder, `<home>/scan/<folder>.cache`.
///
/// One binary file, replaced atomically after each scan: a header (`KAITENSC`, format version,
/// entry count), one record per local entry (stat, blocks, the synced version) sorted by path
/// bytes, a table of the records' offsets, then a CRC32 of everything before it. The table lets
/// the file be read in place (``ScanImage``): a tree loaded from it looks a path up by bisection
/// and decodes only what it is asked for. A damaged cache is not an error but a warning: every
/// file is hashed again, and paths Kaiten synced look never-synced — which only ever makes a plan
/// more careful (conflicts instead of updates), never destructive.
public enum ScanCache {
    static let magic = Array("KAITENSC".utf8)
    /// 3: records sorted by path bytes and an offset table before the checksum (read in place).
    /// 2: content hashes over block hashes only (BEPFileInfo.blocksHash); read into memory and
    /// written as 3 by the next save. A format-1 cache is converted as it loads: each file's hash
    /// is recomputed from its stored blocks, and a synced record that had the old hash of the
    /// same content gets the new one.
    static let formatVersion: UInt32 = 3

    /// Loads a cache; a missing file is an empty tree; a damaged one is reported and ignored.
    /// - Parameter directory: keep only the entries below this directory (`ls` of one
    ///   directory: the others are stepped over, not decoded); nil keeps everything, read in place.
    public static func load(path: String, warn: (String) -> Void = { _ in }, under directory: String? = nil) -> LocalTree {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno != ENOENT { warn("\(path): cannot open: \(String(cString: strerror(errno))); the folder will be hashed again") }
            return LocalTree()
        }
        defer { close(fd) }
        do {
            var info = stat()
            guard fstat(fd, &info) == 0 else { throw DecodeError(description: "cannot stat: \(String(cString: strerror(errno)))") }
            let size = Int(info.st_size)
            guard size >= 20 else { throw DecodeError(description: "not a Kaiten scan cache") }
            var header = [UInt8](repeating: 0, count: 12)
            guard pread(fd, &header, 12, 0) == 12, Array(header[0..<8]) == magic else {
                throw DecodeError(description: "not a Kaiten scan cache")
            }
            let format = header[8..<12].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            guard format == formatVersion else {
                // An older format is read whole into memory; the next save writes format 3.
                guard let data = FileManager.default.contents(atPath: path) else {
                    throw DecodeError(description: "cannot read")
                }
                return try decode([UInt8](data), under: directory)
            }
            let image = try ScanImage.map(fd: fd, size: size)
            guard let directory else { return LocalTree(base: image) }
            // `ls` of one directory: its records only, in memory; the mapping goes.
            var entries: [String: LocalFile] = [:]
            for i in image.range(withPrefix: directory.isEmpty ? "" : directory + "/") {
                if let file = image.file(at: i) { entries[file.path] = file }
            }
            return LocalTree(entries: entries)
        } catch {
            warn("\(path): \(error); the folder will be hashed again and synced versions are forgotten")
            return LocalTree()
        }
    }

    /// Replaces the cache with `tree`, atomically.
    public static func save(_ tree: LocalTree, path: String) throws(ScanError) {
        try write(encode(tree), path: path)
    }

    /// Replaces the cache with `tree` and returns the same tree read in place from what was
    /// written: its records leave the heap. Should another process replace the cache between the
    /// write and the read, `tree` is returned as it was.
    public static func saveAndReadInPlace(_ tree: LocalTree, path: String) throws(ScanError) -> LocalTree {
        let bytes = encode(tree)
        try write(bytes, path: path)
        let written = bytes[(bytes.count - 4)...].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let reread = load(path: path)
        guard let image = reread.base, image.checksum == written, reread.count == tree.count else { return tree }
        return reread
    }

    private static func write(_ bytes: [UInt8], path: String) throws(ScanError) {
        do {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try AtomicFile.write(bytes, to: path, mode: 0o600)
        } catch {
            throw ScanError(.io, path: path, "cannot write the scan cache: \(error)")
        }
    }

    /// The bytes of a cache holding `tree`. Records a tree read in place still holds unchanged are
    /// copied as they are, not decoded and encoded again.
    /// - Parameter format: 3; 2 (no offset table) only to make old caches in tests.
    static func encode(_ tree: LocalTree, format: UInt32 = formatVersion) -> [UInt8] {
        var out = magic
        out.reserveCapacity(tree.count * 160)
        out.appendBigEndian(format)
        out.appendBigEndian(UInt32(tree.count))
        var offsets: [UInt64] = []
        offsets.reserveCapacity(tree.count)
        let changed = tree.changed.values.map { (bytes: Array($0.path.utf8), file: $0) }.sorted {
            $0.bytes.lexicographicallyPrecedes($1.bytes)
        }
        var next = changed.startIndex
        func appendChanged(through key: UnsafeRawBufferPointer?) {
            while next < changed.endIndex {
                if let key, changed[next].bytes.withUnsafeBytes({ ByteOrder.compare($0, key) }) >= 0 { return }
                offsets.append(UInt64(out.count))
                encodeRecord(changed[next].file, into: &out)
                next += 1
            }
        }
        if let base = tree.base {
            let overridden = !tree.changed.isEmpty || !tree.removed.isEmpty
            for i in 0..<base.count {
                let path = base.pathBytes(i)
                appendChanged(through: path)
                if overridden {
                    let name = String(decoding: path, as: UTF8.self)
                    if tree.changed[name] != nil || tree.removed.contains(name) { continue }
                }
                offsets.append(UInt64(out.count))
                out.append(contentsOf: base.recordBytes(i))
            }
        }
        appendChanged(through: nil)
        if format >= 3 {
            for offset in offsets { out.appendBigEndian(offset) }
        }
        let crc = out.withUnsafeBufferPointer { kaiten_crc32(0, $0.baseAddress, $0.count) }
        out.appendBigEndian(crc)
        return out
    }

    static func encodeRecord(_ entry: LocalFile, into out: inout [UInt8]) {
        out.putString(entry.path)
        out.append(entry.kind.rawValue)
        out.appendBigEndian(UInt64(bitPattern: entry.size))
        out.appendBigEndian(UInt64(bitPattern: entry.modifiedNs))
        out.appendBigEndian(entry.inode)
        out.appendBigEndian(entry.permissions)
        out.putHash(entry.contentHash)
        out.appendBigEndian(UInt32(bitPattern: entry.blockSize))
        out.appendBigEndian(UInt32(entry.blocks.count))
        for block in entry.blocks {
            out.putHash(block.hash)
            out.appendBigEndian(block.weakHash)
            out.appendBigEndian(UInt32(bitPattern: block.size))
        }
        out.putString(entry.symlinkTarget)
        if let synced = entry.synced {
            out.append(1)
            out.putHash(synced.contentHash)
            out.appendBigEndian(UInt32(synced.version.counters.count))
            for counter in synced.version.counters {
                out.appendBigEndian(counter.id)
                out.appendBigEndian(counter.value)
            }
        } else {
            out.append(0)
        }
    }

    struct DecodeError: Error, CustomStringConvertible {
        let description: String
    }

    /// Every record of a cache in any format, into memory.
    static func decode(_ bytes: [UInt8], under directory: String? = nil) throws -> LocalTree {
        let prefix = directory.map { $0.isEmpty ? "" : $0 + "/" }
        return try bytes.withUnsafeBytes { (raw: UnsafeRawBufferPointer) throws(DecodeError) -> LocalTree in
            guard raw.count >= 20, Array(raw[0..<8]) == magic else { throw DecodeError(description: "not a Kaiten scan cache") }
            let body = raw.count - 4
            let stored = kaiten_crc32(0, raw.baseAddress!, body)
            guard raw.bigEndianU32(at: body) == stored else { throw DecodeError(description: "the scan cache is damaged (checksum mismatch)") }
            var reader = ByteReader(bytes: raw, offset: 8, end: body)
            let format = try reader.u32()
            guard (1...formatVersion).contains(format) else { throw DecodeError(description: "unknown scan cache format") }
            let count = Int(try reader.u32())
            if format >= 3 {
                // The records end where the offset table starts.
                guard body - 16 >= 8 * count else { throw DecodeError(description: "the offset table runs past the start") }
                reader = ByteReader(bytes: raw, offset: 16, end: body - 8 * count)
            }
            var entries: [String: LocalFile] = [:]
            entries.reserveCapacity(prefix == nil ? count : 0)
            for _ in 0..<count {
                let start = reader.offset
                let path = try reader.stringBytes()
                if let prefix, !ScanImage.withBytes(prefix, { path.starts(with: $0) }) {
                    _ = try reader.u8()
                    try reader.skipEntry()
                    continue
                }
                reader.offset = start
                let entry = try decodeRecord(&reader, format: format)
                entries[entry.path] = entry
            }
            return LocalTree(entries: entries)
        }
    }

    /// One record, from its path on.
    static func decodeRecord(_ reader: inout ByteReader, format: UInt32) throws(DecodeError) -> LocalFile {
        let path = try reader.string()
        guard let kind = LocalFile.Kind(rawValue: try reader.u8()) else { throw DecodeError(description: "bad entry kind") }
        var entry = LocalFile(path: path, kind: kind)
        entry.size = Int64(bitPattern: try reader.u64())
        entry.modifiedNs = Int64(bitPattern: try reader.u64())
        entry.inode = try reader.u64()
        entry.permissions = try reader.u32()
        entry.contentHash = try reader.hash()
        entry.blockSize = Int32(bitPattern: try reader.u32())
        let blockCount = Int(try reader.u32())
        guard blockCount <= (reader.end - reader.offset) / 40 else { throw DecodeError(description: "bad block count") }
        entry.blocks.reserveCapacity(blockCount)
        for _ in 0..<blockCount {
            entry.blocks.append(LocalBlock(hash: try reader.hash(), weakHash: try reader.u32(), size: Int32(bitPattern: try reader.u32())))
        }
        entry.symlinkTarget = try reader.string()
        if try reader.u8() == 1 {
            let hash = try reader.hash()
            let counters = Int(try reader.u32())
            guard counters <= (reader.end - reader.offset) / 16 else { throw DecodeError(description: "bad version") }
            var version = BEPVector()
            version.counters.reserveCapacity(counters)
            for _ in 0..<counters {
                var counter = BEPCounter()
                counter.id = try reader.u64()
                counter.value = try reader.u64()
                version.counters.append(counter)
            }
            entry.synced = SyncedVersion(version: version, contentHash: hash)
        }
        if format == 1 && entry.kind == .file && !entry.blocks.isEmpty {
            let old = entry.contentHash
            entry.contentHash = BEPFileInfo.blocksHash(ofHashes: entry.blocks.map(\.hash))
            if entry.synced?.contentHash == old { entry.synced?.contentHash = entry.contentHash }
        }
        return entry
    }
}

/// Reads big-endian fields of a scan cache or journal, never past `end`.
struct ByteReader {
    let bytes: UnsafeRawBufferPointer
    var offset: Int
    let end: Int

    /// Steps over the rest of a cache entry (after its path and kind), checking only that it
    /// fits.
    mutating func skipEntry() throws(ScanCache.DecodeError) {
        _ = try take(8 + 8 + 8 + 4 + 32 + 4)
        let blockCount = Int(try u32())
        guard blockCount <= (end - offset) / 40 else { throw ScanCache.DecodeError(description: "bad block count") }
        _ = try take(40 * blockCount)
        _ = try stringBytes()
        if try u8() == 1 {
            _ = try take(32)
            let counters = Int(try u32())
            guard counters <= (end - offset) / 16 else { throw ScanCache.DecodeError(description: "bad version") }
            _ = try take(16 * counters)
        }
    }

    mutating func take(_ n: Int) throws(ScanCache.DecodeError) -> Int {
        guard n >= 0, end - offset >= n else { throw ScanCache.DecodeError(description: "truncated") }
        defer { offset += n }
        return offset
    }

    mutating func u8() throws(ScanCache.DecodeError) -> UInt8 { bytes[try take(1)] }

    mutating func u32() throws(ScanCache.DecodeError) -> UInt32 { bytes.bigEndianU32(at: try take(4)) }

    mutating func u64() throws(ScanCache.DecodeError) -> UInt64 { bytes.bigEndianU64(at: try take(8)) }

    mutating func hash() throws(ScanCache.DecodeError) -> ContentHash {
        ContentHash(a: try u64(), b: try u64(), c: try u64(), d: try u64())
    }

    mutating func stringBytes() throws(ScanCache.DecodeError) -> UnsafeRawBufferPointer {
        let length = Int(try u32())
        let at = try take(length)
        return UnsafeRawBufferPointer(rebasing: bytes[at..<(at + length)])
    }

    mutating func string() throws(ScanCache.DecodeError) -> String {
        String(decoding: try stringBytes(), as: UTF8.self)
    }
}

extension Array where Element == UInt8 {
    mutating func putHash(_ h: ContentHash) {
        appendBigEndian(h.a)
        appendBigEndian(h.b)
        appendBigEndian(h.c)
        appendBigEndian(h.d)
    }

    mutating func putString(_ s: String) {
        appendBigEndian(UInt32(s.utf8.count))
        append(contentsOf: s.utf8)
    }
}
