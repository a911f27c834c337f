/// A HEIF's (HEIC's) embedded thumbnail, found from the file's first bytes and fetched alone.
///
/// A HEIF keeps its index in the `meta` box at the start: which item is a thumbnail of the
/// primary image (`iref` `thmb`), where that item's coded data lies (`iloc`) and what it needs
/// to be decoded (its `hvcC` and `ispe` properties, `iprp`). With that, only the thumbnail's own
/// bytes are fetched from the peers, and a one-item HEIF is rebuilt around them for the decoder.
/// (Debian's libheif, given the remote file to read on demand, reads all of its image data.)
///
/// The bytes come from other people's devices: every length is checked against the buffer,
/// every loop is bounded, and anything unexpected means "no thumbnail here" (the file is then
/// fetched whole), never a trap.
public struct HEIFThumbnail: Sendable, Equatable {
    /// The thumbnail item's data in the file: (offset, length) pieces, in order.
    public var extents: [(offset: Int64, length: Int64)]
    public var width: Int
    public var height: Int
    /// The item's coding type (`hvc1`, `av01`) and its property boxes, whole, in association order,
    /// with whether each is essential.
    var itemType: [UInt8]
    var properties: [(box: [UInt8], essential: Bool)]

    public static func == (a: HEIFThumbnail, b: HEIFThumbnail) -> Bool {
        a.extents.map(\.offset) == b.extents.map(\.offset) && a.extents.map(\.length) == b.extents.map(\.length) && a.width == b.width
            && a.height == b.height && a.itemType == b.itemType && a.properties.map(\.box) == b.properties.map(\.box)
    }

    /// How many bytes of the file the thumbnail's data is.
    public var length: Int64 { extents.reduce(0) { $0 + $1.length } }

    /// The largest thumbnail the index in `prefix` (the file's first bytes) describes; nil when
    /// there is none, or the index does not fit in `prefix`, or it uses what this does not read.
    public init?(prefix bytes: [UInt8]) {
        var reader = BoxReader(bytes: bytes)
        guard let meta = reader.topLevelBox("meta"), meta.payload.count >= 4 else { return nil }
        // meta is a full box: version and flags first.
        let children = BoxReader.boxes(in: bytes, from: meta.payload.lowerBound + 4, to: meta.payload.upperBound)
        func child(_ type: String) -> Box? { children.first { $0.type == type } }
        guard let iref = child("iref"), let iloc = child("iloc"), let iinf = child("iinf"), let iprp = child("iprp") else { return nil }

        // iref: thumbnail → primary references.
        var thumbnails: [UInt32] = []
        guard let irefVersion = BoxReader.u8(bytes, iref.payload.lowerBound) else { return nil }
        for reference in BoxReader.boxes(in: bytes, from: iref.payload.lowerBound + 4, to: iref.payload.upperBound) where reference.type == "thmb" {
            let idSize = irefVersion == 0 ? 2 : 4
            guard let from = BoxReader.uint(bytes, reference.payload.lowerBound, idSize) else { continue }
            thumbnails.append(UInt32(from))
        }
        guard !thumbnails.isEmpty else { return nil }

        // iinf: each item's type.
        var types: [UInt32: [UInt8]] = [:]
        guard let iinfVersion = BoxReader.u8(bytes, iinf.payload.lowerBound) else { return nil }
        let entriesStart = iinf.payload.lowerBound + 4 + (iinfVersion == 0 ? 2 : 4)
        for infe in BoxReader.boxes(in: bytes, from: entriesStart, to: iinf.payload.upperBound) where infe.type == "infe" {
            guard let version = BoxReader.u8(bytes, infe.payload.lowerBound), version >= 2 else { continue }
            let idSize = version == 2 ? 2 : 4
            let idAt = infe.payload.lowerBound + 4
            guard let id = BoxReader.uint(bytes, idAt, idSize), idAt + idSize + 2 + 4 <= infe.payload.upperBound else { continue }
            let typeAt = idAt + idSize + 2
            types[UInt32(id)] = Array(bytes[typeAt..<typeAt + 4])
        }

        // iprp: the property boxes (1-based) and each item's associations.
        let iprpChildren = BoxReader.boxes(in: bytes, from: iprp.payload.lowerBound, to: iprp.payload.upperBound)
        guard let ipco = iprpChildren.first(where: { $0.type == "ipco" }) else { return nil }
        let propertyBoxes = BoxReader.boxes(in: bytes, from: ipco.payload.lowerBound, to: ipco.payload.upperBound)
        var associations: [UInt32: [(index: Int, essential: Bool)]] = [:]
        for ipma in iprpChildren where ipma.type == "ipma" {
            guard let version = BoxReader.u8(bytes, ipma.payload.lowerBound), let flags = BoxReader.uint(bytes, ipma.payload.lowerBound + 1, 3),
                let count = BoxReader.uint(bytes, ipma.payload.lowerBound + 4, 4), count < 100_000
            else { continue }
            var at = ipma.payload.lowerBound + 8
            for _ in 0..<count {
                let idSize = version < 1 ? 2 : 4
                guard let id = BoxReader.uint(bytes, at, idSize), let n = BoxReader.u8(bytes, at + idSize) else { break }
                at += idSize + 1
                var list: [(Int, Bool)] = []
                for _ in 0..<n {
                    if flags & 1 == 1 {
                        guard let value = BoxReader.uint(bytes, at, 2) else { break }
                        list.append((Int(value & 0x7FFF), value & 0x8000 != 0))
                        at += 2
                    } else {
                        guard let value = BoxReader.u8(bytes, at) else { break }
                        list.append((Int(value & 0x7F), value & 0x80 != 0))
                        at += 1
                    }
                }
                guard at <= ipma.payload.upperBound else { break }
                associations[UInt32(id)] = list
            }
        }

        // iloc: where each item's data lies (in the file itself only: construction method 0).
        guard let locations = Self.locations(bytes, iloc) else { return nil }

        var best: HEIFThumbnail?
        for id in thumbnails {
            guard let type = types[id], type == Array("hvc1".utf8) || type == Array("av01".utf8), let extents = locations[id], !extents.isEmpty,
                let associated = associations[id]
            else { continue }
            var properties: [(box: [UInt8], essential: Bool)] = []
            var width = 0
            var height = 0
            for (index, essential) in associated {
                guard index >= 1, index <= propertyBoxes.count else { continue }
                let box = propertyBoxes[index - 1]
                properties.append((Array(bytes[box.whole]), essential))
                if box.type == "ispe", let w = BoxReader.uint(bytes, box.payload.lowerBound + 4, 4),
                    let h = BoxReader.uint(bytes, box.payload.lowerBound + 8, 4)
                {
                    width = Int(w)
                    height = Int(h)
                }
            }
            guard width > 0, height > 0, properties.contains(where: { $0.box.count >= 8 && Array($0.box[4..<8]) == Array("ispe".utf8) }) else {
                continue
            }
            let candidate = HEIFThumbnail(extents: extents, width: width, height: height, itemType: type, properties: properties)
            // Each side is up to 2³² − 1: the area is compared in 64 unsigned bits.
            if best == nil || UInt64(width) * UInt64(height) > UInt64(best!.width) * UInt64(best!.height) { best = candidate }
        }
        guard let best else { return nil }
        self = best
    }

    private init(extents: [(offset: Int64, length: Int64)], width: Int, height: Int, itemType: [UInt8], properties: [(box: [UInt8], essential: Bool)]) {
        self.extents = extents
        self.width = width
        self.height = height
        self.itemType = itemType
        self.properties = properties
    }

    static func locations(_ bytes: [UInt8], _ iloc: Box) -> [UInt32: [(offset: Int64, length: Int64)]]? {
        let start = iloc.payload.lowerBound
        guard let version = BoxReader.u8(bytes, start), version <= 2, let sizes = BoxReader.uint(bytes, start + 4, 2) else { return nil }
        let offsetSize = Int(sizes >> 12 & 0xF)
        let lengthSize = Int(sizes >> 8 & 0xF)
        let baseOffsetSize = Int(sizes >> 4 & 0xF)
        let indexSize = version >= 1 ? Int(sizes & 0xF) : 0
        var at = start + 6
        let countSize = version < 2 ? 2 : 4
        guard let count = BoxReader.uint(bytes, at, countSize), count < 100_000 else { return nil }
        at += countSize
        var result: [UInt32: [(offset: Int64, length: Int64)]] = [:]
        for _ in 0..<count {
            let idSize = version < 2 ? 2 : 4
            guard let id = BoxReader.uint(bytes, at, idSize) else { return nil }
            at += idSize
            var method: UInt64 = 0
            if version >= 1 {
                guard let value = BoxReader.uint(bytes, at, 2) else { return nil }
                method = value & 0xF
                at += 2
            }
            guard BoxReader.uint(bytes, at, 2) != nil else { return nil }  // data_reference_index
            at += 2
            guard let base = BoxReader.uint(bytes, at, baseOffsetSize) else { return nil }
            at += baseOffsetSize
            guard let extentCount = BoxReader.uint(bytes, at, 2), extentCount < 10_000 else { return nil }
            at += 2
            var extents: [(offset: Int64, length: Int64)] = []
            for _ in 0..<extentCount {
                at += indexSize
                guard let offset = BoxReader.uint(bytes, at, offsetSize), let length = BoxReader.uint(bytes, at + offsetSize, lengthSize) else {
                    return nil
                }
                at += offsetSize + lengthSize
                // Every number is the file's word: an extent must lie whole in [0, Int64.max],
                // so that a caller adding offset and length, or the lengths, cannot overflow.
                let (start, overflow) = base.addingReportingOverflow(offset)
                guard !overflow, start <= UInt64(Int64.max), length <= UInt64(Int64.max) - start else { return nil }
                extents.append((Int64(start), Int64(length)))
            }
            guard at <= iloc.payload.upperBound else { return nil }
            var total: Int64? = 0
            for extent in extents { total = total.flatMap { let (sum, overflow) = $0.addingReportingOverflow(extent.length); return overflow ? nil : sum } }
            if method == 0, extents.allSatisfy({ $0.length > 0 }), total != nil { result[UInt32(id)] = extents }
        }
        return result
    }

    /// A HEIF holding only this thumbnail, as its primary image, around `data` (its extents'
    /// bytes, in order).
    public func standalone(data: [UInt8]) -> [UInt8] {
        func box(_ type: String, _ payload: [UInt8]) -> [UInt8] {
            be32(UInt32(8 + payload.count)) + Array(type.utf8) + payload
        }
        func fullBox(_ type: String, version: UInt8 = 0, flags: UInt32 = 0, _ payload: [UInt8]) -> [UInt8] {
            box(type, [version] + Array(be32(flags).suffix(3)) + payload)
        }
        let ftyp = box("ftyp", Array("heic".utf8) + be32(0) + Array("mif1".utf8) + Array("heic".utf8))
        let hdlr = fullBox("hdlr", be32(0) + Array("pict".utf8) + be32(0) + be32(0) + be32(0) + [0])
        let pitm = fullBox("pitm", be16(1))
        let infe = fullBox("infe", version: 2, be16(1) + be16(0) + itemType + [0])
        let iinf = fullBox("iinf", be16(1) + infe)
        let ipco = box("ipco", properties.flatMap(\.box))
        let associations = properties.enumerated().map { UInt8($0.offset + 1) | ($0.element.essential ? 0x80 : 0) }
        let ipma = fullBox("ipma", be32(1) + be16(1) + [UInt8(properties.count)] + associations)
        let iprp = box("iprp", ipco + ipma)
        // iloc v0, 4-byte offsets and lengths: one item, one extent (patched below).
        func iloc(_ offset: UInt32) -> [UInt8] {
            fullBox("iloc", [0x44, 0x00] + be16(1) + be16(1) + be16(0) + be16(1) + be32(offset) + be32(UInt32(data.count)))
        }
        let metaSize = fullBox("meta", hdlr + pitm + iloc(0) + iinf + iprp).count
        let dataOffset = UInt32(ftyp.count + metaSize + 8)
        let meta = fullBox("meta", hdlr + pitm + iloc(dataOffset) + iinf + iprp)
        return ftyp + meta + box("mdat", data)
    }

    private func be32(_ value: UInt32) -> [UInt8] { [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
    private func be16(_ value: UInt16) -> [UInt8] { [UInt8(value >> 8), UInt8(value & 0xFF)] }
}

/// One ISO-BMFF box: its type, the range of its payload and of the whole box in the buffer.
struct Box {
    let type: String
    let payload: Range<Int>
    let whole: Range<Int>
}

/// Bounds-checked reading of ISO-BMFF boxes.
struct BoxReader {
    let bytes: [UInt8]

    /// The first top-level box of `type`, reading box headers from the start (at most 64 boxes).
    mutating func topLevelBox(_ type: String) -> Box? {
        Self.boxes(in: bytes, from: 0, to: bytes.count, limit: 64).first { $0.type == type }
    }

    /// The boxes between `from` and `to` that fit there whole.
    static func boxes(in bytes: [UInt8], from: Int, to: Int, limit: Int = 4096) -> [Box] {
        var result: [Box] = []
        var at = from
        while at + 8 <= to && result.count < limit {
            guard let size32 = uint(bytes, at, 4) else { break }
            let type = String(decoding: bytes[at + 4..<at + 8], as: UTF8.self)
            var header = 8
            var size = Int(size32)
            if size32 == 1 {
                guard let large = uint(bytes, at + 8, 8), large < UInt64(Int.max) else { break }
                size = Int(large)
                header = 16
            } else if size32 == 0 {
                size = to - at
            }
            guard size >= header, size <= to - at else { break }
            result.append(Box(type: type, payload: (at + header)..<(at + size), whole: at..<(at + size)))
            at += size
        }
        return result
    }

    static func u8(_ bytes: [UInt8], _ at: Int) -> UInt8? { at >= 0 && at < bytes.count ? bytes[at] : nil }

    /// A big-endian unsigned integer of `size` bytes (0 to 8) at `at`.
    static func uint(_ bytes: [UInt8], _ at: Int, _ size: Int) -> UInt64? {
        guard size >= 0, size <= 8, at >= 0, at + size <= bytes.count else { return nil }
        var value: UInt64 = 0
        for i in 0..<size { value = value << 8 | UInt64(bytes[at + i]) }
        return value
    }
}
