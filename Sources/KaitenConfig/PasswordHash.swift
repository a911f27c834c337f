import CCrypt
import Foundation

/// The GUI password as syncthing stores it in config.xml: a bcrypt hash (`$2a$10$…`, cost 10),
/// made and checked by libxcrypt.
public enum PasswordHash {
    /// A bcrypt hash of `password`, with a fresh salt.
    public static func make(_ password: String) throws(ConfigError) -> String {
        var salt = [CChar](repeating: 0, count: Int(CRYPT_GENSALT_OUTPUT_SIZE))
        guard crypt_gensalt_rn("$2a$", 10, nil, 0, &salt, Int32(salt.count)) != nil else {
            throw ConfigError(.writeFailed, file: "config.xml", "cannot make a bcrypt salt: \(String(cString: strerror(errno)))")
        }
        let setting = String(decoding: salt.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let hash = crypt(password, setting), isHash(hash) else {
            throw ConfigError(.writeFailed, file: "config.xml", "cannot hash the GUI password with bcrypt")
        }
        return hash
    }

    /// Whether `password` is what `hash` (bcrypt) was made from. Time does not depend on
    /// where a wrong password differs.
    public static func matches(_ password: String, hash: String) -> Bool {
        guard isHash(hash), let computed = crypt(password, hash) else { return false }
        let a = Array(computed.utf8)
        let b = Array(hash.utf8)
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in 0..<a.count { difference |= a[i] ^ b[i] }
        return difference == 0
    }

    /// A bcrypt hash as syncthing and libxcrypt write it: `$2a$`, `$2b$` or `$2y$`, 60 characters.
    public static func isHash(_ text: String) -> Bool {
        text.count == 60 && (text.hasPrefix("$2a$") || text.hasPrefix("$2b$") || text.hasPrefix("$2y$"))
    }

    /// crypt_r with its own buffer: crypt(3) shares one between threads.
    private static func crypt(_ password: String, _ setting: String) -> String? {
        let data = UnsafeMutablePointer<crypt_data>.allocate(capacity: 1)
        defer {
            memset(data, 0, MemoryLayout<crypt_data>.size)
            data.deallocate()
        }
        memset(data, 0, MemoryLayout<crypt_data>.size)
        guard let result = crypt_r(password, setting, data) else { return nil }
        let text = String(cString: result)
        // libxcrypt returns a string starting with '*' on failure.
        return text.hasPrefix("*") ? nil : text
    }
}
