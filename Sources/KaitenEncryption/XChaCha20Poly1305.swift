import Crypto
import Foundation

/// XChaCha20-Poly1305: ChaCha20-Poly1305 (RFC 8439) under a subkey made by HChaCha20 from the
/// key and the first 16 bytes of a 24-byte nonce, with the nonce's last 8 bytes (after four
/// zero bytes) as the inner nonce. A random 24-byte nonce is safe to use without counting.
/// The sealed form is nonce ‖ ciphertext ‖ tag, as syncthing stores blocks.
public enum XChaCha20Poly1305 {
    public static let nonceSize = 24
    public static let tagSize = 16
    public static let overhead = nonceSize + tagSize

    public static func seal(_ plaintext: some DataProtocol, key: SymmetricKey, nonce: [UInt8]? = nil) throws(EncryptionError) -> [UInt8] {
        let nonce = nonce ?? (0..<nonceSize).map { _ in UInt8.random(in: 0...255) }
        guard nonce.count == nonceSize else { throw .primitive("an XChaCha20 nonce is 24 bytes, not \(nonce.count)") }
        let (subkey, inner) = try derive(key, nonce)
        do {
            let box = try ChaChaPoly.seal(plaintext, using: subkey, nonce: inner)
            return nonce + Array(box.ciphertext) + Array(box.tag)
        } catch {
            throw .primitive("ChaCha20-Poly1305: \(error)")
        }
    }

    public static func open(_ sealed: some DataProtocol, key: SymmetricKey) throws(EncryptionError) -> [UInt8] {
        let bytes = Array(sealed)
        guard bytes.count >= overhead else { throw .authentication("\(bytes.count) bytes, shorter than a nonce and a tag") }
        let nonce = Array(bytes[..<nonceSize])
        let (subkey, inner) = try derive(key, nonce)
        let box: ChaChaPoly.SealedBox
        do {
            box = try ChaChaPoly.SealedBox(nonce: inner, ciphertext: bytes[nonceSize..<(bytes.count - tagSize)], tag: bytes[(bytes.count - tagSize)...])
        } catch {
            throw .primitive("ChaCha20-Poly1305: \(error)")
        }
        do {
            return Array(try ChaChaPoly.open(box, using: subkey))
        } catch {
            throw .authentication("the Poly1305 tag does not match")
        }
    }

    private static func derive(_ key: SymmetricKey, _ nonce: [UInt8]) throws(EncryptionError) -> (SymmetricKey, ChaChaPoly.Nonce) {
        guard key.bitCount == 256 else { throw .keySize(key.bitCount / 8) }
        let subkey = key.withUnsafeBytes { hChaCha20(key: Array($0), nonce: Array(nonce[..<16])) }
        do {
            return (SymmetricKey(data: subkey), try ChaChaPoly.Nonce(data: [0, 0, 0, 0] + nonce[16...]))
        } catch {
            throw .primitive("ChaCha20-Poly1305 nonce: \(error)")
        }
    }

    /// HChaCha20 (draft-irtf-cfrg-xchacha, section 2.2): ChaCha20's twenty rounds over the
    /// constants, the key and 16 nonce bytes, without the final addition; the first and last
    /// rows of the state are the subkey.
    static func hChaCha20(key: [UInt8], nonce: [UInt8]) -> [UInt8] {
        func word(_ bytes: [UInt8], _ at: Int) -> UInt32 {
            UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
        }
        var s: [UInt32] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]
        for i in 0..<8 { s.append(word(key, 4 * i)) }
        for i in 0..<4 { s.append(word(nonce, 4 * i)) }
        func quarter(_ a: Int, _ b: Int, _ c: Int, _ d: Int) {
            s[a] &+= s[b]; s[d] ^= s[a]; s[d] = s[d] << 16 | s[d] >> 16
            s[c] &+= s[d]; s[b] ^= s[c]; s[b] = s[b] << 12 | s[b] >> 20
            s[a] &+= s[b]; s[d] ^= s[a]; s[d] = s[d] << 8 | s[d] >> 24
            s[c] &+= s[d]; s[b] ^= s[c]; s[b] = s[b] << 7 | s[b] >> 25
        }
        for _ in 0..<10 {
            quarter(0, 4, 8, 12); quarter(1, 5, 9, 13); quarter(2, 6, 10, 14); quarter(3, 7, 11, 15)
            quarter(0, 5, 10, 15); quarter(1, 6, 11, 12); quarter(2, 7, 8, 13); quarter(3, 4, 9, 14)
        }
        var out: [UInt8] = []
        out.reserveCapacity(32)
        for i in [0, 1, 2, 3, 12, 13, 14, 15] {
            out += [UInt8(truncatingIfNeeded: s[i]), UInt8(truncatingIfNeeded: s[i] >> 8), UInt8(truncatingIfNeeded: s[i] >> 16), UInt8(truncatingIfNeeded: s[i] >> 24)]
        }
        return out
    }
}
