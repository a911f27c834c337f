import KaitenConfig
import KaitenProtocol
import NIOCore
import NIOSSL

/// TLS 1.3 settings for BEP, built from this device's identity (bep-brief §3.1).
///
/// Only the leaf certificate is sent; ALPN offers `bep/1.0`. Trust is not a chain question:
/// a peer is who its certificate's SHA-256 says it is, so verification is a callback that
/// derives the device ID and compares it with what we expect (dialling) or allow (listening).
public enum TLSContexts {
    static func client(identity: Identity) throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        try apply(identity: identity, to: &configuration)
        return try NIOSSLContext(configuration: configuration)
    }

    static func server(identity: Identity) throws -> NIOSSLContext {
        let (chain, key) = try material(identity)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: key)
        try apply(identity: identity, to: &configuration)
        return try NIOSSLContext(configuration: configuration)
    }

    private static func apply(identity: Identity, to configuration: inout TLSConfiguration) throws {
        let (chain, key) = try material(identity)
        configuration.minimumTLSVersion = .tlsv13
        configuration.maximumTLSVersion = .tlsv13
        configuration.certificateChain = chain
        configuration.privateKey = key
        configuration.applicationProtocols = ["bep/1.0"]
        // Syncthing 2.x makes Ed25519 device certificates; BoringSSL leaves Ed25519 out of the
        // signature algorithms it offers and accepts unless asked, and a 2.x peer then fails
        // the handshake. Offer and accept it beside the ECDSA and RSA-PSS defaults.
        configuration.verifySignatureAlgorithms = signatureAlgorithms
        configuration.signingSignatureAlgorithms = signatureAlgorithms
        // Makes BoringSSL ask for (server) or check (client) a peer certificate and hand it to
        // our callback, which replaces chain validation entirely.
        configuration.certificateVerification = .noHostnameVerification
    }

    /// What TLS 1.3 allows for a CertificateVerify, Ed25519 included: syncthing uses ECDSA
    /// (1.x and early 2.x), Ed25519 (new 2.x devices) and RSA (very old homes).
    static let signatureAlgorithms: [SignatureAlgorithm] = [
        .ed25519, .ecdsaSecp256R1Sha256, .ecdsaSecp384R1Sha384, .ecdsaSecp521R1Sha512,
        .rsaPssRsaeSha256, .rsaPssRsaeSha384, .rsaPssRsaeSha512,
    ]

    /// This device's certificate and key, as NIOSSL takes them (discovery's HTTPS client
    /// presents them too).
    public static func material(_ identity: Identity) throws -> ([NIOSSLCertificateSource], NIOSSLPrivateKeySource) {
        let certificates = try NIOSSLCertificate.fromPEMBytes(Array(identity.certificatePEM.utf8))
        guard let leaf = certificates.first else { throw NIOSSLError.failedToLoadCertificate }
        let key = try NIOSSLPrivateKey(bytes: Array(identity.privateKeyPEM.utf8), format: .pem)
        return ([.certificate(leaf)], .privateKey(key))
    }

    /// The device ID of the leaf certificate a peer presented.
    public static func deviceID(of certificates: [NIOSSLCertificate]) -> DeviceID? {
        guard let leaf = certificates.first, let der = try? leaf.toDERBytes() else { return nil }
        return DeviceID(certificateDER: der)
    }
}
