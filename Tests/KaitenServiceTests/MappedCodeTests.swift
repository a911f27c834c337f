import Foundation
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

    /// In this process: the candidates read the same before and after their pages are dropped
    /// (through `/proc/self/mem`, which reads a page past a file's end as an error instead of a
    /// fault), and the resident pages of this test's own executable go down.
    @Test func droppedPagesComeBackAsTheyWere() throws {
        let memory = open("/proc/self/mem", O_RDONLY | O_CLOEXEC)
        try #require(memory >= 0)
        defer { close(memory) }
        func digest(_ mapping: MappedCode.Mapping) -> Int {
            var hasher = Hasher()
            var page = [UInt8](repeating: 0, count: 1 << 20)
            for address in stride(from: mapping.start, to: mapping.end, by: page.count) {
                let wanted = min(page.count, mapping.end - address)
                let count = page.withUnsafeMutableBytes { pread(memory, $0.baseAddress, wanted, off_t(address)) }
                hasher.combine(count)
                if count > 0 { page.withUnsafeBytes { hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: $0[..<count])) } }
            }
            return hasher.finalize()
        }
        func residentKilobytes(of mappings: [MappedCode.Mapping]) throws -> Int {
            let text = try #require(MappedCode.readSmaps())
            let starts = Set(mappings.map(\.start))
            var total = 0
            var counting = false
            for line in String(decoding: text, as: UTF8.self).split(separator: "\n") {
                if let dash = line.firstIndex(of: "-"), let start = Int(line[..<dash], radix: 16), line.contains(" ") {
                    counting = starts.contains(start)
                } else if counting, line.hasPrefix("Rss:") {
                    total += Int(line.dropFirst(4).split(separator: " ").first ?? "") ?? 0
                }
            }
            return total
        }
        let candidates = MappedCode.candidates(inSmaps: try #require(MappedCode.readSmaps()))
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let ownCode = candidates.filter { String(decoding: $0.file, as: UTF8.self) == executable }
        try #require(!ownCode.isEmpty, "the test's executable \(executable) is not among \(candidates.count) candidates")
        let before = candidates.map(digest)
        let residentBefore = try residentKilobytes(of: ownCode)
        let advised = MappedCode.unmapIdlePages()
        let residentAfter = try residentKilobytes(of: ownCode)
        #expect(advised >= candidates.reduce(0) { $0 + $1.end - $1.start } / 2)
        #expect(candidates.map(digest) == before)
        #expect(residentAfter < residentBefore, "resident code \(residentBefore) KiB before, \(residentAfter) after")
    }
}
