import Crypto
import Foundation

/// A SHA-256 digest held inline (four words, no heap allocation), so a million index entries
/// or scan records can carry one cheaply.
public struct ContentHash: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var a: UInt64, b: UInt64, c: UInt64, d: UInt64

    public static let zero = ContentHash(a: 0, b: 0, c: 0, d: 0)

    public init(a: UInt64, b: UInt64, c: UInt64, d: UInt64) {
        self.a = a
        self.b = b
        self.c = c
        self.d = d
    }

    /// From 32 digest bytes; nil for any other length.
    public init?<Bytes: Collection>(bytes: Bytes) where Bytes.Element == UInt8 {
        guard bytes.count == 32 else { return nil }
        // Index replay builds one per entry: read the words straight from contiguous storage.
        if let hash = bytes.withContiguousStorageIfAvailable({ ContentHash(raw: UnsafeRawBufferPointer($0)) }) {
            self = hash
        } else {
            self = Array(bytes).withUnsafeBytes { ContentHash(raw: $0) }
        }
    }

    public init?(data: Data) {
        guard data.count == 32 else { return nil }
        self = data.withUnsafeBytes { ContentHash(raw: $0) }
    }

    /// From exactly 32 bytes.
    init(raw: UnsafeRawBufferPointer) {
        self.init(
            a: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
            b: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
            c: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 16, as: UInt64.self)),
            d: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 24, as: UInt64.self)))
    }

    public init(_ digest: SHA256.Digest) {
        self = digest.withUnsafeBytes { ContentHash(raw: $0) }
    }

    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(32)
        for word in [a, b, c, d] {
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(word >> UInt64(shift) & 0xFF)) }
        }
        return out
    }

    /// Lower-case hex.
    public var hex: String { Hex.encode(bytes) }

    public var description: String { hex }

    public static func < (l: ContentHash, r: ContentHash) -> Bool { (l.a, l.b, l.c, l.d) < (r.a, r.b, r.c, r.d) }
}

extension BEPFileInfo {
    /// Kaiten's content identity of a regular file: SHA-256 over its blocks' SHA-256 hashes, in
    /// order — syncthing 2.x's `blocks_hash` (lib/protocol/bep_fileinfo.go at v2.1.3).
    ///
    /// Syncthing 1.x also hashed each block's weak hash, so the same bytes announced by a 1.x and
    /// a 2.x peer carry two different `blocks_hash` values (bep-compat §6). Kaiten therefore never
    /// compares a peer's announced value: it computes this one itself, from the block list for
    /// what peers announce and from the bytes for what is on disk.
    public static func blocksHash<S: Sequence>(of blocks: S) -> ContentHash where S.Element == BEPBlockInfo {
        var hasher = SHA256()
        for block in blocks { hasher.update(data: block.hash) }
        return ContentHash(hasher.finalize())
    }

    /// The same over raw block hashes (a local scan's blocks).
    public static func blocksHash<S: Sequence>(ofHashes hashes: S) -> ContentHash where S.Element == ContentHash {
        var hasher = SHA256()
        for hash in hashes { hasher.update(data: hash.bytes) }
        return ContentHash(hasher.finalize())
    }

    /// The content identity of a regular file, computed from its blocks. Without blocks (the
    /// meta half of an index-log record) it is the value Kaiten stored there, computed the same way.
    public var contentHash: ContentHash {
        blocks.isEmpty ? (ContentHash(data: blocksHash) ?? .zero) : Self.blocksHash(of: blocks)
    }
}
