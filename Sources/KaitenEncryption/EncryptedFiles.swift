import Crypto
import Foundation
import KaitenProtocol
import SwiftProtobuf

/// The sizes syncthing's encrypted form uses.
public enum EncryptedBlock {
    /// A plain block shorter than this is padded with random bytes to it before sealing: the
    /// untrusted device does not learn the exact size of small files.
    public static let minimumPadded = 1024
    /// Nonce and tag.
    public static let overhead = XChaCha20Poly1305.overhead

    /// The sealed size of a plain block of `size` bytes.
    public static func sealedSize(_ size: Int) -> Int { max(size, minimumPadded) + overhead }

    /// Seals one plain block (padded when short) with the file's key.
    public static func seal(_ plain: some DataProtocol, fileKey: SymmetricKey) throws(EncryptionError) -> [UInt8] {
        var bytes = Array(plain)
        if bytes.count < minimumPadded {
            bytes += (0..<(minimumPadded - bytes.count)).map { _ in UInt8.random(in: 0...255) }
        }
        return try XChaCha20Poly1305.seal(bytes, key: fileKey)
    }

    /// Opens one sealed block and cuts it to the plain size the plain FileInfo says.
    public static func open(_ sealed: some DataProtocol, fileKey: SymmetricKey, plainSize: Int) throws(EncryptionError) -> [UInt8] {
        let plain = try XChaCha20Poly1305.open(sealed, key: fileKey)
        guard plain.count >= plainSize, plain.count == plainSize || plain.count == minimumPadded else {
            throw .malformed("decrypts to \(plain.count) bytes where the block has \(plainSize)")
        }
        return plain.count == plainSize ? plain : Array(plain[..<plainSize])
    }
}

/// A FileInfo as an untrusted device has it: the outer, encrypted one, and what it holds.
public enum EncryptedFileInfo {
    /// The plain FileInfo inside an encrypted one: its name opened with the folder key, then
    /// its `encrypted` field with that file's key. The sequence is the outer one (the untrusted
    /// device's own). The plain name must be a clean folder-relative name and its blocks must
    /// match the outer ones in number.
    public static func decrypt(_ outer: BEPFileInfo, folderKey: FolderKey) throws(EncryptionError) -> BEPFileInfo {
        let name = try folderKey.decryptName(outer.name)
        let sealed = try XChaCha20Poly1305.open(outer.encrypted, key: folderKey.fileKey(for: name))
        var plain: BEPFileInfo
        do {
            plain = try BEPFileInfo(serializedBytes: sealed)
        } catch {
            throw .malformed("its metadata does not decode: \(error)")
        }
        guard plain.name == name else {
            throw .malformed("it holds the metadata of \"\(plain.name)\" under the name of \"\(name)\"")
        }
        do {
            try plain.validate()
        } catch {
            throw .malformed("\(error)")
        }
        if outer.type == .file && !outer.deleted {
            guard plain.blocks.count == outer.blocks.count else {
                throw .malformed("block count mismatch: encrypted \(outer.blocks.count), plain \(plain.blocks.count)")
            }
            for (index, (sealed, block)) in zip(outer.blocks, plain.blocks).enumerated()
            where Int(sealed.size) != EncryptedBlock.sealedSize(Int(block.size)) {
                throw .malformed("block \(index): \(sealed.size) encrypted bytes for \(block.size) plain")
            }
        }
        plain.sequence = outer.sequence
        return plain
    }
}

extension EncryptedFileInfo {
    /// syncthing's fixed modification time for every encrypted entry: the untrusted device
    /// does not learn when a file changed.
    public static let fixedModification: Int64 = 1_234_567_890

    /// The FileInfo an untrusted device is sent for `plain`: the name sealed with the folder
    /// key, the plain FileInfo sealed with the file's key in `encrypted`, everything the device
    /// needs to store and relay it (sealed sizes, block hashes sealed with their plain offset,
    /// the sequence, one version counter that grows with the plain ones) and nothing else (no
    /// time, mode, modifier or link target; symlinks and directories are directories to it).
    public static func encrypt(_ plain: BEPFileInfo, folderKey: FolderKey) throws(EncryptionError) -> BEPFileInfo {
        let fileKey = folderKey.fileKey(for: plain.name)
        let inner: [UInt8]
        do {
            inner = try plain.serializedBytes()
        } catch {
            throw .malformed("cannot encode \(plain.name)'s metadata: \(error)")
        }
        var outer = BEPFileInfo()
        outer.name = folderKey.encryptName(plain.name)
        outer.type = plain.type == .file ? .file : .directory
        outer.permissions = 0o644
        outer.modifiedS = fixedModification
        outer.deleted = plain.deleted
        outer.invalid = plain.invalid
        var counter = BEPCounter()
        counter.id = 1
        counter.value = plain.version.counters.reduce(0) { $0 &+ $1.value }
        outer.version.counters = [counter]
        outer.sequence = plain.sequence
        outer.encrypted = Data(try XChaCha20Poly1305.seal(inner, key: fileKey))
        if plain.type == .file && !plain.deleted {
            var offset: Int64 = 0
            outer.blocks = try plain.blocks.map { block throws(EncryptionError) in
                var sealed = BEPBlockInfo()
                sealed.offset = offset
                sealed.size = Int32(EncryptedBlock.sealedSize(Int(block.size)))
                sealed.hash = Data(try AESSIV.seal(block.hash, key: fileKey, associatedData: [bigEndian(block.offset), []]))
                offset += Int64(sealed.size)
                return sealed
            }
            outer.size = offset
            outer.blockSize = (plain.blockSize == 0 ? 128 << 10 : plain.blockSize) + Int32(EncryptedBlock.overhead)
        }
        return outer
    }

    /// The plain SHA-256 behind a sealed block hash, opened with the file key and the block's
    /// plain offset (or, as syncthing also accepts, none).
    public static func openBlockHash(_ sealed: some DataProtocol, fileKey: SymmetricKey, plainOffset: Int64) throws(EncryptionError) -> [UInt8] {
        do {
            return try AESSIV.open(sealed, key: fileKey, associatedData: [bigEndian(plainOffset), []])
        } catch {
            return try AESSIV.open(sealed, key: fileKey, associatedData: [[]])
        }
    }

    public static func bigEndian(_ value: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: UInt64(bitPattern: value) >> (56 - 8 * $0)) }
    }
}

/// A file as an untrusted device stores it: the sealed blocks at their encrypted offsets, then
/// the encrypted FileInfo's protobuf, then its length as a 32-bit big-endian number.
public enum EncryptedTrailer {
    /// Larger trailers are refused (a 1 TiB file of 16 MiB blocks needs under 20 MiB).
    public static let largest = 64 << 20

    /// Reads the trailer of the open file `fd` of `size` bytes.
    public static func read(fd: Int32, size: Int64) throws(EncryptionError) -> BEPFileInfo {
        guard size >= 4 else { throw .malformed("\(size) bytes: too short for an encrypted file's trailer") }
        let lengthBytes = try readExactly(fd: fd, count: 4, at: size - 4)
        let length = Int(lengthBytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        guard length <= largest, Int64(length) <= size - 4 else {
            throw .malformed("a trailer of \(length) bytes in a file of \(size)")
        }
        let bytes = try readExactly(fd: fd, count: length, at: size - 4 - Int64(length))
        let outer: BEPFileInfo
        do {
            outer = try BEPFileInfo(serializedBytes: bytes)
        } catch {
            throw .malformed("its trailer does not decode: \(error)")
        }
        var end: Int64 = 0
        for block in outer.blocks {
            guard block.offset == end, block.size > EncryptedBlock.overhead, block.size <= 16 << 20 + EncryptedBlock.overhead else {
                throw .malformed("its trailer lists a block of \(block.size) bytes at \(block.offset)")
            }
            end += Int64(block.size)
        }
        guard end == size - 4 - Int64(length) else {
            throw .malformed("its trailer lists \(end) bytes of blocks where the file has \(size - 4 - Int64(length))")
        }
        return outer
    }

    /// Appends `outer`'s trailer to the stored file's blocks.
    public static func encode(_ outer: BEPFileInfo) throws(EncryptionError) -> [UInt8] {
        let bytes: [UInt8]
        do {
            bytes = try outer.serializedBytes()
        } catch {
            throw .malformed("cannot encode a trailer: \(error)")
        }
        let length = UInt32(bytes.count)
        return bytes + [UInt8(length >> 24), UInt8(truncatingIfNeeded: length >> 16), UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)]
    }

    public static func readExactly(fd: Int32, count: Int, at offset: Int64) throws(EncryptionError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw .malformed(n == 0 ? "ends before byte \(offset + Int64(count))" : "cannot be read: \(String(cString: strerror(errno)))")
            }
            done += n
        }
        return bytes
    }
}

/// The token file an untrusted device keeps in its folder marker: which folder it holds, and
/// the password token the trusted devices sent it.
public struct StoredPasswordToken: Sendable, Equatable {
    public static let relativePath = ".stfolder/syncthing-encryption_password_token"

    public let folderID: String
    public let token: [UInt8]

    public init(folderID: String, token: [UInt8]) {
        self.folderID = folderID
        self.token = token
    }

    /// Reads `DIR/.stfolder/syncthing-encryption_password_token` (JSON, the token in standard
    /// base64); nil when there is none.
    public static func read(folderPath: String) throws(EncryptionError) -> StoredPasswordToken? {
        let path = folderPath + "/" + relativePath
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let folderID = object["FolderID"] as? String, let encoded = object["Token"] as? String,
            let token = Data(base64Encoded: encoded)
        else { throw .malformed("\(path) is not a folder token (JSON with FolderID and Token)") }
        return StoredPasswordToken(folderID: folderID, token: Array(token))
    }

    public func encoded() -> [UInt8] {
        let object: [String: Any] = ["FolderID": folderID, "Token": Data(token).base64EncodedString()]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return Array(data) + [UInt8(ascii: "\n")]
    }
}

extension EncryptedBlock {
    /// Opens a sealed block and checks it against the plain FileInfo's block: the tag first,
    /// then the size, then the SHA-256.
    public static func openVerified(_ sealed: some DataProtocol, fileKey: SymmetricKey, block: BEPBlockInfo) throws(EncryptionError) -> [UInt8] {
        let plain = try open(sealed, fileKey: fileKey, plainSize: Int(block.size))
        guard hashMatches(plain, block) else {
            throw .malformed("decrypts, but its \(block.size) bytes fail their SHA-256 check")
        }
        return plain
    }

    /// Whether `bytes` are the plain block `block` describes.
    public static func hashMatches(_ bytes: [UInt8], _ block: BEPBlockInfo) -> Bool {
        bytes.count == Int(block.size) && Data(SHA256.hash(data: bytes)) == block.hash
    }
}
