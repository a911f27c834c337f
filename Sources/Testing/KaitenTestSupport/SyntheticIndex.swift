import Foundation
import KaitenProtocol

/// A large folder's index as a peer would announce it, made without a disk or a peer: for the
/// tests and benchmarks whose subject is what Kaiten does with an index that size (a search),
/// not how it arrived.
public enum SyntheticIndex {
    /// `photos/YEAR/N/IMG_n.jpg` for n in 0..<count (5,000 a year, 100 a directory), each of
    /// size 1000 + n, modified 1,700,000,000 + n, and every directory above them.
    public static func photos(count: Int) -> [BEPFileInfo] {
        var files: [BEPFileInfo] = []
        files.reserveCapacity(count + count / 100 + 32)
        for n in 0..<count { files.append(file(n)) }
        for (index, name) in directories(count: count).enumerated() { files.append(directory(name, sequence: count + index + 1)) }
        return files
    }

    /// The `n`th file of ``photos(count:)``, at sequence n + 1.
    public static func file(_ n: Int) -> BEPFileInfo {
        var file = BEPFileInfo()
        file.name = path(of: n)
        file.type = .file
        file.size = Int64(1000 + n)
        file.modifiedS = 1_700_000_000 + Int64(n)
        file.sequence = Int64(n + 1)
        file.version = version(n + 1)
        var block = BEPBlockInfo()
        block.size = Int32(file.size)
        var hash = [UInt8](repeating: 0, count: 32)
        withUnsafeBytes(of: UInt64(n).bigEndian) { hash.replaceSubrange(0..<8, with: $0) }
        block.hash = Data(hash)
        file.blocks = [block]
        return file
    }

    /// The directories above the first `count` files, parents first.
    public static func directories(count: Int) -> [String] {
        var directories = ["photos"]
        for year in 0..<((count + 4_999) / 5_000) {
            directories.append("photos/\(2000 + year)")
            for month in 0..<50 where year * 5_000 + month * 100 < count { directories.append("photos/\(2000 + year)/\(month)") }
        }
        return directories
    }

    /// A directory entry at `sequence`.
    public static func directory(_ name: String, sequence: Int) -> BEPFileInfo {
        var directory = BEPFileInfo()
        directory.name = name
        directory.type = .directory
        directory.modifiedS = 1_700_000_000
        directory.sequence = Int64(sequence)
        directory.version = version(sequence)
        return directory
    }

    static func version(_ n: Int) -> BEPVector {
        var counter = BEPCounter()
        counter.id = 1
        counter.value = UInt64(n)
        var vector = BEPVector()
        vector.counters = [counter]
        return vector
    }

    /// The path of the `n`th file of ``photos(count:)``.
    public static func path(of n: Int) -> String { "photos/\(2000 + n / 5_000)/\(n % 5_000 / 100)/IMG_\(n).jpg" }
}
