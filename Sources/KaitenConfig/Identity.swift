import Crypto
import Foundation
import KaitenFiles
import KaitenProtocol
import SwiftASN1
import X509

/// This device's identity: its certificate and private key, as PEM, and the device ID they give.
///
/// Kaiten makes certificates the way `syncthing generate` does (lib/tlsutil/tlsutil.go):
/// Ed25519 as syncthing 2.x (or ECDSA P-384 signed with ecdsa-with-SHA256, as 1.x), subject and issuer
/// `O=Syncthing, OU=Automatically Generated, CN=syncthing`, SAN `DNS:syncthing`,
/// key usage digitalSignature + keyEncipherment, EKU serverAuth + clientAuth, not a CA,
/// valid from today's UTC midnight for 20 years. Identities copied from a syncthing home load
/// unchanged: SEC1 (`EC PRIVATE KEY`), PKCS#8 (`PRIVATE KEY`), RSA and Ed25519 keys.
public struct Identity: Sendable {
    /// The certificate file content (PEM), exactly as read or written.
    public let certificatePEM: String
    /// The key file content (PEM), exactly as read or written.
    public let privateKeyPEM: String
    /// The certificate's DER bytes; the device ID is their SHA-256.
    public let certificateDER: [UInt8]
    /// This device's ID.
    public let deviceID: DeviceID

    /// The kind of key a new identity gets.
    public enum KeyType: String, Sendable, CaseIterable {
        /// What syncthing 2.x makes for a new device (`key.pem` as PKCS#8 `PRIVATE KEY`).
        case ed25519
        /// What syncthing 1.x makes: ECDSA P-384 (`key.pem` as SEC1 `EC PRIVATE KEY`).
        case ecdsa

        /// What current syncthing makes.
        public static let `default` = KeyType.ed25519
    }

    /// Generates a new identity as syncthing would.
    /// - Parameters:
    ///   - keyType: Ed25519 as syncthing 2.x, or ECDSA P-384 as 1.x.
    ///   - now: the clock, passed in so that tests can pin it.
    public static func generate(keyType: KeyType = .default, now: Date = Date()) throws -> Identity {
        let privateKey: Certificate.PrivateKey
        let signatureAlgorithm: Certificate.SignatureAlgorithm
        let keyPEM: String
        switch keyType {
        case .ecdsa:
            let key = P384.Signing.PrivateKey()
            privateKey = Certificate.PrivateKey(key)
            signatureAlgorithm = .ecdsaWithSHA256
            keyPEM = try sec1PEM(for: key)
        case .ed25519:
            let key = Curve25519.Signing.PrivateKey()
            privateKey = Certificate.PrivateKey(key)
            signatureAlgorithm = .ed25519
            keyPEM = try privateKey.serializeAsPEM().pemString + "\n"
        }
        let name = try DistinguishedName {
            OrganizationName("Syncthing")
            OrganizationalUnitName("Automatically Generated")
            CommonName("syncthing")
        }
        // syncthing: NotBefore is today truncated to UTC midnight, NotAfter 20 years (of 365 days) later.
        let midnight = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / 86400).rounded(.down) * 86400)
        let notAfter = midnight.addingTimeInterval(20 * 365 * 86400)
        var serial = [UInt8](repeating: 0, count: 8)
        for i in serial.indices { serial[i] = UInt8.random(in: 0...255) }
        serial[0] &= 0x7F  // a positive INTEGER, as Go's rand.Int(…, 2^63) gives
        if serial[0] == 0 { serial[0] = 1 }
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(bytes: serial[...]),
            publicKey: privateKey.publicKey,
            notValidBefore: midnight,
            notValidAfter: notAfter,
            issuer: name,
            subject: name,
            signatureAlgorithm: signatureAlgorithm,
            extensions: try Certificate.Extensions {
                Critical(KeyUsage(digitalSignature: true, keyEncipherment: true))
                try ExtendedKeyUsage([.serverAuth, .clientAuth])
                Critical(BasicConstraints.notCertificateAuthority)
                SubjectAlternativeNames([.dnsName("syncthing")])
            },
            issuerPrivateKey: privateKey
        )
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        let der = serializer.serializedBytes
        let certPEM = PEMDocument(type: "CERTIFICATE", derBytes: der).pemString + "\n"
        return Identity(
            certificatePEM: certPEM, privateKeyPEM: keyPEM, certificateDER: der,
            deviceID: DeviceID(certificateDER: der))
    }

    /// Loads and checks an identity: both files must parse, and the key must belong to the
    /// certificate.
    /// - Throws: ``ConfigError`` naming the file that is missing, garbled, or does not match.
    public static func load(certificatePath: String, keyPath: String) throws(ConfigError) -> Identity {
        let certPEM = try readText(certificatePath)
        let keyPEM = try readText(keyPath)
        let certDocument: PEMDocument
        let certificate: Certificate
        do {
            certDocument = try firstPEM(in: certPEM, type: "CERTIFICATE", file: certificatePath)
            certificate = try Certificate(derEncoded: certDocument.derBytes)
        } catch let error as ConfigError {
            throw error
        } catch {
            throw ConfigError(.malformedPEM, file: certificatePath, "not a valid PEM certificate: \(error)")
        }
        let privateKey: Certificate.PrivateKey
        do {
            privateKey = try Certificate.PrivateKey(pemEncoded: keyPEM)
        } catch {
            throw ConfigError(
                .malformedPEM, file: keyPath,
                "not a valid PEM private key (SEC1 EC, PKCS#8, RSA or Ed25519 expected): \(error)")
        }
        guard privateKey.publicKey == certificate.publicKey else {
            throw ConfigError(
                .keyMismatch, file: keyPath,
                "this private key does not belong to the certificate in \(certificatePath)")
        }
        // The device ID is the hash of these bytes: one damaged byte that still parses (a
        // serial, a date, the signature) would make this device another one. The certificate
        // signs itself, so damage shows as a signature that does not verify.
        guard certificate.publicKey.isValidSignature(certificate.signature, for: certificate) else {
            throw ConfigError(
                .malformedPEM, file: certificatePath,
                "the certificate is damaged: its self-signature does not verify, and the device ID it gives is not this device's; "
                    + "restore cert.pem from a backup")
        }
        return Identity(
            certificatePEM: certPEM, privateKeyPEM: keyPEM, certificateDER: certDocument.derBytes,
            deviceID: DeviceID(certificateDER: certDocument.derBytes))
    }

    /// The device ID of the first certificate in a PEM file, without needing the key.
    public static func deviceID(certificatePath: String) throws(ConfigError) -> DeviceID {
        let pem = try readText(certificatePath)
        do {
            let doc = try firstPEM(in: pem, type: "CERTIFICATE", file: certificatePath)
            _ = try Certificate(derEncoded: doc.derBytes)
            return DeviceID(certificateDER: doc.derBytes)
        } catch let error as ConfigError {
            throw error
        } catch {
            throw ConfigError(.malformedPEM, file: certificatePath, "not a valid PEM certificate: \(error)")
        }
    }

    /// Writes `cert.pem` (0644) and `key.pem` (0600), refusing to replace either.
    public func write(certificatePath: String, keyPath: String) throws(ConfigError) {
        try ConfigError.writing { () throws(FileWriteError) in try AtomicFile.write(Array(privateKeyPEM.utf8), to: keyPath, mode: 0o600, exclusive: true) }
        do {
            try ConfigError.writing { () throws(FileWriteError) in try AtomicFile.write(Array(certificatePEM.utf8), to: certificatePath, mode: 0o644, exclusive: true) }
        } catch {
            unlink(keyPath)
            throw error
        }
    }

    // MARK: - Helpers

    private static func readText(_ path: String) throws(ConfigError) -> String {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ConfigError(.missingFile, file: path, "missing; run `kaiten init` or copy it from a syncthing home")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigError(.unreadable, file: path, "cannot be read (permissions?)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigError(.malformedPEM, file: path, "not PEM text")
        }
        return text
    }

    /// The first PEM block of the given type; syncthing reads only the first block of cert.pem.
    private static func firstPEM(in text: String, type: String, file: String) throws -> PEMDocument {
        let begin = "-----BEGIN \(type)-----"
        let end = "-----END \(type)-----"
        guard let start = text.range(of: begin), let stop = text.range(of: end, range: start.upperBound..<text.endIndex)
        else {
            throw ConfigError(.malformedPEM, file: file, "no \"\(begin)\" block found")
        }
        return try PEMDocument(pemString: String(text[start.lowerBound..<stop.upperBound]))
    }

    /// The SEC1 `EC PRIVATE KEY` form syncthing writes (Go's x509.MarshalECPrivateKey).
    package static func sec1PEM(for key: P384.Signing.PrivateKey) throws -> String {
        try sec1PEM(raw: key.rawRepresentation, publicKey: key.publicKey.x963Representation, curve: ASN1ObjectIdentifier.NamedCurves.secp384r1)
    }

    /// ECPrivateKey ::= SEQUENCE { version 1, privateKey OCTET STRING, [0] parameters (the
    /// curve's OID), [1] publicKey BIT STRING }.
    package static func sec1PEM(raw: Data, publicKey: Data, curve: ASN1ObjectIdentifier) throws -> String {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { coder in
            try coder.serialize(1)
            try coder.serialize(ASN1OctetString(contentBytes: ArraySlice(raw)))
            try coder.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific, { coder in try coder.serialize(curve) })
            try coder.serialize(
                explicitlyTaggedWithTagNumber: 1, tagClass: .contextSpecific, { coder in try coder.serialize(ASN1BitString(bytes: ArraySlice(publicKey))) })
        }
        return PEMDocument(type: "EC PRIVATE KEY", derBytes: serializer.serializedBytes).pemString + "\n"
    }
}
