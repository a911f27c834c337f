import CKaitenCRC32
import Foundation
import KaitenProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A saved scan (scan cache format 3) mapped and read in place.
///
/// A service holding a 100,000-file folder used to keep its last scan as 100,000 `LocalFile`s
/// with their block lists — 70 MiB of heap for what is only looked up a few paths at a time.
/// Format 3 stores the records sorted by path, followed by a table of their offsets, so that a
/// path is found by binary search over the mapped file and only the record asked for is decoded;
/// the pages read are given back between rounds (``releasePages()``), as the index snapshot's are.
///
/// Everything is checked when the file is mapped (checksum, every offset, every record's bounds,
/// paths strictly ascending): reading afterwards cannot run outside a record.
final class ScanImage: @unchecked Sendable {
    // @unchecked: immutable after init; the mapping lives exactly as long as the object.
    let raw: UnsafeRawBufferPointer
    /// Records, in path order.
    let count: Int
    /// Where the offset table starts (and the last record ends).
    private let table: Int
    /// The file's CRC32 (its last four bytes): which save this image is.
    let checksum: UInt32

    private init(raw: UnsafeRawBufferPointer, count: Int, table: Int, checksum: UInt32) {
        self.raw = raw
        self.count = count
        self.table = table
        self.checksum = checksum
    }

    deinit {
        munmap(UnsafeMutableRawPointer(mutating: raw.baseAddress), raw.count)
    }

    /// Maps `fd` (a format-3 cache of `size` bytes) and checks it.
    static func map(fd: Int32, size: Int) throws(ScanCache.DecodeError) -> ScanImage {
        guard let mapped = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), mapped != MAP_FAILED else {
            throw ScanCache.DecodeError(description: "cannot map: \(String(cString: strerror(errno)))")
        }
        // Lookups jump around: map the page each touches, not its neighbours too.
        madvise(mapped, size, MADV_RANDOM)
        let raw = UnsafeRawBufferPointer(start: mapped, count: size)
        do {
            let image = try check(raw)
            // Checking read every page; a round reads what it visits.
            madvise(mapped, size, MADV_DONTNEED)
            return image
        } catch {
            munmap(mapped, size)
            throw error
        }
    }

    private static func check(_ raw: UnsafeRawBufferPointer) throws(ScanCache.DecodeError) -> ScanImage {
        func damaged(_ why: String) -> ScanCache.DecodeError { ScanCache.DecodeError(description: why) }
        let header = 16
        guard raw.count >= header + 4 else { throw damaged("truncated") }
        let body = raw.count - 4
        let crc = kaiten_crc32(0, raw.baseAddress!, body)
        guard crc == raw.bigEndianU32(at: body) else { throw damaged("the scan cache is damaged (checksum mismatch)") }
        let count = Int(raw.bigEndianU32(at: 12))
        let table = body - 8 * count
        guard table >= header else { throw damaged("the offset table runs past the start") }
        let image = ScanImage(raw: raw, count: count, table: table, checksum: crc)
        // Records are contiguous from the header to the table, each exactly as long as its
        // fields say, with paths strictly ascending: lookups by bisection are then sound.
        var expected = header
        var previous: UnsafeRawBufferPointer? = nil
        for i in 0..<count {
            guard image.start(of: i) == expected else { throw damaged("record \(i) is not where the table says") }
            var reader = ByteReader(bytes: raw, offset: expected, end: table)
            let path = try reader.stringBytes()
            guard LocalFile.Kind(rawValue: try reader.u8()) != nil else { throw damaged("bad entry kind") }
            try reader.skipEntry()
            if let previous, ByteOrder.compare(previous, path) >= 0 { throw damaged("paths out of order at record \(i)") }
            previous = path
            expected = reader.offset
        }
        guard expected == table else { throw damaged("bytes between the last record and the offset table") }
        return image
    }

    private func start(of i: Int) -> Int { Int(truncatingIfNeeded: raw.bigEndianU64(at: table + 8 * i)) }

    /// Where record `i` ends.
    private func end(of i: Int) -> Int { i + 1 < count ? start(of: i + 1) : table }

    /// The bytes of record `i`, as saved.
    func recordBytes(_ i: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: raw[start(of: i)..<end(of: i)])
    }

    /// The path of record `i`, as bytes.
    func pathBytes(_ i: Int) -> UnsafeRawBufferPointer {
        let at = start(of: i)
        let length = Int(raw.bigEndianU32(at: at))
        return UnsafeRawBufferPointer(rebasing: raw[(at + 4)..<(at + 4 + length)])
    }

    /// Record `i`, decoded. Nil cannot happen for a checked image; it would read as an absent
    /// path (hashed again), never as wrong data.
    func file(at i: Int) -> LocalFile? {
        var reader = ByteReader(bytes: raw, offset: start(of: i), end: end(of: i))
        return try? ScanCache.decodeRecord(&reader, format: ScanCache.formatVersion)
    }

    /// The record of `path`, if the image has one.
    func index(of path: String) -> Int? {
        Self.withBytes(path) { key in
            let i = lowerBound(key)
            return i < count && ByteOrder.compare(pathBytes(i), key) == 0 ? i : nil
        }
    }

    /// The first record whose path is not below `key` in byte order.
    func lowerBound(_ key: UnsafeRawBufferPointer) -> Int {
        ByteOrder.lowerBound(of: key, count: count, keyAt: pathBytes)
    }

    /// The records whose paths start with `prefix`: one range, since paths are sorted by bytes.
    func range(withPrefix prefix: String) -> Range<Int> {
        Self.withBytes(prefix) { key in
            let first = lowerBound(key)
            var last = first
            while last < count {
                let path = pathBytes(last)
                guard key.isEmpty || (path.count >= key.count && memcmp(path.baseAddress!, key.baseAddress!, key.count) == 0)
                else { break }
                last += 1
            }
            return first..<last
        }
    }

    /// Gives the pages read so far back to the system (they stay in the page cache).
    func releasePages() {
        madvise(UnsafeMutableRawPointer(mutating: raw.baseAddress), raw.count, MADV_DONTNEED)
    }

    static func withBytes<R>(_ string: String, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        if let result = string.utf8.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) { return result }
        return Array(string.utf8).withUnsafeBytes(body)
    }
}

extension UnsafeRawBufferPointer {
    func bigEndianU32(at offset: Int) -> UInt32 { UInt32(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt32.self)) }
    func bigEndianU64(at offset: Int) -> UInt64 { UInt64(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
}
