#if canImport(Glibc)
import Glibc
#endif

extension String {
    /// Whether this string sorts before `other` byte by byte in UTF-8: the order of paths in
    /// plans, `.stignore` files and index snapshots (String's own `<` is Unicode's order).
    /// One `memcmp` for native strings; the generic byte walk it replaces was a noticeable share
    /// of sorting a 100,000-action plan.
    @inlinable
    public func utf8Precedes(_ other: String) -> Bool {
        let fast = utf8.withContiguousStorageIfAvailable { a in
            other.utf8.withContiguousStorageIfAvailable { b -> Bool in
                let n = Swift.min(a.count, b.count)
                if n > 0 {
                    let c = memcmp(a.baseAddress!, b.baseAddress!, n)
                    if c != 0 { return c < 0 }
                }
                return a.count < b.count
            }
        }
        if let fast, let result = fast { return result }
        return utf8.lexicographicallyPrecedes(other.utf8)
    }
}

/// The same order over bytes in place: the sorted paths of an index snapshot and of a scan
/// cache are compared and searched with it, mapped, without making strings.
package enum ByteOrder {
    /// `memcmp`'s order, a prefix before what extends it: negative, zero or positive.
    package static func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let n = Swift.min(a.count, b.count)
        if n > 0 {
            let c = memcmp(a.baseAddress!, b.baseAddress!, n)
            if c != 0 { return Int(c) }
        }
        return a.count - b.count
    }

    /// The positions of `names` in UTF-8 byte order (``String/utf8Precedes(_:)``), through one
    /// buffer holding every name: a sort that compares the strings themselves retains and
    /// releases them at every step, a quarter of writing a big index snapshot.
    package static func order(of names: [String]) -> [Int] {
        var bytes: [UInt8] = []
        // Exactly: grown by doubling, the buffer was a tenth of a big intake's peak memory.
        bytes.reserveCapacity(names.reduce(0) { $0 + $1.utf8.count })
        var spans: [(start: Int, count: Int)] = []
        spans.reserveCapacity(names.count)
        for name in names {
            spans.append((bytes.count, name.utf8.count))
            bytes.append(contentsOf: name.utf8)
        }
        var order = Array(spans.indices)
        bytes.withUnsafeBytes { all in
            spans.withUnsafeBufferPointer { spans in
                order.sort { a, b in
                    let x = spans[a]
                    let y = spans[b]
                    return compare(
                        UnsafeRawBufferPointer(rebasing: all[x.start..<(x.start + x.count)]),
                        UnsafeRawBufferPointer(rebasing: all[y.start..<(y.start + y.count)])) < 0
                }
            }
        }
        return order
    }

    /// The first of `count` sorted keys (`keyAt(i)`) not ordered before `key`.
    package static func lowerBound(of key: UnsafeRawBufferPointer, count: Int, keyAt: (Int) -> UnsafeRawBufferPointer) -> Int {
        lowerBound(of: key, in: 0, count, keyAt: keyAt)
    }

    /// The same, knowing that every key before `start` is ordered before `key` (keys searched
    /// in ascending order): steps of 1, 2, 4… from `start`, then a binary search of the last
    /// step, so that a key near the previous one costs a few probes of nearby memory.
    package static func lowerBound(of key: UnsafeRawBufferPointer, from start: Int, count: Int, keyAt: (Int) -> UnsafeRawBufferPointer) -> Int {
        var low = start
        var probe = start
        var step = 1
        while probe < count, compare(keyAt(probe), key) < 0 {
            low = probe + 1
            probe = low + step
            step <<= 1
        }
        return lowerBound(of: key, in: low, Swift.min(probe, count), keyAt: keyAt)
    }

    /// Binary search of `low..<high`, where the answer is known to lie in `low...high`.
    private static func lowerBound(of key: UnsafeRawBufferPointer, in low: Int, _ high: Int, keyAt: (Int) -> UnsafeRawBufferPointer) -> Int {
        var low = low
        var high = high
        while low < high {
            let middle = (low + high) / 2
            if compare(keyAt(middle), key) < 0 { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
