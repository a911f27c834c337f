import Crypto
import CryptoExtras
import Foundation

/// AES-SIV (RFC 5297) with a 256-bit key: the first half keys S2V's CMAC, the second the CTR
/// stream. Deterministic: the same key, associated data and plaintext give the same output,
/// which is what lets encrypted names be compared without the key. The output is the
/// synthetic IV (16 bytes) followed by the ciphertext.
///
/// syncthing seals with miscreant's AES-CMAC-SIV and a nil nonce, which miscreant passes as one
/// more, empty, associated-data item: callers give that empty item themselves
/// (``EncryptionKeys``).
public enum AESSIV {
    public static let overhead = 16

    public static func seal(_ plaintext: some DataProtocol, key: SymmetricKey, associatedData: [[UInt8]]) throws(EncryptionError) -> [UInt8] {
        let (macKey, ctrKey) = try split(key)
        let plain = Array(plaintext)
        let iv = try s2v(macKey, associatedData, plain)
        return iv + (try ctr(ctrKey, iv, plain))
    }

    public static func open(_ sealed: some DataProtocol, key: SymmetricKey, associatedData: [[UInt8]]) throws(EncryptionError) -> [UInt8] {
        let bytes = Array(sealed)
        guard bytes.count >= overhead else { throw .authentication("shorter than its synthetic IV") }
        let (macKey, ctrKey) = try split(key)
        let iv = Array(bytes[..<overhead])
        let plain = try ctr(ctrKey, iv, Array(bytes[overhead...]))
        let expected = try s2v(macKey, associatedData, plain)
        // Compared in constant time: the IV is the tag.
        var difference: UInt8 = 0
        for i in 0..<overhead { difference |= expected[i] ^ iv[i] }
        guard difference == 0 else { throw .authentication("the synthetic IV does not match") }
        return plain
    }

    private static func split(_ key: SymmetricKey) throws(EncryptionError) -> (SymmetricKey, SymmetricKey) {
        guard key.bitCount == 256 else { throw .keySize(key.bitCount / 8) }
        return key.withUnsafeBytes { raw in
            (SymmetricKey(data: Array(raw[..<16])), SymmetricKey(data: Array(raw[16...])))
        }
    }

    private static func cmac(_ key: SymmetricKey, _ bytes: [UInt8]) throws(EncryptionError) -> [UInt8] {
        do {
            var mac = try AES.CMAC(key: key)
            mac.update(data: bytes)
            return Array(mac.finalize())
        } catch {
            throw .primitive("AES-CMAC: \(error)")
        }
    }

    /// Doubling in GF(2^128), as CMAC's subkeys are made.
    private static func double(_ block: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        var carry: UInt8 = 0
        for i in stride(from: 15, through: 0, by: -1) {
            out[i] = block[i] << 1 | carry
            carry = block[i] >> 7
        }
        if carry == 1 { out[15] ^= 0x87 }
        return out
    }

    private static func s2v(_ key: SymmetricKey, _ associatedData: [[UInt8]], _ plaintext: [UInt8]) throws(EncryptionError) -> [UInt8] {
        var d = try cmac(key, [UInt8](repeating: 0, count: 16))
        for item in associatedData {
            let mac = try cmac(key, item)
            d = zip(double(d), mac).map { $0 ^ $1 }
        }
        var t: [UInt8]
        if plaintext.count >= 16 {
            t = plaintext
            let start = t.count - 16
            for i in 0..<16 { t[start + i] ^= d[i] }
        } else {
            var padded = plaintext + [0x80]
            padded += [UInt8](repeating: 0, count: 16 - padded.count)
            t = zip(double(d), padded).map { $0 ^ $1 }
        }
        return try cmac(key, t)
    }

    private static func ctr(_ key: SymmetricKey, _ iv: [UInt8], _ bytes: [UInt8]) throws(EncryptionError) -> [UInt8] {
        guard !bytes.isEmpty else { return [] }
        // The counter starts at the IV with its 31st and 63rd bits (from the right) cleared.
        var q = iv
        q[8] &= 0x7f
        q[12] &= 0x7f
        do {
            return Array(try AES._CTR.encrypt(bytes, using: key, nonce: AES._CTR.Nonce(nonceBytes: q)))
        } catch {
            throw .primitive("AES-CTR: \(error)")
        }
    }
}
