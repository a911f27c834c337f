import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A pull's big file does not stay in the page cache as it is written: every step, what is
/// already written back is dropped (the pages are reused by the next writes).
@Suite(.timeLimit(.minutes(2)), .ownThread) struct WriteBehindTests {
    /// Whether the temp directory's pages can be dropped at all: not on tmpfs, whose pages are
    /// the file.
    static let tempIsOnADisk: Bool = {
        let type = try? ProcessRunner.run("/usr/bin/stat", ["-f", "-c", "%T", NSTemporaryDirectory()])
        guard let type, type.status == 0 else { return false }
        return type.stdout.trimmingCharacters(in: .whitespacesAndNewlines) != "tmpfs"
    }()

    /// The bytes of `path` in `range` (MiB) that the page cache holds.
    static func cachedMiB(_ fd: Int32, _ range: Range<Int>) throws -> Double {
        let length = range.upperBound << 20
        let address = mmap(nil, length, PROT_READ, MAP_SHARED, fd, 0)
        try #require(address != MAP_FAILED, "mmap: errno \(errno)")
        defer { munmap(address, length) }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        var resident = [UInt8](repeating: 0, count: length / page)
        try #require(mincore(address, length, &resident) == 0, "mincore: errno \(errno)")
        let first = (range.lowerBound << 20) / page
        return Double(resident[first...].filter { $0 & 1 == 1 }.count * page) / Double(1 << 20)
    }

    @Test(.enabled(if: tempIsOnADisk, "the temp directory is on tmpfs, whose pages cannot be dropped"))
    func pagesWrittenBackAreDroppedAtTheNextStep() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fd = open(dir.file("big.bin"), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        let writes = SerialWrites(fd: fd, name: "big.bin", progress: nil, writeBehind: WriteBehind(fd: fd))
        let block = Data(repeating: 0x5A, count: 1 << 20)
        let mib = WriteBehind.step >> 20
        // Four and a half steps, then made clean: what came after the last drop is still cached.
        let first = 4 * mib + mib / 2
        for i in 0..<first { try await writes.write(block, at: Int64(i) << 20) }
        try #require(fdatasync(fd) == 0)
        #expect(try Self.cachedMiB(fd, (4 * mib)..<first) == Double(first - 4 * mib))
        // The rest of the fifth step: its drop takes every clean page.
        for i in first..<(5 * mib) { try await writes.write(block, at: Int64(i) << 20) }
        #expect(try Self.cachedMiB(fd, 0..<first) == 0)
        // The file is whole: dropped pages are read back from the disk.
        try #require(fdatasync(fd) == 0)
        var read = [UInt8](repeating: 0, count: 1 << 20)
        for i in [0, first - 1, 5 * mib - 1] {
            #expect(pread(fd, &read, read.count, off_t(i) << 20) == read.count)
            #expect(read.allSatisfy { $0 == 0x5A })
        }
    }
}
