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
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(64)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    public var description: String { hex }

    public static func < (l: ContentHash, r: ContentHash) -> Bool { (l.a, l.b, l.c, l.d) < (r.a, r.b, r.c, r.d) }
}

extension BEPFileInfo {
    /// syncthing's `blocks_hash`: SHA-256 over each block's hash followed by its weak hash as a
    /// big-endian uint32 (bep-brief §5.2). Two files with the same value have the same content.
    public static func blocksHash<S: Sequence>(of blocks: S) -> ContentHash where S.Element == BEPBlockInfo {
        var hasher = SHA256()
        for block in blocks {
            hasher.update(data: block.hash)
            let weak = block.weakHash
            hasher.update(data: [UInt8(weak >> 24), UInt8(weak >> 16 & 0xFF), UInt8(weak >> 8 & 0xFF), UInt8(weak & 0xFF)])
        }
        return ContentHash(hasher.finalize())
    }

    /// The content identity of a regular file: its announced `blocks_hash`, or one computed from
    /// its blocks when the peer left it out.
    public var contentHash: ContentHash {
        ContentHash(data: blocksHash) ?? Self.blocksHash(of: blocks)
    }
}
