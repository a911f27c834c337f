import Foundation

/// The selected roots, when every one is ASCII, as a hash table over their bytes: whether a
/// path or one of its ancestors is a root is then one pass over the path's bytes (FNV-1a,
/// looked up at each "/" and at the end), no String made and no SipHash. The folder figures
/// ask it of every path of the index: ten million at scale, each with its ancestors.
///
/// For ASCII, String equality is byte equality; a path with a byte of 0x80 or more gets no
/// answer here (nil) and is looked up in the set of roots, by canonical equivalence, as before.
struct ASCIIRootTable: Sendable {
    private var slots: [Int32]
    private let mask: Int
    private var hashes: [UInt64] = []
    private var roots: [[UInt8]] = []

    /// Nil when a root is not ASCII.
    init?(_ roots: Set<String>) {
        guard roots.allSatisfy({ $0.utf8.allSatisfy { $0 < 0x80 } }) else { return nil }
        var capacity = 16
        while capacity < 2 * roots.count { capacity <<= 1 }
        slots = [Int32](repeating: -1, count: capacity)
        mask = capacity - 1
        for root in roots {
            let bytes = Array(root.utf8)
            var slot = Self.slot(bytes.withUnsafeBufferPointer(Self.hash), mask)
            while slots[slot] >= 0 { slot = (slot + 1) & mask }
            slots[slot] = Int32(self.roots.count)
            hashes.append(bytes.withUnsafeBufferPointer(Self.hash))
            self.roots.append(bytes)
        }
    }

    static let offsetBasis: UInt64 = 0xcbf2_9ce4_8422_2325
    static let prime: UInt64 = 0x100_0000_01b3

    static func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var h = offsetBasis
        for byte in bytes { h = (h ^ UInt64(byte)) &* prime }
        return h
    }

    private static func slot(_ hash: UInt64, _ mask: Int) -> Int { Int(truncatingIfNeeded: hash ^ (hash >> 29)) & mask }

    /// Whether `path` (UTF-8) or one of its ancestors is a root; nil when it is not ASCII up to
    /// the first root found.
    func selects(_ path: UnsafeBufferPointer<UInt8>) -> Bool? {
        var h = Self.offsetBasis
        for i in 0..<path.count {
            let byte = path[i]
            if byte >= 0x80 { return nil }
            if byte == UInt8(ascii: "/"), contains(h, UnsafeBufferPointer(rebasing: path[0..<i])) { return true }
            h = (h ^ UInt64(byte)) &* Self.prime
        }
        return contains(h, path)
    }

    private func contains(_ hash: UInt64, _ key: UnsafeBufferPointer<UInt8>) -> Bool {
        var slot = Self.slot(hash, mask)
        while slots[slot] >= 0 {
            let i = Int(slots[slot])
            if hashes[i] == hash, roots[i].count == key.count,
                key.isEmpty || roots[i].withUnsafeBufferPointer({ memcmp($0.baseAddress!, key.baseAddress!, key.count) == 0 })
            {
                return true
            }
            slot = (slot + 1) & mask
        }
        return false
    }
}
