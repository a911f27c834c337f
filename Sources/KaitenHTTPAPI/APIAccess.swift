import Foundation
import KaitenConfig

/// Who may use the REST API, decided as syncthing decides it: the Host header first (a page
/// on another site that resolves its name to 127.0.0.1 is not a local client: DNS rebinding),
/// then `/rest/noauth/` open to all, then the API key in `X-API-Key` or `Authorization: Bearer`.
/// A key in the query string is not a key (it ends up in logs and browser history).
public struct APIAccess: Sendable {
    public let apiKey: String
    /// Basic auth is configured (`<user>` and `<password>`): a request without the key is asked for it.
    public let hasUser: Bool
    /// The listener is on a loopback address and the Host check is not switched off.
    public let checksHost: Bool
    /// `/metrics` is open (`<metricsWithoutAuth>`).
    public let metricsOpen: Bool

    public init(gui: GUIConfiguration, listensOnLoopback: Bool) {
        apiKey = gui.apiKey
        hasUser = !gui.user.isEmpty && !gui.password.isEmpty
        checksHost = listensOnLoopback && !gui.insecureSkipHostcheck
        metricsOpen = gui.metricsWithoutAuth
    }

    /// nil when the request may go on; otherwise the refusal to send, which says nothing of the data.
    public func refusal(for request: APIRequest) -> APIResponse? {
        if checksHost, !Self.isLocalHost(request.header("host") ?? "") {
            return .text("Host check error", status: 403)
        }
        if request.path.hasPrefix("/rest/noauth/") || (metricsOpen && request.path == "/metrics") { return nil }
        if !apiKey.isEmpty {
            if let key = request.header("x-api-key"), Self.equal(key, apiKey) { return nil }
            if let authorization = request.header("authorization"), authorization.hasPrefix("Bearer "),
                Self.equal(String(authorization.dropFirst("Bearer ".count)), apiKey)
            {
                return nil
            }
        }
        if hasUser {
            // Basic auth and the browser's session are not served yet: the API key is the way in.
            return .text("Not Authorized", status: 401)
        }
        return .text("CSRF Error", status: 403)
    }

    /// A Host header naming this machine: `localhost` (or a name under it), a loopback address.
    static func isLocalHost(_ header: String) -> Bool {
        var host = header
        if host.hasPrefix("[") {
            host = String(host.dropFirst().prefix { $0 != "]" })
        } else if let colon = host.lastIndex(of: ":"), host.firstIndex(of: ":") == colon {
            host = String(host[..<colon])
        }
        host = host.lowercased()
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets.allSatisfy { UInt8($0) != nil } && octets[0] == "127"
    }

    /// Compares in time that does not depend on where the strings differ.
    static func equal(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        var difference = UInt8(x.count == y.count ? 0 : 1)
        for i in 0..<min(x.count, y.count) { difference |= x[i] ^ y[i] }
        return difference == 0
    }
}
