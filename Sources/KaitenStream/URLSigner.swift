import KaitenErrors
import Crypto
import Foundation
import KaitenFiles
import KaitenProtocol
import KaitenConfig

#if canImport(Glibc)
import Glibc
#endif

/// Signed, expiring URLs: `sig` = HMAC-SHA256 over folder, path and expiry with a 32-byte key
/// kept in the home (`state/url.key`, mode 0600, made on first use).
public struct URLSigner: Sendable {
    let key: SymmetricKey

    public init(key: [UInt8]) {
        self.key = SymmetricKey(data: key)
    }

    static func keyPath(_ home: Home) -> String { (home.stateDirectory as NSString).appendingPathComponent("url.key") }

    /// The home's key, made (and kept) on first use.
    public static func load(home: Home) throws -> URLSigner {
        let path = keyPath(home)
        if let data = FileManager.default.contents(atPath: path) {
            guard data.count == 32 else { throw StreamError(.badRequest, "\(path): not a 32-byte key; remove it to make a new one") }
            return URLSigner(key: [UInt8](data))
        }
        try FileManager.default.createDirectory(atPath: home.stateDirectory, withIntermediateDirectories: true)
        var bytes = [UInt8](repeating: 0, count: 32)
        var generator = SystemRandomNumberGenerator()
        for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255, using: &generator) }
        try AtomicFile.write(bytes, to: path, mode: 0o600, exclusive: true)
        // Someone else may have won the race to create it: use whatever is there now.
        return URLSigner(key: [UInt8](FileManager.default.contents(atPath: path) ?? Data(bytes)))
    }

    static func message(folder: String, path: String, expires: Int64) -> [UInt8] {
        Array("\(folder)\n\(path)\n\(expires)".utf8)
    }

    public func signature(folder: String, path: String, expires: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Self.message(folder: folder, path: path, expires: expires), using: key)
        return Hex.encode(Data(mac))
    }

    /// Checks a signature in constant time.
    public func verify(folder: String, path: String, expires: Int64, signature: String) -> Bool {
        guard let bytes = Self.hexBytes(signature) else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(bytes, authenticating: Self.message(folder: folder, path: path, expires: expires), using: key)
    }

    /// A thumbnail's message: its own domain (a NUL, which no folder ID holds), so that a
    /// `/thumb` link never opens the file itself.
    static func thumbnailMessage(folder: String, path: String, size: Int, expires: Int64) -> [UInt8] {
        Array("\u{0}thumb\n\(folder)\n\(path)\n\(size)\n\(expires)".utf8)
    }

    public func thumbnailSignature(folder: String, path: String, size: Int, expires: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Self.thumbnailMessage(folder: folder, path: path, size: size, expires: expires), using: key)
        return Hex.encode(Data(mac))
    }

    public func verifyThumbnail(folder: String, path: String, size: Int, expires: Int64, signature: String) -> Bool {
        guard let bytes = Self.hexBytes(signature) else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(
            bytes, authenticating: Self.thumbnailMessage(folder: folder, path: path, size: size, expires: expires), using: key)
    }

    /// `BASE/thumb?folder=F&path=P&size=N&exp=T&sig=S`.
    public func thumbnailURL(base: String, folder: String, path: String, size: Int, expires: Int64) -> String {
        let sig = thumbnailSignature(folder: folder, path: path, size: size, expires: expires)
        return "\(base)/thumb?folder=\(Self.escape(folder))&path=\(Self.escape(path))&size=\(size)&exp=\(expires)&sig=\(sig)"
    }

    /// A site's message (`kaiten ui --site`): its own domain, the folder, the directory whose
    /// subtree it opens, the expiry.
    static func siteMessage(folder: String, root: String, expires: Int64) -> [UInt8] {
        Array("\u{0}site\n\(folder)\n\(root)\n\(expires)".utf8)
    }

    public func siteSignature(folder: String, root: String, expires: Int64) -> String {
        Hex.encode(Data(HMAC<SHA256>.authenticationCode(for: Self.siteMessage(folder: folder, root: root, expires: expires), using: key)))
    }

    public func verifySite(folder: String, root: String, expires: Int64, signature: String) -> Bool {
        guard let bytes = Self.hexBytes(signature) else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(bytes, authenticating: Self.siteMessage(folder: folder, root: root, expires: expires), using: key)
    }

    /// `BASE/site/EXP.DEPTH.SIG/FOLDER/ROOT/`: the signature in the path, not the query, so
    /// that the site's relative links (`style.css`, `img/a.png`) stay inside it. DEPTH is how
    /// many path segments ROOT has.
    public func siteURL(base: String, folder: String, root: String, expires: Int64) -> String {
        let sig = siteSignature(folder: folder, root: root, expires: expires)
        let depth = root.isEmpty ? 0 : root.split(separator: "/").count
        var folderSegment = CharacterSet.alphanumerics
        folderSegment.insert(charactersIn: "-._~")
        let folderPart = folder.addingPercentEncoding(withAllowedCharacters: folderSegment) ?? folder
        return "\(base)/site/\(expires).\(depth).\(sig)/\(folderPart)/" + (root.isEmpty ? "" : Self.escape(root) + "/")
    }

    /// A signature's 32 bytes; nil for anything else.
    static func hexBytes(_ signature: String) -> [UInt8]? {
        guard let bytes = Hex.decode(signature), bytes.count == 32 else { return nil }
        return bytes
    }

    /// A signer with a fresh random key, for a server only this process uses (the range reads
    /// of `kaiten thumb`'s decoder): its links die with it.
    public static func ephemeral() -> URLSigner {
        var generator = SystemRandomNumberGenerator()
        return URLSigner(key: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// `BASE/file?folder=F&path=P&exp=T&sig=S`.
    public func url(base: String, folder: String, path: String, expires: Int64) -> String {
        let sig = signature(folder: folder, path: path, expires: expires)
        return "\(base)/file?folder=\(Self.escape(folder))&path=\(Self.escape(path))&exp=\(expires)&sig=\(sig)"
    }

    static func escape(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~/")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}

/// Where a running `kaiten serve` listens, recorded in `state/serve.json` for `kaiten url`.
public struct ServerRecord: Codable, Sendable {
    public var baseURL: String
    public var pid: Int32
    /// Where the server listens for peers (BEP), as `tcp://host:port`.
    public var peerAddresses: [String]?

    enum CodingKeys: String, CodingKey {
        case baseURL = "base_url", pid, peerAddresses = "peer_addresses"
    }

    static func path(_ home: Home) -> String { (home.stateDirectory as NSString).appendingPathComponent("serve.json") }

    public static func load(_ home: Home) -> ServerRecord? {
        guard let data = FileManager.default.contents(atPath: path(home)) else { return nil }
        return try? JSONDecoder().decode(ServerRecord.self, from: data)
    }

    func save(_ home: Home) throws {
        try FileManager.default.createDirectory(atPath: home.stateDirectory, withIntermediateDirectories: true)
        try AtomicFile.write([UInt8](try JSONEncoder().encode(self)), to: Self.path(home))
    }

    static func remove(_ home: Home) { unlink(path(home)) }
}

/// Why a file could not be served or fetched.
public struct StreamError: KaitenError {
    public enum Code: Sendable {
        case badRequest, forbidden, notFound, unavailable, peerFailed
        /// Peers hold it, none of them connected (a verb that has not dialled yet may, and ask again).
        case noHolderConnected
    }

    public let code: Code
    public let hint: String

    public init(_ code: Code, _ hint: String) {
        self.code = code
        self.hint = hint
    }

    public var location: String? { nil }
    public var message: String { hint }

    var status: Int {
        switch code {
        case .badRequest: return 400
        case .forbidden: return 403
        case .notFound: return 404
        case .unavailable, .noHolderConnected: return 503
        case .peerFailed: return 502
        }
    }
}
