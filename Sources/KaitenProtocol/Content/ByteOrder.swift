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
