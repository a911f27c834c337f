import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenFiles

#if canImport(Glibc)
    import Glibc
#endif

/// The idle service unmaps the pages of its code between rounds: only pages equal to their file's
/// may go, or the next touch brings back the file's bytes in place of what was written there.
@Suite(.timeLimit(.minutes(2)), .ownThread)
struct MappedCodeTests {
    static func header(_ range: String, _ perms: String, inode: Int, _ path: String, anonymous: Int) -> String {
        """
        \(range) \(perms) 00000000 fe:00 \(inode)                   \(path)
        Size:                 12 kB
        Rss:                  12 kB
        Anonymous:      \(anonymous) kB
        AnonHugePages:         0 kB
        VmFlags: rd ex mr mw me

        """
    }

    /// A written page is anonymous in `smaps`, under its own mapping: a mapping's figures are
    /// never taken for the mapping before it, whatever follows (the relocated data made read-only
    /// is followed by mappings that are not candidates and have no anonymous page).
    @Test func onlyCleanReadOnlyMappingsOfCodeFilesAreCandidates() {
        let text =
            Self.header("1000-3000", "r--p", inode: 7, "/usr/bin/kaiten", anonymous: 0)
            + Self.header("3000-9000", "r-xp", inode: 7, "/usr/bin/kaiten", anonymous: 0)
            + Self.header("9000-a000", "r--p", inode: 7, "/usr/bin/kaiten", anonymous: 4)
            + Self.header("a000-b000", "rw-p", inode: 7, "/usr/bin/kaiten", anonymous: 0)
            + Self.header("b000-c000", "rw-p", inode: 0, "", anonymous: 0)
            + Self.header("c000-d000", "r--p", inode: 9, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", anonymous: 8)
            + Self.header("d000-e000", "---p", inode: 0, "", anonymous: 0)
            + Self.header("e000-f000", "r-xp", inode: 9, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", anonymous: 0)
            + Self.header("10000-20000", "r--p", inode: 11, "/home/u/.config/kaiten/index/f.log.snap", anonymous: 0)
            + Self.header("20000-21000", "r--s", inode: 12, "/usr/lib/x86_64-linux-gnu/gconv/gconv-modules.cache", anonymous: 0)
            + Self.header("21000-22000", "r-xp", inode: 0, "[vdso]", anonymous: 0)
            + Self.header("22000-23000", "r-xp", inode: 13, "/usr/lib/libdebugged.so", anonymous: 4)
            + Self.header("23000-24000", "r--p", inode: 13, "/usr/lib/libdebugged.so", anonymous: 0)
        let found = MappedCode.candidates(inSmaps: Array(text.utf8)).map { [$0.start, $0.end] }
        #expect(found == [[0x1000, 0x3000], [0x3000, 0x9000], [0xe000, 0xf000]])
    }

    /// In this process, over mappings of a file of the test's own: mapped executable (so the
    /// file counts as code), read-only and clean, and written then made read-only (as the
    /// loader leaves relocated data). The clean ones are unmapped (no page resident until read
    /// again) and read the file's bytes again; the written one keeps its byte. Only this file's
    /// mappings are dropped: the whole test process's code is not the test's to drop.
    @Test func cleanMappingsAreUnmappedAndAWrittenOneKeepsItsPage() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("image")
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        var bytes = [UInt8]()
        for fill in [UInt8(ascii: "A"), UInt8(ascii: "B"), UInt8(ascii: "C")] { bytes += [UInt8](repeating: fill, count: page) }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        let length = bytes.count
        func map(_ protection: Int32) throws -> UnsafeMutableRawPointer {
            let address = mmap(nil, length, protection, MAP_PRIVATE, fd, 0)
            try #require(address != MAP_FAILED, "mmap: errno \(errno)")
            return try #require(address)
        }
        let code = try map(PROT_READ | PROT_EXEC)
        let data = try map(PROT_READ)
        let written = try map(PROT_READ | PROT_WRITE)
        defer { for address in [code, data, written] { munmap(address, length) } }
        written.storeBytes(of: UInt8(ascii: "Z"), toByteOffset: 0, as: UInt8.self)
        try #require(mprotect(written, length, PROT_READ) == 0)
        func sum(_ address: UnsafeMutableRawPointer) -> Int { (0..<length).reduce(0) { $0 + Int(address.load(fromByteOffset: $1, as: UInt8.self)) } }
        let expected = bytes.reduce(0) { $0 + Int($1) }
        #expect(sum(code) == expected && sum(data) == expected)

        let ours = Set([Int(bitPattern: code), Int(bitPattern: data), Int(bitPattern: written)])
        let advised = MappedCode.unmapIdlePages(where: { ours.contains($0.start) })
        #expect(advised == 2 * length, "the executable and the clean read-only mapping, not the written one")
        #expect(Self.residentKilobytes(at: [Int(bitPattern: code), Int(bitPattern: data)]) == 0)
        #expect(written.load(fromByteOffset: 0, as: UInt8.self) == UInt8(ascii: "Z"))
        #expect(sum(code) == expected && sum(data) == expected)
        #expect(Self.residentKilobytes(at: [Int(bitPattern: code)]) == length / 1024)
    }

    @Test func unmappingsAreAtLeastTheMinimumGapApart() {
        let last = ContinuousClock.now
        #expect(MappedCode.isDue(at: last, after: nil))
        #expect(!MappedCode.isDue(at: last + MappedCode.minimumGap - .milliseconds(1), after: last))
        #expect(MappedCode.isDue(at: last + MappedCode.minimumGap, after: last))
    }

    /// The `Rss:` of the mappings starting at `starts`, from this process's smaps.
    static func residentKilobytes(at starts: [Int]) -> Int {
        guard let text = MappedCode.readSmaps() else { return -1 }
        let wanted = Set(starts)
        var total = 0
        var counting = false
        for line in String(decoding: text, as: UTF8.self).split(separator: "\n") {
            if let dash = line.firstIndex(of: "-"), let start = Int(line[..<dash], radix: 16), line.contains(" ") {
                counting = wanted.contains(start)
            } else if counting, line.hasPrefix("Rss:") {
                total += Int(line.dropFirst(4).split(separator: " ").first ?? "") ?? 0
            }
        }
        return total
    }
}
