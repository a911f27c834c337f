/// RFC 4648's base32 with the extended-hex alphabet (0-9, A-V), upper case, without padding:
/// how syncthing spells an encrypted name.
public enum Base32Hex {
    static let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUV".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 8 + 4) / 5)
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = buffer << 8 | UInt32(byte)
            bits += 8
            while bits >= 5 {
                bits -= 5
                out.append(alphabet[Int(buffer >> UInt32(bits) & 31)])
            }
        }
        if bits > 0 { out.append(alphabet[Int(buffer << UInt32(5 - bits) & 31)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// nil for a character outside the alphabet or a length no byte string encodes to.
    public static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.count * 5 / 8)
        var buffer: UInt32 = 0
        var bits = 0
        for character in text {
            let value: UInt8
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = character - UInt8(ascii: "0")
            case UInt8(ascii: "A")...UInt8(ascii: "V"): value = character - UInt8(ascii: "A") + 10
            default: return nil
            }
            buffer = buffer << 5 | UInt32(value)
            bits += 5
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
            }
        }
        // What is left over must be fewer than 5 bits, all zero (a canonical encoding).
        guard bits < 5, buffer & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return out
    }
}
