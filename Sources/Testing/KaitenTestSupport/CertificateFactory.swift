import Crypto
import Foundation
import SwiftASN1
import X509
import _CryptoExtras
import KaitenConfig

/// Certificates of every key type syncthing accepts, for drop-in identity tests.
public enum CertificateFactory {
    public enum KeyType: String, CaseIterable, Sendable {
        case p256PKCS8, p384SEC1, rsa2048, ed25519
    }

    /// A self-signed certificate with CN=syncthing and its key, both as PEM.
    public static func make(_ type: KeyType, commonName: String = "syncthing") throws -> (cert: String, key: String) {
        let privateKey: Certificate.PrivateKey
        let keyPEM: String
        let algorithm: Certificate.SignatureAlgorithm
        switch type {
        case .p256PKCS8:
            let key = P256.Signing.PrivateKey()
            privateKey = Certificate.PrivateKey(key)
            keyPEM = key.pemRepresentation
            algorithm = .ecdsaWithSHA256
        case .p384SEC1:
            let key = P384.Signing.PrivateKey()
            privateKey = Certificate.PrivateKey(key)
            keyPEM = try Identity.sec1PEM(for: key).trimmingCharacters(in: .newlines)
            algorithm = .ecdsaWithSHA256
        case .rsa2048:
            let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            privateKey = Certificate.PrivateKey(key)
            keyPEM = key.pemRepresentation
            algorithm = .sha256WithRSAEncryption
        case .ed25519:
            let key = Curve25519.Signing.PrivateKey()
            privateKey = Certificate.PrivateKey(key)
            keyPEM = try privateKey.serializeAsPEM().pemString
            algorithm = .ed25519
        }
        let name = try DistinguishedName { CommonName(commonName) }
        let now = Date()
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: privateKey.publicKey,
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(86400 * 365),
            issuer: name, subject: name, signatureAlgorithm: algorithm,
            extensions: try Certificate.Extensions {
                SubjectAlternativeNames([.dnsName(commonName)])
            }, issuerPrivateKey: privateKey)
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        let certPEM = PEMDocument(type: "CERTIFICATE", derBytes: serializer.serializedBytes).pemString
        return (certPEM + "\n", keyPEM + "\n")
    }
}
