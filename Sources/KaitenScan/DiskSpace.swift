import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Free space where a folder lives (statvfs): what a plan warns about and apply budgets.
public enum DiskSpace {
    /// Bytes available to this user, and the file system's size; nil when it cannot be read.
    public static func of(_ path: String) -> (available: Int64, total: Int64)? {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        let unit = Int64(info.f_frsize)
        return (Int64(info.f_bavail) * unit, Int64(info.f_blocks) * unit)
    }
}
