import Crypto
import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenEncryption

private func bytes(hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var iterator = hex.filter { !$0.isWhitespace }.makeIterator()
    while let high = iterator.next(), let low = iterator.next() { out.append(UInt8(String([high, low]), radix: 16)!) }
    return out
}

@Suite(.timeLimit(.minutes(2)))
struct AESSIVTests {
    /// RFC 5297, appendix A.1 (deterministic, one associated-data item).
    @Test func rfc5297DeterministicVector() throws {
        let key = SymmetricKey(data: bytes(hex: "fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"))
        let ad = bytes(hex: "101112131415161718191a1b1c1d1e1f2021222324252627")
        let plain = bytes(hex: "112233445566778899aabbccddee")
        let sealed = try AESSIV.seal(plain, key: key, associatedData: [ad])
        #expect(sealed == bytes(hex: "85632d07c6e8f37f950acd320a2ecc93 40c02b9690c4dc04daef7f6afe5c"))
        #expect(try AESSIV.open(sealed, key: key, associatedData: [ad]) == plain)
    }

    @Test func anyChangedByteOrOtherAssociatedDataIsRefused() throws {
        let key = SymmetricKey(data: [UInt8](repeating: 7, count: 32))
        let sealed = try AESSIV.seal(Array("a name of some length".utf8), key: key, associatedData: [[]])
        for index in sealed.indices {
            var altered = sealed
            altered[index] ^= 0x01
            #expect(throws: EncryptionError.self) { try AESSIV.open(altered, key: key, associatedData: [[]]) }
        }
        #expect(throws: EncryptionError.self) { try AESSIV.open(sealed, key: key, associatedData: []) }
        #expect(throws: EncryptionError.self) { try AESSIV.open(sealed, key: key, associatedData: [[], []]) }
    }
}

@Suite(.timeLimit(.minutes(2)))
struct XChaCha20Poly1305Tests {
    /// draft-irtf-cfrg-xchacha-03, section 2.2.1.
    @Test func hChaCha20Vector() {
        let subkey = XChaCha20Poly1305.hChaCha20(
            key: (0..<32).map { UInt8($0) }, nonce: bytes(hex: "000000090000004a0000000031415927"))
        #expect(subkey == bytes(hex: "82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc"))
    }

    @Test func sealsWithAFreshNonceAndRefusesAnyChange() throws {
        let key = SymmetricKey(data: [UInt8](repeating: 3, count: 32))
        let first = try XChaCha20Poly1305.seal(Array("block".utf8), key: key)
        let second = try XChaCha20Poly1305.seal(Array("block".utf8), key: key)
        #expect(first != second)
        #expect(first.count == 5 + XChaCha20Poly1305.overhead)
        #expect(try XChaCha20Poly1305.open(first, key: key) == Array("block".utf8))
        for index in first.indices {
            var altered = first
            altered[index] ^= 0x80
            #expect(throws: EncryptionError.self) { try XChaCha20Poly1305.open(altered, key: key) }
        }
    }
}

@Suite(.timeLimit(.minutes(2)))
struct SyncthingEncryptionTests {
    /// syncthing's own vector (lib/protocol/encryption_test.go, TestKeyDerivation at v2.1.3):
    /// the folder key from scrypt, a name sealed with it, and a block sealed with a file key.
    @Test func syncthingsKeyDerivationVector() throws {
        let folderKey = try FolderKey(folderID: "my folder", password: "my password")
        let sealed = try AESSIV.seal(Array("filename.txt".utf8), key: folderKey.key, associatedData: [[]])
        #expect(Base32Hex.encode(sealed) == "3T5957I4IOA20VEIEER6JSQG0PEPIRV862II3K7LOF75Q")
        let block = try #require(Base32Hex.decode("A1IPD28ISL7VNPRSSSQM2L31L3IJPC08283RO89J5UG0TI9P38DO9RFGK12DK0KD7PKQP6U51UL2B6H96O".utf8))
        let plain = try XChaCha20Poly1305.open(block, key: folderKey.fileKey(for: "filename.txt"))
        #expect(String(decoding: plain, as: UTF8.self) == "hello world")
        // Another file's key does not open it.
        #expect(throws: EncryptionError.self) { try XChaCha20Poly1305.open(block, key: folderKey.fileKey(for: "filename.txT")) }
    }

    @Test func namesEncryptTheSameEveryTimeAndAreCutAsSyncthingCutsThem() throws {
        let key = FolderKey(folderID: "f", raw: [UInt8](repeating: 0, count: 32))
        let pattern = try Regex("^[0-9A-V]\\.syncthing-enc/[0-9A-V]{2}/([0-9A-V]{200}/)*[0-9A-V]{1,199}$")
        for name in ["", "foo", "a longer name/with/slashes and spaces", String(repeating: "n", count: 200), String(repeating: "x", count: 401), "café/ü"] {
            let encrypted = key.encryptName(name)
            #expect(encrypted == key.encryptName(name))
            #expect(name.isEmpty || !encrypted.contains(name))
            #expect(encrypted.wholeMatch(of: pattern) != nil, "\(encrypted)")
            #expect(try key.decryptName(encrypted) == name)
        }
        for bad in ["T.syncthing-enc/OD", "T.syncthing-enc/OD/", "T.wrong-extension/OD/PHVDD67S7FI2K5QQMPSOFSK", "OD/PHVDD67S7FI2K5QQMPSOFSK", ""] {
            #expect(throws: EncryptionError.self) { try key.decryptName(bad) }
        }
        // A name sealed under another folder's key is refused, not read as something else.
        let other = FolderKey(folderID: "f", raw: [UInt8](repeating: 1, count: 32))
        #expect(throws: EncryptionError.self) { try key.decryptName(other.encryptName("foo")) }
    }

    @Test func base32HexRoundTripsAndRefusesWhatItWouldNotWrite() {
        var random = SplitMix64(seed: 5)
        for length in 0..<70 {
            let data = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            #expect(Base32Hex.decode(Base32Hex.encode(data).utf8) == data)
        }
        #expect(Base32Hex.decode("0".utf8) == nil)
        #expect(Base32Hex.decode("0W".utf8) == nil)
        #expect(Base32Hex.decode("01".utf8) == nil)  // non-zero leftover bits
    }

    @Test func blocksArePaddedToAKilobyteAndCutBack() throws {
        let key = SymmetricKey(data: [UInt8](repeating: 9, count: 32))
        let sealed = try EncryptedBlock.seal(Array("tiny".utf8), fileKey: key)
        #expect(sealed.count == 1024 + 40 && EncryptedBlock.sealedSize(4) == sealed.count)
        #expect(try EncryptedBlock.open(sealed, fileKey: key, plainSize: 4) == Array("tiny".utf8))
        #expect(throws: EncryptionError.self) { try EncryptedBlock.open(sealed, fileKey: key, plainSize: 2000) }
        let whole = [UInt8](repeating: 1, count: 128 << 10)
        let big = try EncryptedBlock.seal(whole, fileKey: key)
        #expect(big.count == (128 << 10) + 40)
        #expect(throws: EncryptionError.self) { try EncryptedBlock.open(big, fileKey: key, plainSize: 4) }
    }

    @Test func theTokenFileRoundTripsAndTheTokenNamesThePassword() throws {
        let key = FolderKey(folderID: "photos", raw: [UInt8](repeating: 4, count: 32))
        let other = FolderKey(folderID: "photos", raw: [UInt8](repeating: 5, count: 32))
        #expect(key.passwordToken.count == 16 + "syncthingphotos".utf8.count)
        #expect(key.passwordToken == key.passwordToken && key.passwordToken != other.passwordToken)
        let dir = try TemporaryDirectory(prefix: "kaiten-token")
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.file(".stfolder"), withIntermediateDirectories: true)
        let token = StoredPasswordToken(folderID: "photos", token: key.passwordToken)
        try Data(token.encoded()).write(to: URL(fileURLWithPath: dir.file(StoredPasswordToken.relativePath)))
        #expect(try StoredPasswordToken.read(folderPath: dir.path) == token)
        try Data("{\"FolderID\": 3}".utf8).write(to: URL(fileURLWithPath: dir.file(StoredPasswordToken.relativePath)))
        #expect(throws: EncryptionError.self) { try StoredPasswordToken.read(folderPath: dir.path) }
    }
}
