import Crypto
import CryptoExtras
import Foundation
import Synchronization

/// A folder's key, made from its ID and password as syncthing makes it: scrypt (N 32768, r 8,
/// p 1) of the password with the salt "syncthing" + folder ID, 32 bytes. Every name, file key
/// and token of the folder comes from it.
public struct FolderKey: Sendable {
    public let folderID: String
    let key: SymmetricKey

    /// Derives the key (about 100 ms and 32 MiB: scrypt is meant to be slow). The same folder
    /// and password are derived once per process.
    public init(folderID: String, password: String) throws(EncryptionError) {
        let cacheKey = CacheKey(folderID: folderID, password: password)
        if let known = Self.derived.withLock({ $0[cacheKey] }) {
            self = known
            return
        }
        do {
            key = try KDF.Scrypt.deriveKey(
                from: Array(password.utf8), salt: Array(("syncthing" + folderID).utf8), outputByteCount: 32,
                rounds: 32768, blockSize: 8, parallelism: 1, maxMemory: 64 << 20)
        } catch {
            throw .primitive("scrypt: \(error)")
        }
        self.folderID = folderID
        let made = self
        Self.derived.withLock { $0[cacheKey] = made }
    }

    /// A key given as is (tests, and keys already derived).
    public init(folderID: String, raw: [UInt8]) {
        self.folderID = folderID
        self.key = SymmetricKey(data: raw)
    }

    private struct CacheKey: Hashable {
        let folderID: String
        let password: String
    }

    private static let derived = Mutex<[CacheKey: FolderKey]>([:])

    /// The key of one file: HKDF-SHA256 of the folder key followed by the file's plain name,
    /// salt "syncthing", no info.
    public func fileKey(for name: String) -> SymmetricKey {
        let material = key.withUnsafeBytes { Array($0) } + Array(name.utf8)
        return HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: material), salt: Array("syncthing".utf8), info: [UInt8](), outputByteCount: 32)
    }

    /// What a trusted device sends an untrusted one in its ClusterConfig to say which password
    /// it uses: the folder's "syncthing" + ID, sealed deterministically. Equal tokens, equal
    /// passwords; the token reveals nothing of the password.
    public var passwordToken: [UInt8] {
        // Sealing with a valid 32-byte key cannot fail.
        (try? AESSIV.seal(Array(("syncthing" + folderID).utf8), key: key, associatedData: [[]])) ?? []
    }

    /// The encrypted form of a plain name: deterministic, so the same name always has the same
    /// encrypted name, spelled in base32hex and cut into directories as syncthing stores it.
    public func encryptName(_ name: String) -> String {
        let sealed = (try? AESSIV.seal(Array(name.utf8), key: key, associatedData: [[]])) ?? []
        return EncryptedPath.slashify(Base32Hex.encode(sealed))
    }

    /// The plain name behind an encrypted one; an error when it is not one syncthing would make
    /// or does not open with this key.
    public func decryptName(_ encrypted: String) throws(EncryptionError) -> String {
        let joined = try EncryptedPath.deslashify(encrypted)
        guard let sealed = Base32Hex.decode(joined.utf8) else { throw .malformedName("\"\(encrypted)\" is not base32hex") }
        let plain = try AESSIV.open(sealed, key: key, associatedData: [[]])
        guard let name = String(validating: plain, as: UTF8.self) else { throw .malformedName("\"\(encrypted)\" does not decrypt to UTF-8") }
        return name
    }
}

/// How syncthing cuts an encrypted name into a path: the first character and the suffix
/// `.syncthing-enc`, then the next two characters, then parts of 200 while more than 200 are
/// left, then the rest. Short directory names and few entries per directory.
public enum EncryptedPath {
    public static let suffix = ".syncthing-enc"
    public static let component = 200

    public static func slashify(_ s: String) -> String {
        let bytes = Array(s.utf8)
        guard bytes.count > 3 else { return s }
        var parts: [ArraySlice<UInt8>] = []
        parts.append(bytes[0..<1] + Array(suffix.utf8))
        parts.append(bytes[1..<3])
        var at = 3
        while bytes.count - at > component {
            parts.append(bytes[at..<(at + component)])
            at += component
        }
        parts.append(bytes[at...])
        return parts.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "/")
    }

    public static func deslashify(_ path: String) throws(EncryptionError) -> String {
        let bytes = Array(path.utf8)
        guard bytes.count > 1, bytes[1...].starts(with: suffix.utf8) else { throw .malformedName("\"\(path)\" has no \(suffix) after its first character") }
        let rest = bytes[0..<1] + bytes[(1 + suffix.utf8.count)...]
        return String(decoding: rest.filter { $0 != UInt8(ascii: "/") }, as: UTF8.self)
    }

    /// Whether `path` could be a directory syncthing makes to hold encrypted names (a parent of
    /// one), rather than a stored file.
    public static func isParent(_ path: String) -> Bool {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard let first = parts.first, first.utf8.count == 1 + suffix.utf8.count, first.hasSuffix(suffix) else { return false }
        if parts.count == 1 { return true }
        guard parts[1].utf8.count == 2 else { return false }
        return parts.dropFirst(2).allSatisfy { $0.utf8.count == component }
    }
}
