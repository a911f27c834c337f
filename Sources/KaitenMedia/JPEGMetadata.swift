/// What the start of a JPEG says about it, read from its EXIF segment (APP1, at most 64 KiB
/// and before the image data, so inside the file's first block): the orientation, the capture
/// date, and where the embedded thumbnail is.
///
/// The bytes come from other people's cameras and peers: every offset is checked against the
/// buffer, every loop is bounded, and anything malformed leaves a field nil instead of failing.
public struct JPEGMetadata: Sendable, Equatable {
    /// EXIF orientation 1–8 (1: as stored), when the file says.
    public var orientation: Int?
    /// DateTimeOriginal as written, `YYYY:MM:DD HH:MM:SS` (local time of the camera).
    public var dateTimeOriginal: String?
    /// OffsetTimeOriginal, `+HH:MM`, when the camera recorded its time zone.
    public var offsetTimeOriginal: String?
    /// The embedded thumbnail's bytes (a JPEG) within the file, when it lies within what was read.
    public var thumbnail: Range<Int>?
    /// Its width and height, from its own frame header.
    public var thumbnailWidth: Int?
    public var thumbnailHeight: Int?

    public init() {}

    /// Parses `bytes`, the first bytes of a file (the whole first block is plenty). nil when they
    /// do not start a JPEG.
    public init?(prefix bytes: [UInt8]) {
        guard bytes.count >= 4, bytes[0] == 0xFF, bytes[1] == 0xD8 else { return nil }
        self.init()
        var position = 2
        // Segments up to the image data; EXIF is normally first or second (after JFIF's APP0).
        for _ in 0..<64 {
            guard position + 4 <= bytes.count, bytes[position] == 0xFF else { return }
            let marker = bytes[position + 1]
            if marker == 0xFF {
                position += 1
                continue
            }
            if marker == 0xDA || marker == 0xD9 { return }
            if marker == 0x01 || (0xD0...0xD7).contains(marker) {
                position += 2
                continue
            }
            let length = Int(bytes[position + 2]) << 8 | Int(bytes[position + 3])
            guard length >= 2 else { return }
            let start = position + 4
            let end = position + 2 + length
            if marker == 0xE1, end <= bytes.count, end - start > 6, Array(bytes[start..<start + 6]) == Array("Exif\0\0".utf8) {
                readTIFF(bytes, from: start + 6, to: end)
                return
            }
            position = end
        }
    }

    /// The TIFF structure inside the APP1 segment: IFD0 (orientation, the EXIF IFD), IFD1 (the
    /// thumbnail). Offsets are from the TIFF header.
    private mutating func readTIFF(_ bytes: [UInt8], from base: Int, to end: Int) {
        let tiff = TIFFReader(bytes: bytes, base: base, end: end)
        guard let bigEndian = tiff.byteOrder(), let ifd0 = tiff.u32(at: 4, bigEndian) else { return }
        var exifIFD: Int?
        for entry in tiff.entries(at: Int(ifd0), bigEndian) {
            switch entry.tag {
            case 0x0112: orientation = entry.shortValue.flatMap { (1...8).contains($0) ? $0 : nil }
            case 0x8769: exifIFD = entry.longValue
            default: break
            }
        }
        if let exifIFD {
            for entry in tiff.entries(at: exifIFD, bigEndian) {
                switch entry.tag {
                case 0x9003: dateTimeOriginal = tiff.ascii(entry, bigEndian)
                case 0x9011: offsetTimeOriginal = tiff.ascii(entry, bigEndian)
                default: break
                }
            }
        }
        guard let ifd1 = tiff.nextIFD(after: Int(ifd0), bigEndian), ifd1 > 0 else { return }
        var offset: Int?
        var length: Int?
        for entry in tiff.entries(at: ifd1, bigEndian) {
            switch entry.tag {
            case 0x0201: offset = entry.longValue
            case 0x0202: length = entry.longValue
            default: break
            }
        }
        guard let offset, let length, length > 4, offset <= end - base, length <= end - base - offset else { return }
        let range = (base + offset)..<(base + offset + length)
        let jpeg = Array(bytes[range])
        guard jpeg[0] == 0xFF, jpeg[1] == 0xD8, let (width, height) = Self.frameSize(jpeg) else { return }
        thumbnail = range
        thumbnailWidth = width
        thumbnailHeight = height
    }

    /// Width and height from a JPEG's start-of-frame header.
    static func frameSize(_ bytes: [UInt8]) -> (Int, Int)? {
        var position = 2
        for _ in 0..<64 {
            guard position + 4 <= bytes.count, bytes[position] == 0xFF else { return nil }
            let marker = bytes[position + 1]
            if marker == 0xFF {
                position += 1
                continue
            }
            if marker == 0x01 || (0xD0...0xD7).contains(marker) {
                position += 2
                continue
            }
            if marker == 0xDA || marker == 0xD9 { return nil }
            let length = Int(bytes[position + 2]) << 8 | Int(bytes[position + 3])
            guard length >= 2 else { return nil }
            // SOF0–SOF15 but DHT (C4), JPG (C8) and DAC (CC).
            if (0xC0...0xCF).contains(marker) && ![0xC4, 0xC8, 0xCC].contains(marker) {
                guard position + 9 <= bytes.count else { return nil }
                let height = Int(bytes[position + 5]) << 8 | Int(bytes[position + 6])
                let width = Int(bytes[position + 7]) << 8 | Int(bytes[position + 8])
                return width > 0 && height > 0 ? (width, height) : nil
            }
            position += 2 + length
        }
        return nil
    }
}

/// Bounds-checked reads of a TIFF structure held in `bytes[base..<end]`.
private struct TIFFReader {
    let bytes: [UInt8]
    let base: Int
    let end: Int

    struct Entry {
        let tag: Int
        let type: Int
        let count: Int
        /// The 4-byte value field's position in `bytes`.
        let field: Int
        let bigEndian: Bool
        let reader: TIFFReader

        var shortValue: Int? { type == 3 && count >= 1 ? reader.u16(absolute: field, bigEndian) : nil }
        var longValue: Int? {
            switch type {
            case 4 where count >= 1: return reader.u32(absolute: field, bigEndian).map(Int.init)
            case 3 where count >= 1: return reader.u16(absolute: field, bigEndian)
            default: return nil
            }
        }
    }

    /// true for Motorola ("MM"), false for Intel ("II"); nil for anything else.
    func byteOrder() -> Bool? {
        guard end - base >= 8 else { return nil }
        let order: Bool
        switch (bytes[base], bytes[base + 1]) {
        case (0x4D, 0x4D): order = true
        case (0x49, 0x49): order = false
        default: return nil
        }
        return u16(at: 2, order) == 42 ? order : nil
    }

    func u16(at offset: Int, _ bigEndian: Bool) -> Int? {
        guard offset >= 0 else { return nil }
        return u16(absolute: base + offset, bigEndian)
    }

    func u16(absolute position: Int, _ bigEndian: Bool) -> Int? {
        guard position >= base, position + 2 <= end else { return nil }
        let a = Int(bytes[position])
        let b = Int(bytes[position + 1])
        return bigEndian ? a << 8 | b : b << 8 | a
    }

    func u32(at offset: Int, _ bigEndian: Bool) -> UInt32? {
        guard offset >= 0 else { return nil }
        return u32(absolute: base + offset, bigEndian)
    }

    func u32(absolute position: Int, _ bigEndian: Bool) -> UInt32? {
        guard position >= base, position + 4 <= end else { return nil }
        let b = bytes[position..<position + 4].map(UInt32.init)
        return bigEndian ? b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3] : b[3] << 24 | b[2] << 16 | b[1] << 8 | b[0]
    }

    /// The entries of the IFD at `offset` (at most 512: no camera writes more).
    func entries(at offset: Int, _ bigEndian: Bool) -> [Entry] {
        guard let count = u16(at: offset, bigEndian), count <= 512 else { return [] }
        var result: [Entry] = []
        for i in 0..<count {
            let position = base + offset + 2 + i * 12
            guard let tag = u16(absolute: position, bigEndian), let type = u16(absolute: position + 2, bigEndian),
                let count = u32(absolute: position + 4, bigEndian), position + 12 <= end
            else { break }
            result.append(Entry(tag: tag, type: type, count: Int(count), field: position + 8, bigEndian: bigEndian, reader: self))
        }
        return result
    }

    /// The offset of the IFD that follows the one at `offset`.
    func nextIFD(after offset: Int, _ bigEndian: Bool) -> Int? {
        guard let count = u16(at: offset, bigEndian), count <= 512 else { return nil }
        return u32(at: offset + 2 + count * 12, bigEndian).map(Int.init)
    }

    /// An ASCII value (type 2), without its terminating NULs.
    func ascii(_ entry: Entry, _ bigEndian: Bool) -> String? {
        guard entry.type == 2, entry.count > 0, entry.count <= 256 else { return nil }
        let start: Int
        if entry.count <= 4 {
            start = entry.field
        } else {
            guard let offset = u32(absolute: entry.field, bigEndian) else { return nil }
            start = base + Int(offset)
        }
        guard start >= base, start + entry.count <= end else { return nil }
        let text = bytes[start..<start + entry.count].prefix { $0 != 0 }
        guard text.allSatisfy({ (0x20...0x7E).contains($0) }) else { return nil }
        return String(decoding: text, as: UTF8.self)
    }
}
