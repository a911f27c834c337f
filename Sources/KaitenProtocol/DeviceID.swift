import KaitenErrors
import Crypto

/// A Syncthing device ID: the SHA-256 of the device's certificate (DER), 32 bytes.
///
/// The text form is syncthing's (lib/protocol/deviceid.go): base32 without padding (52
/// characters), cut into four groups of 13, each followed by a Luhn-mod-32 check character,
/// then shown as eight groups of seven joined by `-`:
///
///     P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2
///
/// Parsing accepts what syncthing accepts: dashes or spaces, lower case, the digits `0`, `1`
/// and `8` typed for `O`, `I` and `B`, and the old 52-character form without check characters.
public struct DeviceID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The 32 raw bytes, as sent on the wire in `Device.id`.
    public let bytes: [UInt8]

    /// Wraps 32 raw bytes.
    /// - Throws: ``DeviceIDError`` when `bytes` is not exactly 32 bytes long.
    public init(bytes: [UInt8]) throws(DeviceIDError) {
        guard bytes.count == 32 else { throw DeviceIDError(input: "", reason: .wrongByteLength(bytes.count)) }
        self.bytes = bytes
    }

    /// The 32 bytes in one call: hashing them byte by byte was a tenth of an index replay's time
    /// (every record names its device, and the index numbers devices through a dictionary).
    public func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    public static func == (a: DeviceID, b: DeviceID) -> Bool { a.bytes == b.bytes }

    /// The device ID of a certificate, given its DER encoding.
    public init(certificateDER: [UInt8]) {
        self.bytes = Array(SHA256.hash(data: certificateDER))
    }

    /// Parses the text form, with the same leniency as syncthing.
    /// - Throws: ``DeviceIDError`` naming what is wrong: length, a character outside base32, or a
    ///   check character that does not match (a typo).
    public init(_ text: String) throws(DeviceIDError) {
        var cleaned = ""
        for ch in text.uppercased() {
            switch ch {
            case "-", " ", "=": continue
            case "0": cleaned.append("O")
            case "1": cleaned.append("I")
            case "8": cleaned.append("B")
            default: cleaned.append(ch)
            }
        }
        for ch in cleaned where Base32.value(of: ch) == nil {
            throw DeviceIDError(input: text, reason: .invalidCharacter(ch))
        }
        let chars = Array(cleaned)
        let data: [Character]
        switch chars.count {
        case 56:
            var stripped: [Character] = []
            for group in 0..<4 {
                let chunk = chars[(group * 14)..<(group * 14 + 13)]
                let check = chars[group * 14 + 13]
                let expected = Luhn32.checkCharacter(for: chunk)
                guard check == expected else {
                    throw DeviceIDError(input: text, reason: .checkCharacterMismatch(group: group + 1))
                }
                stripped.append(contentsOf: chunk)
            }
            data = stripped
        case 52:
            data = chars
        default:
            throw DeviceIDError(input: text, reason: .wrongLength(chars.count))
        }
        guard let raw = Base32.decode(data), raw.count == 32 else {
            throw DeviceIDError(input: text, reason: .wrongLength(chars.count))
        }
        self.bytes = raw
    }

    /// The canonical text form, `XXXXXXX-XXXXXXX-…` (63 characters).
    public var description: String {
        let b32 = Array(Base32.encode(bytes))  // 52 characters
        var withChecks: [Character] = []
        for group in 0..<4 {
            let chunk = b32[(group * 13)..<(group * 13 + 13)]
            withChecks.append(contentsOf: chunk)
            withChecks.append(Luhn32.checkCharacter(for: chunk))
        }
        var out = ""
        for (i, ch) in withChecks.enumerated() {
            if i > 0 && i % 7 == 0 { out.append("-") }
            out.append(ch)
        }
        return out
    }

    /// The first seven characters of the text form, as syncthing shows it in logs, conflict
    /// names and the REST API (e.g. `JMIZHSD`).
    public var shortDescription: String { String(description.prefix(7)) }

    /// How a peer is named in a line: the name it was given, else the first group of its ID.
    public static func label(_ id: String, name: String?) -> String {
        guard let name, !name.isEmpty else { return String(id.prefix(7)) }
        return name
    }

    /// A peer named with its ID beside: `nas (MFZWI3D)`, or the first group alone without a name.
    public static func labelWithID(_ id: String, name: String?) -> String {
        guard let name, !name.isEmpty else { return String(id.prefix(7)) }
        return "\(name) (\(id.prefix(7)))"
    }

    /// The first 8 bytes read as a big-endian integer: the ID used in version vectors and
    /// `modified_by`.
    public var shortID: UInt64 {
        bytes.prefix(8).reduce(0) { ($0 << 8) | UInt64($1) }
    }

    public static func < (lhs: DeviceID, rhs: DeviceID) -> Bool {
        lhs.bytes.lexicographicallyPrecedes(rhs.bytes)
    }
}

/// Why a device ID could not be parsed.
public struct DeviceIDError: KaitenError, Equatable {
    public enum Reason: Equatable, Sendable {
        case wrongLength(Int)
        case wrongByteLength(Int)
        case invalidCharacter(Character)
        case checkCharacterMismatch(group: Int)
    }
    public let input: String
    public let reason: Reason

    public var location: String? { nil }

    public var message: String {
        switch reason {
        case .wrongLength(let n):
            return "invalid device ID \"\(input)\": \(n) characters, want 56 (or 52 without check characters)"
        case .wrongByteLength(let n):
            return "invalid device ID: \(n) bytes, want 32"
        case .invalidCharacter(let ch):
            return "invalid device ID \"\(input)\": character \"\(ch)\" is not base32 (A-Z, 2-7)"
        case .checkCharacterMismatch(let group):
            // Each check character covers 13 characters, and ends every second group of the
            // eight an ID is shown in: name them as the user sees them.
            return
                "invalid device ID \"\(input)\": the check character that ends group \(group * 2) of 8 does not match; "
                + "a character of group \(group * 2 - 1) or \(group * 2) is mistyped"
        }
    }
}

/// RFC 4648 base32 with the standard alphabet and no padding.
enum Base32 {
    static let alphabet: [Character] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")

    static func value(of ch: Character) -> UInt8? {
        guard let ascii = ch.asciiValue else { return nil }
        switch ascii {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return ascii - UInt8(ascii: "A")
        case UInt8(ascii: "2")...UInt8(ascii: "7"): return ascii - UInt8(ascii: "2") + 26
        default: return nil
        }
    }

    static func encode(_ bytes: [UInt8]) -> String {
        var out = ""
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | UInt32(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int((buffer >> UInt32(bits - 5)) & 31)])
                bits -= 5
            }
        }
        if bits > 0 { out.append(alphabet[Int((buffer << UInt32(5 - bits)) & 31)]) }
        return out
    }

    static func decode(_ chars: [Character]) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for ch in chars {
            guard let v = value(of: ch) else { return nil }
            buffer = (buffer << 5) | UInt32(v)
            bits += 5
            if bits >= 8 {
                out.append(UInt8((buffer >> UInt32(bits - 8)) & 0xFF))
                bits -= 8
            }
        }
        return out
    }
}

/// Syncthing's Luhn-mod-32 variant (lib/protocol/luhn.go), not the textbook algorithm:
/// the factor alternates starting at 1 and the check character is taken from the same alphabet.
enum Luhn32 {
    static func checkCharacter(for chars: some Collection<Character>) -> Character {
        var factor = 1
        var sum = 0
        for ch in chars {
            let codepoint = Int(Base32.value(of: ch) ?? 0)
            var addend = factor * codepoint
            factor = factor == 2 ? 1 : 2
            addend = addend / 32 + addend % 32
            sum += addend
        }
        return Base32.alphabet[(32 - sum % 32) % 32]
    }
}

extension DeviceID {
    /// The text form of a short ID (a version-vector counter or `modified_by`), as syncthing
    /// prints it: the first 7 base32 characters of its 8 big-endian bytes (e.g. `JMIZHSD`).
    public static func shortIDString(_ shortID: UInt64) -> String {
        let bytes = (0..<8).map { UInt8(truncatingIfNeeded: shortID >> (56 - 8 * UInt64($0))) }
        return String(Base32.encode(bytes).prefix(7))
    }
}

/// In JSON, a device ID is the string a person reads and syncthing writes (`ABCDEFG-…`); one
/// that does not parse is refused as the value it is.
extension DeviceID: Codable {
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do {
            self = try DeviceID(text)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "\(error)"))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
