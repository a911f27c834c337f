import CZlib
import Foundation
import KaitenConfig
import KaitenProtocol

/// The scan cache and synced record of one folder, `<home>/scan/<folder>.cache`.
///
/// One binary file, replaced atomically after each scan: a header (`KAITENSC`, format
/// version), one record per local entry (stat, blocks, the synced version), then a CRC32 of
/// everything before it. A damaged cache is not an error but a warning: every file is hashed
/// again, and paths Kaiten synced look never-synced — which only ever makes a plan more
/// careful (conflicts instead of updates), never destructive.
public enum ScanCache {
    static let magic = Array("KAITENSC".utf8)
    /// 2: content hashes over block hashes only (BEPFileInfo.blocksHash). A format-1 cache is
    /// converted as it loads: each file's hash is recomputed from its stored blocks, and a synced
    /// record that had the old hash of the same content gets the new one.
    static let formatVersion: UInt32 = 2

    /// Loads a cache; a missing file is an empty tree; a damaged one is reported and ignored.
    /// - Parameter directory: keep only the entries below this directory (`ls` of one
    ///   directory: the others are stepped over, not decoded); nil keeps everything.
    public static func load(path: String, warn: (String) -> Void = { _ in }, under directory: String? = nil) -> LocalTree {
        guard let data = FileManager.default.contents(atPath: path) else { return LocalTree() }
        do {
            return try decode([UInt8](data), under: directory)
        } catch {
            warn("\(path): \(error); the folder will be hashed again and synced versions are forgotten")
            return LocalTree()
        }
    }

    /// Replaces the cache with `tree`, atomically.
    public static func save(_ tree: LocalTree, path: String) throws(ScanError) {
        do {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try AtomicFile.write(encode(tree), to: path, mode: 0o600)
        } catch {
            throw ScanError(.io, path: path, "cannot write the scan cache: \(error)")
        }
    }

    static func encode(_ tree: LocalTree) -> [UInt8] {
        var out = magic
        out.reserveCapacity(tree.count * 160)
        out.appendBigEndian(formatVersion)
        out.appendBigEndian(UInt32(tree.count))
        for path in tree.entries.keys.sorted() {
            let entry = tree.entries[path]!
            out.putString(path)
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
        let crc = out.withUnsafeBufferPointer { UInt32(crc32(0, $0.baseAddress, uInt($0.count))) }
        out.appendBigEndian(crc)
        return out
    }

    struct DecodeError: Error, CustomStringConvertible {
        let description: String
    }

    static func decode(_ bytes: [UInt8], under directory: String? = nil) throws -> LocalTree {
        let prefix = directory.map { $0.isEmpty ? "" : $0 + "/" }
        guard bytes.count >= 20, Array(bytes[0..<8]) == magic else { throw DecodeError(description: "not a Kaiten scan cache") }
        let body = bytes.count - 4
        let stored = bytes.withUnsafeBufferPointer { UInt32(crc32(0, $0.baseAddress, uInt(body))) }
        var reader = ByteReader(bytes: bytes, offset: 8, end: body)
        let format = try reader.u32()
        guard format == formatVersion || format == 1 else { throw DecodeError(description: "unknown scan cache format") }
        var tail = ByteReader(bytes: bytes, offset: body, end: bytes.count)
        guard try tail.u32() == stored else { throw DecodeError(description: "the scan cache is damaged (checksum mismatch)") }
        let count = Int(try reader.u32())
        var entries: [String: LocalFile] = [:]
        entries.reserveCapacity(count)
        for _ in 0..<count {
            let path = try reader.string()
            guard let kind = LocalFile.Kind(rawValue: try reader.u8()) else { throw DecodeError(description: "bad entry kind") }
            if let prefix, !path.hasPrefix(prefix) {
                try reader.skipEntry()
                continue
            }
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
            entries[path] = entry
        }
        return LocalTree(entries: entries)
    }
}

struct ByteReader {
    let bytes: [UInt8]
    var offset: Int

    /// Steps over the rest of a cache entry (after its path and kind), checking only that it
    /// fits.
    mutating func skipEntry() throws {
        offset += 8 + 8 + 8 + 4 + 32 + 4
        let blockCount = Int(try u32())
        guard blockCount <= (end - offset) / 40 else { throw ScanCache.DecodeError(description: "bad block count") }
        offset += 40 * blockCount
        _ = try string()
        if try u8() == 1 {
            offset += 32
            let counters = Int(try u32())
            guard counters <= (end - offset) / 16 else { throw ScanCache.DecodeError(description: "bad version") }
            offset += 16 * counters
        }
        guard offset <= end else { throw ScanCache.DecodeError(description: "an entry runs past the end") }
    }
    let end: Int

    mutating func take(_ n: Int) throws -> Range<Int> {
        guard n >= 0, end - offset >= n else { throw ScanCache.DecodeError(description: "truncated") }
        defer { offset += n }
        return offset..<(offset + n)
    }

    mutating func u8() throws -> UInt8 { bytes[try take(1).lowerBound] }

    mutating func u32() throws -> UInt32 {
        let r = try take(4)
        return bytes[r].reduce(0) { $0 << 8 | UInt32($1) }
    }

    mutating func u64() throws -> UInt64 {
        let r = try take(8)
        return bytes[r].reduce(0) { $0 << 8 | UInt64($1) }
    }

    mutating func hash() throws -> ContentHash {
        ContentHash(a: try u64(), b: try u64(), c: try u64(), d: try u64())
    }

    mutating func string() throws -> String {
        let length = Int(try u32())
        return String(decoding: bytes[try take(length)], as: UTF8.self)
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
