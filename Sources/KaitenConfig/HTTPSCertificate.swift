import Crypto
import Foundation
import KaitenFiles
import SwiftASN1
import X509

#if canImport(Glibc)
import Glibc
#endif

/// The GUI listener's certificate: the home's `https-cert.pem` and `https-key.pem`, made on
/// first use as syncthing 2.x makes them (ECDSA P-256, self-signed, the host's name, 820 days),
/// so that a browser shown one and then the other sees the same kind of certificate.
public enum HTTPSCertificate {
    public static func certificatePath(_ home: Home) -> String { home.file("https-cert.pem") }
    public static func keyPath(_ home: Home) -> String { home.file("https-key.pem") }

    /// The PEM texts of the certificate and its key, made and written first when either is missing.
    public static func loadOrCreate(_ home: Home, now: Date = Date()) throws -> (certificatePEM: String, keyPEM: String) {
        let certificatePath = certificatePath(home)
        let keyPath = keyPath(home)
        if let certificate = try? String(contentsOfFile: certificatePath, encoding: .utf8),
            let key = try? String(contentsOfFile: keyPath, encoding: .utf8)
        {
            return (certificate, key)
        }
        let (certificatePEM, keyPEM) = try make(hostName: hostName(), now: now)
        try ConfigError.writing { () throws(FileWriteError) in try AtomicFile.write(Array(keyPEM.utf8), to: keyPath, mode: 0o600) }
        try ConfigError.writing { () throws(FileWriteError) in try AtomicFile.write(Array(certificatePEM.utf8), to: certificatePath, mode: 0o644) }
        return (certificatePEM, keyPEM)
    }

    static func make(hostName: String, now: Date) throws -> (certificatePEM: String, keyPEM: String) {
        let key = P256.Signing.PrivateKey()
        let privateKey = Certificate.PrivateKey(key)
        let name = try DistinguishedName {
            OrganizationName("Syncthing")
            OrganizationalUnitName("Automatically Generated")
            CommonName(hostName)
        }
        let midnight = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / 86400).rounded(.down) * 86400)
        var serial = (0..<8).map { _ in UInt8.random(in: 0...255) }
        serial[0] &= 0x7F
        if serial[0] == 0 { serial[0] = 1 }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(bytes: serial[...]), publicKey: privateKey.publicKey,
            notValidBefore: midnight, notValidAfter: midnight.addingTimeInterval(820 * 86400), issuer: name, subject: name,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(KeyUsage(digitalSignature: true, keyEncipherment: true))
                try ExtendedKeyUsage([.serverAuth, .clientAuth])
                Critical(BasicConstraints.notCertificateAuthority)
                SubjectAlternativeNames([.dnsName(hostName)])
            },
            issuerPrivateKey: privateKey)
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        let certificatePEM = PEMDocument(type: "CERTIFICATE", derBytes: serializer.serializedBytes).pemString + "\n"
        return (
            certificatePEM,
            try Identity.sec1PEM(raw: key.rawRepresentation, publicKey: key.publicKey.x963Representation, curve: ASN1ObjectIdentifier.NamedCurves.secp256r1)
        )
    }

    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "syncthing" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "syncthing" : name
    }
}
