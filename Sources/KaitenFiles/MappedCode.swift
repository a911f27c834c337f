import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The pages of executable code and read-only data this process has mapped from files: its own
/// executable (about 30 MiB of Swift's runtime, Foundation, ICU, NIO and BoringSSL linked in)
/// and the shared libraries.
///
/// Starting and a round of work touch much of that code once, and the kernel maps the page
/// cache's folios whole (up to 2 MiB each on this kernel), so an idle service kept about 22 MiB
/// of code mapped of which it runs a small part. Unmapping those pages between rounds costs
/// nothing that matters: they stay in the page cache, and what the next round runs is mapped
/// again on its first touch (a minor fault, no read).
public enum MappedCode {
    /// Unmaps this process's pages of file-backed mappings that are not writable and hold no
    /// page of their own; returns how many bytes of such mappings were advised.
    ///
    /// Only pages equal to the file's are dropped: a private mapping whose page was written
    /// (relocated data made read-only after the dynamic loader's fixups, a debugger's
    /// breakpoint) counts as anonymous in `smaps`, and such a mapping is left alone, since
    /// dropping that page would bring back the file's bytes in its place.
    ///
    /// Does nothing (returns 0) within ``minimumGap`` of the last time it did, and then owes
    /// the unmapping to ``unmapIdlePagesIfOwed()``: reading `smaps` makes the kernel walk the
    /// page tables of every mapping, an index snapshot's included (about 5 ms per GiB mapped).
    @discardableResult
    public static func unmapIdlePages() -> Int {
        let now = ContinuousClock.now
        let due = pace.withLock { pace in
            guard isDue(at: now, after: pace.last) else {
                pace.owed = true
                return false
            }
            pace = Pace(last: now, owed: false)
            return true
        }
        return due ? unmapIdlePages(where: { _ in true }) : 0
    }

    /// Unmaps as ``unmapIdlePages()`` does if a call was put off by the gap since the last
    /// unmapping (a round that ended soon after another); otherwise reads nothing.
    @discardableResult
    public static func unmapIdlePagesIfOwed() -> Int {
        pace.withLock { $0.owed } ? unmapIdlePages() : 0
    }

    /// Whether an unmapping at `now` is ``minimumGap`` or more after the `last` one.
    static func isDue(at now: ContinuousClock.Instant, after last: ContinuousClock.Instant?) -> Bool {
        last.map { now - $0 >= minimumGap } ?? true
    }

    /// The least time between two unmappings.
    public static let minimumGap = Duration.seconds(10)

    private struct Pace {
        var last: ContinuousClock.Instant?
        var owed = false
    }

    private static let pace = Mutex(Pace())

    /// The same, for the candidates `include` takes (a test's own mappings).
    static func unmapIdlePages(where include: (Mapping) -> Bool) -> Int {
        #if canImport(Glibc)
            guard let smaps = readSmaps() else { return 0 }
            var advised = 0
            for mapping in candidates(inSmaps: smaps) where include(mapping) {
                if madvise(UnsafeMutableRawPointer(bitPattern: mapping.start), mapping.end - mapping.start, MADV_DONTNEED) == 0 {
                    advised += mapping.end - mapping.start
                }
            }
            return advised
        #else
            return 0
        #endif
    }

    /// One mapping that may be dropped: its address range, and whether it is code.
    struct Mapping {
        let start: Int
        let end: Int
        var file: ArraySlice<UInt8> = []
        var executable = false
    }

    /// The mappings of `smaps` of the files this process runs code from (its executable, the
    /// shared libraries) that are private, not writable and have no anonymous page. A data
    /// file mapped read-only (an index snapshot) is not one: a round reads it again, and its
    /// pages are the index's, not code.
    static func candidates(inSmaps text: [UInt8]) -> [Mapping] {
        let clean = cleanMappings(inSmaps: text)
        let images = Set(clean.filter(\.executable).map(\.file))
        return clean.filter { images.contains($0.file) }
    }

    private static func cleanMappings(inSmaps text: [UInt8]) -> [Mapping] {
        var result: [Mapping] = []
        var current: Mapping?
        var anonymous = -1
        func close() {
            if let mapping = current, anonymous == 0 { result.append(mapping) }
            current = nil
            anonymous = -1
        }
        var lineStart = 0
        while lineStart < text.count {
            var lineEnd = lineStart
            while lineEnd < text.count, text[lineEnd] != UInt8(ascii: "\n") { lineEnd += 1 }
            let line = text[lineStart..<lineEnd]
            lineStart = lineEnd + 1
            if let header = mappingHeader(line) {
                close()
                current = header.eligible ? header.mapping : nil
            } else if current != nil, line.starts(with: anonymousField) {
                anonymous = kilobytes(line.dropFirst(anonymousField.count)) ?? -1
            }
        }
        close()
        return result
    }

    private static let anonymousField = Array("Anonymous:".utf8)

    /// A header line of `smaps` ("start-end perms offset dev inode path"), with whether its
    /// mapping may be dropped (private, not writable, backed by a file), or nil for a field line
    /// ("Rss:   12 kB"). Every header ends the mapping before it, eligible or not: a field line
    /// belongs to the last header whatever that header maps.
    private static func mappingHeader(_ line: ArraySlice<UInt8>) -> (mapping: Mapping, eligible: Bool)? {
        let fields = line.split(separator: UInt8(ascii: " "), maxSplits: 5, omittingEmptySubsequences: true)
        guard fields.count >= 5, let dash = fields[0].firstIndex(of: UInt8(ascii: "-")) else { return nil }
        guard let start = hex(fields[0][..<dash]), let end = hex(fields[0][(dash + 1)...]) else { return nil }
        let perms = Array(fields[1])
        guard perms.count == 4 else { return nil }
        let inode = Int(String(decoding: fields[4], as: UTF8.self)) ?? 0
        let file = fields.count == 6 ? fields[5].drop(while: { $0 == UInt8(ascii: " ") }) : []
        let mapping = Mapping(start: start, end: end, file: file, executable: perms[2] == UInt8(ascii: "x"))
        let eligible = perms[1] == UInt8(ascii: "-") && perms[3] == UInt8(ascii: "p") && inode != 0 && !file.isEmpty
        return (mapping, eligible)
    }

    private static func hex(_ digits: ArraySlice<UInt8>) -> Int? {
        guard !digits.isEmpty, digits.count <= 16 else { return nil }
        var value = 0
        for digit in digits {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = value << 4 | Int(digit - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = value << 4 | Int(digit - UInt8(ascii: "a") + 10)
            default: return nil
            }
        }
        return value
    }

    private static func kilobytes(_ rest: ArraySlice<UInt8>) -> Int? {
        let digits = rest.drop(while: { $0 == UInt8(ascii: " ") }).prefix(while: { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        return digits.isEmpty ? nil : Int(String(decoding: digits, as: UTF8.self))
    }

    #if canImport(Glibc)
        static func readSmaps() -> [UInt8]? {
            let fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count < 0 {
                    if errno == EINTR { continue }
                    return nil
                }
                if count == 0 { return bytes }
                bytes.append(contentsOf: chunk[..<count])
            }
        }
    #endif
}
