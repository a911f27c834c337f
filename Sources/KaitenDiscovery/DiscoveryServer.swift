import Foundation
import KaitenProtocol

/// A global discovery server from `<globalAnnounceServer>`, with its options read as syncthing
/// reads them (`lib/discover/global.go`): `id=` pins the server's certificate to a device ID
/// (and then no certificate authority is asked), `insecure` skips verification, `noannounce`
/// and `nolookup` limit what the server is used for.
public struct DiscoveryServer: Sendable, Equatable, CustomStringConvertible {
    /// The URL requests go to: the configured one without its query.
    public var url: String
    public var host: String
    public var port: Int
    /// The request path (`/v2/`).
    public var path: String
    public var pinnedID: DeviceID?
    public var insecure: Bool
    public var announces: Bool
    public var looksUp: Bool
    /// Plain HTTP (a relay pool named `dynamic+http://`, as syncthing allows); never for a
    /// discovery server.
    var plainHTTP = false

    public var description: String { url }

    /// What `default`, `default-v4` and `default-v6` stand for: syncthing 2.x's servers, which
    /// present certificates from a public authority (1.19.2 pinned older names by `id=`; both
    /// sets are run by the syncthing project).
    public static let defaultV4 = [
        "https://discovery-lookup.syncthing.net/v2/?noannounce", "https://discovery-announce-v4.syncthing.net/v2/?nolookup",
    ]
    public static let defaultV6 = [
        "https://discovery-lookup.syncthing.net/v2/?noannounce", "https://discovery-announce-v6.syncthing.net/v2/?nolookup",
    ]

    /// The servers a config's `<globalAnnounceServer>` list names, `default` expanded and
    /// duplicates dropped; each entry that is not a usable server is given back as a problem.
    public static func servers(from entries: [String]) -> (servers: [DiscoveryServer], problems: [String]) {
        var expanded: [String] = []
        for entry in entries.map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            switch entry {
            case "default": expanded += defaultV4 + defaultV6
            case "default-v4": expanded += defaultV4
            case "default-v6": expanded += defaultV6
            default: expanded.append(entry)
            }
        }
        var seen: Set<String> = []
        var servers: [DiscoveryServer] = []
        var problems: [String] = []
        for text in expanded where seen.insert(text).inserted {
            do {
                servers.append(try DiscoveryServer(text))
            } catch {
                problems.append("\(text): \(error.reason)")
            }
        }
        return (servers, problems)
    }

    public struct Invalid: Error, Sendable {
        public var reason: String
    }

    public init(_ text: String) throws(Invalid) {
        guard let address = AddressText(text) else {
            // No port given: the scheme's.
            guard let withPort = Self.addingDefaultPort(text), let parsed = AddressText(withPort) else {
                throw Invalid(reason: "not a URL (want https://HOST[:PORT]/v2/?id=DEVICE-ID)")
            }
            try self.init(parsed)
            return
        }
        try self.init(address)
    }

    private init(_ address: AddressText) throws(Invalid) {
        var path = address.rest
        var query = ""
        if let mark = path.firstIndex(of: "?") {
            query = String(path[path.index(after: mark)...])
            path = String(path[..<mark])
        }
        if path.isEmpty { path = "/" }
        var options: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            options[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
        }
        func flag(_ name: String) -> Bool { options[name].map { $0 != "false" } ?? false }
        if let id = options["id"] {
            guard let device = try? DeviceID(id) else { throw Invalid(reason: "id=\(id) is not a device ID") }
            pinnedID = device
        }
        insecure = flag("insecure") || pinnedID != nil
        announces = !flag("noannounce")
        looksUp = !flag("nolookup")
        switch address.scheme {
        case "https": break
        case "http":
            // As syncthing: plain HTTP only for a lookup-only server the user called insecure.
            guard insecure && !announces else { throw Invalid(reason: "http:// is allowed only with ?insecure&noannounce") }
            throw Invalid(reason: "http:// discovery servers are not supported; use https://")
        default: throw Invalid(reason: "the scheme must be https")
        }
        guard !address.host.isEmpty, address.port > 0 else { throw Invalid(reason: "no host or port") }
        host = address.host
        port = address.port
        self.path = path
        url = "https://\(host.contains(":") ? "[\(host)]" : host):\(port)\(path)"
    }

    private static func addingDefaultPort(_ text: String) -> String? {
        guard text.hasPrefix("https://") else { return nil }
        let rest = text.dropFirst("https://".count)
        let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let host = rest[..<end]
        guard !host.isEmpty else { return nil }
        return "https://\(host):443\(rest[end...])"
    }

    /// A relay pool's endpoint (`dynamic+https://relays.syncthing.net/endpoint`, or
    /// `dynamic+http://…`): fetched like a lookup, its certificate checked by a certificate
    /// authority and host name as syncthing's HTTP client checks it.
    init?(poolURL text: String) {
        guard text.hasPrefix("dynamic+http") else { return nil }
        let plain = text.hasPrefix("dynamic+http://")
        let url = String(text.dropFirst("dynamic+".count))
        let withPort: String
        if AddressText(url) != nil {
            withPort = url
        } else {
            let scheme = plain ? "http://" : "https://"
            let rest = url.dropFirst(scheme.count)
            let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
            withPort = "\(scheme)\(rest[..<end]):\(plain ? 80 : 443)\(rest[end...])"
        }
        guard let address = AddressText(withPort), !address.host.isEmpty, address.port > 0 else { return nil }
        host = address.host
        port = address.port
        path = address.rest.isEmpty ? "/" : address.rest
        pinnedID = nil
        insecure = false
        announces = false
        looksUp = true
        plainHTTP = plain
        self.url = url
    }
}
