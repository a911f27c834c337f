import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenConfig

/// Seeded fuzzing of cert.pem and key.pem (issue 42, item 7): a damaged identity file loads as
/// the same identity or is refused naming the file, never with a crash or another identity's ID.
@Suite(.ownThread, .timeLimit(.minutes(2)))
struct IdentityFuzzTests {
    @Test(arguments: Identity.KeyType.allCases)
    func damagedIdentityFilesLoadAsTheSameOrAreRefusedNamingTheFile(_ keyType: Identity.KeyType) throws {
        var random = SplitMix64.forTest("damagedIdentityFilesLoadAsTheSameOrAreRefusedNamingTheFile")
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let identity = try Identity.generate(keyType: keyType)
        let certPath = directory.file("cert.pem")
        let keyPath = directory.file("key.pem")
        var refused = 0
        for round in 0..<300 {
            var cert = Array(identity.certificatePEM.utf8)
            var key = Array(identity.privateKeyPEM.utf8)
            func damage(_ bytes: inout [UInt8]) {
                switch random.next() % 4 {
                case 0: bytes = Array(bytes.prefix(Int(random.next() % UInt64(bytes.count))))
                case 1: bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
                case 2: bytes.insert(contentsOf: Array("-----BEGIN CERTIFICATE-----\n".utf8), at: Int(random.next() % UInt64(bytes.count)))
                default: bytes = bytes + (0..<Int(random.next() % 64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                }
            }
            if round % 2 == 0 { damage(&cert) } else { damage(&key) }
            try Data(cert).write(to: URL(fileURLWithPath: certPath))
            try Data(key).write(to: URL(fileURLWithPath: keyPath))
            do {
                let loaded = try Identity.load(certificatePath: certPath, keyPath: keyPath)
                // Damage past the PEM block, or in a byte base64 ignores: still this identity.
                #expect(loaded.deviceID == identity.deviceID, "round \(round)")
            } catch {
                refused += 1
                #expect(error.file == certPath || error.file == keyPath, "round \(round): \(error)")
            }
        }
        #expect(refused > 100, "\(refused) of 300 refused")
    }
}
