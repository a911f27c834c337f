import Foundation
import KaitenProtocol
import KaitenTestSupport
import Crypto
import SwiftASN1
import Testing
import X509

@testable import KaitenConfig

@Suite(.timeLimit(.minutes(5)))
struct IdentityTests {
    /// ECDSA P-384 as syncthing 1.x makes it, Ed25519 as 2.x does (checked against
    /// `syncthing-2 generate`: same names, validity and extensions, PKCS#8 key.pem).
    @Test(arguments: Identity.KeyType.allCases)
    func generatedCertificateIsMadeAsSyncthingMakesIt(_ keyType: Identity.KeyType) throws {
        let now = Date(timeIntervalSince1970: 1_795_400_000)  // 2026-11-21 some time of day
        let identity = try Identity.generate(keyType: keyType, now: now)
        let certificate = try Certificate(derEncoded: identity.certificateDER)
        #expect(certificate.subject.description == "CN=syncthing,OU=Automatically Generated,O=Syncthing")
        #expect(certificate.issuer == certificate.subject)
        #expect(certificate.signatureAlgorithm == (keyType == .ecdsa ? .ecdsaWithSHA256 : .ed25519))
        let midnight = Date(timeIntervalSince1970: TimeInterval((1_795_400_000 / 86400) * 86400))
        #expect(certificate.notValidBefore == midnight)
        #expect(certificate.notValidAfter == midnight.addingTimeInterval(7300 * 86400))
        #expect(try certificate.extensions.subjectAlternativeNames == SubjectAlternativeNames([.dnsName("syncthing")]))
        #expect(try certificate.extensions.keyUsage == KeyUsage(digitalSignature: true, keyEncipherment: true))
        #expect(try certificate.extensions.extendedKeyUsage == ExtendedKeyUsage([.serverAuth, .clientAuth]))
        #expect(try certificate.extensions.basicConstraints == .notCertificateAuthority)
        #expect(identity.deviceID == DeviceID(certificateDER: identity.certificateDER))
        switch keyType {
        case .ecdsa:
            #expect(identity.privateKeyPEM.hasPrefix("-----BEGIN EC PRIVATE KEY-----"))
            #expect(P384.Signing.PublicKey(certificate.publicKey) != nil)
        case .ed25519:
            #expect(identity.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
            #expect(Curve25519.Signing.PublicKey(certificate.publicKey) != nil)
        }
        // What was written loads back as the same identity.
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try identity.write(certificatePath: dir.file("cert.pem"), keyPath: dir.file("key.pem"))
        #expect(try Identity.load(certificatePath: dir.file("cert.pem"), keyPath: dir.file("key.pem")).deviceID == identity.deviceID)
    }

    @Test(arguments: CertificateFactory.KeyType.allCases)
    func dropInKeysOfEveryKindLoad(_ type: CertificateFactory.KeyType) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let (cert, key) = try CertificateFactory.make(type)
        try cert.write(toFile: dir.file("cert.pem"), atomically: true, encoding: .utf8)
        try key.write(toFile: dir.file("key.pem"), atomically: true, encoding: .utf8)
        let identity = try Identity.load(certificatePath: dir.file("cert.pem"), keyPath: dir.file("key.pem"))
        #expect(identity.deviceID == (try Identity.deviceID(certificatePath: dir.file("cert.pem"))))
    }

    @Test func keyOfAnotherCertificateIsNamedWithBothFiles() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let a = try CertificateFactory.make(.p384SEC1)
        let b = try CertificateFactory.make(.p384SEC1)
        try a.cert.write(toFile: dir.file("cert.pem"), atomically: true, encoding: .utf8)
        try b.key.write(toFile: dir.file("key.pem"), atomically: true, encoding: .utf8)
        let error = #expect(throws: ConfigError.self) {
            try Identity.load(certificatePath: dir.file("cert.pem"), keyPath: dir.file("key.pem"))
        }
        #expect(error?.code == .keyMismatch)
        #expect(error?.description.contains(dir.file("cert.pem")) == true)
        #expect(error?.description.contains(dir.file("key.pem")) == true)
    }

    @Test(arguments: [
        ("", ConfigError.Code.malformedPEM),
        ("-----BEGIN CERTIFICATE-----\nnot base64!!\n-----END CERTIFICATE-----\n", .malformedPEM),
        ("hello", .malformedPEM),
    ])
    func garbledCertificateIsNamed(content: String, code: ConfigError.Code) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try content.write(toFile: dir.file("cert.pem"), atomically: true, encoding: .utf8)
        let (_, key) = try CertificateFactory.make(.p256PKCS8)
        try key.write(toFile: dir.file("key.pem"), atomically: true, encoding: .utf8)
        let error = #expect(throws: ConfigError.self) {
            try Identity.load(certificatePath: dir.file("cert.pem"), keyPath: dir.file("key.pem"))
        }
        #expect(error?.code == code)
        #expect(error?.file == dir.file("cert.pem"))
    }

    @Test func missingKeyIsNamed() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let (cert, _) = try CertificateFactory.make(.p256PKCS8)
        try cert.write(toFile: dir.file("cert.pem"), atomically: true, encoding: .utf8)
        let error = #expect(throws: ConfigError.self) {
            try Identity.load(certificatePath: dir.file("cert.pem"), keyPath: dir.file("key.pem"))
        }
        #expect(error?.code == .missingFile)
        #expect(error?.file == dir.file("key.pem"))
    }

    @Test func initializeNeverOverwrites() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = Home(path: dir.file("home"))
        try FileManager.default.createDirectory(atPath: home.path, withIntermediateDirectories: true)
        try "mine".write(toFile: home.certificatePath, atomically: true, encoding: .utf8)
        let error = #expect(throws: ConfigError.self) { try KaitenHome.initialize(home, name: "x") }
        #expect(error?.code == .alreadyExists)
        #expect(try String(contentsOfFile: home.certificatePath, encoding: .utf8) == "mine")
        #expect(!FileManager.default.fileExists(atPath: home.keyPath))
        #expect(!FileManager.default.fileExists(atPath: home.configPath))
    }

    @Test func initializeMakesAHomeThatOpens() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = Home(path: dir.file("home"))
        let created = try KaitenHome.initialize(home, name: "box", listenAddress: "tcp://127.0.0.1:22000")
        let opened = try KaitenHome.open(home)
        #expect(opened.identity.deviceID == created.deviceID)
        #expect(opened.config.device(id: created.deviceID)?.name == "box")
        let mode = try FileManager.default.attributesOfItem(atPath: home.keyPath)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        for directory in [home.selectionsDirectory, home.indexDirectory, home.stateDirectory] {
            #expect(FileManager.default.fileExists(atPath: directory))
        }
    }

    @Test func badListenAddressIsRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        #expect(throws: ConfigError.self) {
            try KaitenHome.initialize(Home(path: dir.file("h")), name: "x", listenAddress: "http://nope")
        }
        #expect(!FileManager.default.fileExists(atPath: dir.file("h/cert.pem")))
    }
}
