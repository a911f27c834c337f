import Foundation
import KaitenConfig

/// Who may use the REST API, decided as syncthing decides it: the Host header first (a page
/// on another site that resolves its name to 127.0.0.1 is not a local client: DNS rebinding),
/// then `/rest/noauth/` open to all, then the API key in `X-API-Key` or `Authorization: Bearer`.
/// A key in the query string is not a key (it ends up in logs and browser history).
///
/// A browser has no key: with a user and password configured it logs in (basic auth, or
/// `POST /rest/noauth/auth/password`) and gets a session cookie; every `/rest/` request it makes
/// also carries the CSRF token the server gave its page (`X-CSRF-Token-<short ID>`), which a
/// page of another site cannot read. Without a user and password only the key, or a session
/// started by `kaiten ui`'s one-time link, opens `/rest/`.
public struct APIAccess: Sendable {
    public let apiKey: String
    public let user: String
    /// The bcrypt hash of the GUI password.
    public let passwordHash: String
    /// Basic auth is configured (`<user>` and `<password>`).
    public var hasUser: Bool { !user.isEmpty && !passwordHash.isEmpty }
    /// The listener is on a loopback address and the Host check is not switched off.
    public let checksHost: Bool
    /// `/metrics` is open (`<metricsWithoutAuth>`).
    public let metricsOpen: Bool
    /// Unauthenticated requests get a basic-auth challenge (401), not 403.
    public let promptsForPassword: Bool
    /// The cookies' and the CSRF header's suffix: this device's short ID, as syncthing 2.x.
    public let suffix: String
    /// Cookies only over HTTPS.
    public let secure: Bool
    public let sessionDuration: Int

    public init(gui: GUIConfiguration, listensOnLoopback: Bool, deviceShortID: String = "KAITEN", secure: Bool = false) {
        apiKey = gui.apiKey
        user = gui.user
        passwordHash = gui.password
        checksHost = listensOnLoopback && !gui.insecureSkipHostcheck
        metricsOpen = gui.metricsWithoutAuth
        promptsForPassword = gui.sendBasicAuthPrompt
        suffix = deviceShortID
        self.secure = secure
        sessionDuration = gui.sessionCookieDurationS
    }

    public enum Decision: Sendable, Equatable {
        /// Answered here: a refusal, or a login or logout.
        case answer(APIResponse)
        /// On to the router; its answer carries these headers (a new session, a CSRF token).
        case allow(adding: [APIResponse.Header])
    }

    var sessionCookie: String { "sessionid-\(suffix)" }
    var csrfCookie: String { "CSRF-Token-\(suffix)" }
    var csrfHeader: String { "X-CSRF-Token-\(suffix)" }

    public func decide(_ request: APIRequest, sessions: APISessions, now: Date = Date()) -> Decision {
        if checksHost, !Self.isLocalHost(request.header("host") ?? "") {
            return .answer(.text("Host check error", status: 403))
        }
        switch (request.method, request.path) {
        case ("POST", "/rest/noauth/auth/password"): return .answer(login(request, sessions: sessions, now: now))
        case ("POST", "/rest/noauth/auth/logout"):
            if let token = cookie(sessionCookie, in: request) { sessions.endSession(token) }
            return .answer(APIResponse(status: 204, contentType: "text/plain; charset=utf-8", body: [], headers: [cookieHeader(sessionCookie, "", maxAge: 0)]))
        default: break
        }
        if request.path == "/ui/login" { return .answer(uiLogin(request, sessions: sessions, now: now)) }
        if request.path.hasPrefix("/rest/noauth/") || (metricsOpen && request.path == "/metrics") { return .allow(adding: []) }
        if hasKey(request) { return .allow(adding: []) }
        var adding: [APIResponse.Header] = []
        var authenticated = cookie(sessionCookie, in: request).map { sessions.isSession($0, at: now) } ?? false
        if !authenticated, hasUser, let (name, password) = basicCredentials(request), Self.equal(name, user),
            PasswordHash.matches(password, hash: passwordHash)
        {
            adding.append(startSession(sessions, stayLoggedIn: false, now: now))
            authenticated = true
        }
        let protected = request.path.hasPrefix("/rest/") || request.path == "/metrics" || request.path.hasPrefix("/ondemand/")
        guard authenticated else {
            if hasUser { return .answer(notAuthenticated) }
            // Without a user and password (and no session from `kaiten ui`'s link), a page load's
            // CSRF token opens nothing (syncthing lets it in: any local process could then drive
            // the device): the key is the only way in. The page itself holds no data.
            return protected ? .answer(.text("CSRF Error", status: 403)) : .allow(adding: [])
        }
        if request.path.hasPrefix("/rest/") {
            guard let token = request.header(csrfHeader), sessions.isCSRFToken(token) else { return .answer(.text("CSRF Error", status: 403)) }
        } else if request.method == "GET", request.path != "/metrics", !(cookie(csrfCookie, in: request).map(sessions.isCSRFToken) ?? false) {
            // A page load: the token its scripts send back with each request.
            adding.append(cookieHeader(csrfCookie, sessions.issueCSRFToken(), httpOnly: false))
        }
        return .allow(adding: adding)
    }

    /// `kaiten ui`'s one-time link: its token becomes a session cookie (and the page's CSRF
    /// token), and the browser is sent on to the page with the token out of its address bar.
    func uiLogin(_ request: APIRequest, sessions: APISessions, now: Date) -> APIResponse {
        guard request.method == "GET", let token = request.query["token"], sessions.redeemLoginToken(token, now: now) else {
            return .text("This link was used already or is too old: run `kaiten ui` again for a new one.", status: 403)
        }
        return APIResponse(
            status: 303, contentType: "text/plain; charset=utf-8", body: [],
            headers: [
                .init("Location", "/ui/"), startSession(sessions, stayLoggedIn: false, now: now),
                cookieHeader(csrfCookie, sessions.issueCSRFToken(), httpOnly: false),
            ])
    }

    /// syncthing 2.x's login form: `{"username", "password", "stayLoggedIn"}` → 204 and a
    /// session cookie, or 403.
    func login(_ request: APIRequest, sessions: APISessions, now: Date) -> APIResponse {
        guard let object = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any],
            let name = object["username"] as? String, let password = object["password"] as? String
        else { return .text("Failed to parse username and password.", status: 400) }
        guard hasUser, Self.equal(name, user), PasswordHash.matches(password, hash: passwordHash) else { return .text("Forbidden", status: 403) }
        let stay = object["stayLoggedIn"] as? Bool ?? false
        return APIResponse(status: 204, contentType: "text/plain; charset=utf-8", body: [], headers: [startSession(sessions, stayLoggedIn: stay, now: now)])
    }

    /// No credentials, or wrong ones: nothing said of why.
    var notAuthenticated: APIResponse {
        promptsForPassword
            ? APIResponse.text("Not Authorized", status: 401).adding([.init("WWW-Authenticate", "Basic realm=\"Authorization Required (\(suffix))\"")])
            : .text("Forbidden", status: 403)
    }

    private func startSession(_ sessions: APISessions, stayLoggedIn: Bool, now: Date) -> APIResponse.Header {
        // A session without "stay logged in" ends with the browser; the server forgets it after a day.
        let token = sessions.startSession(until: now.addingTimeInterval(stayLoggedIn ? Double(sessionDuration) : 86_400))
        return cookieHeader(sessionCookie, token, maxAge: stayLoggedIn ? sessionDuration : nil)
    }

    func cookieHeader(_ name: String, _ value: String, maxAge: Int? = nil, httpOnly: Bool = true) -> APIResponse.Header {
        var text = "\(name)=\(value); Path=/; SameSite=Strict"
        if httpOnly { text += "; HttpOnly" }
        if secure { text += "; Secure" }
        if let maxAge { text += "; Max-Age=\(maxAge)" }
        return .init("Set-Cookie", text)
    }

    func hasKey(_ request: APIRequest) -> Bool {
        guard !apiKey.isEmpty else { return false }
        if let key = request.header("x-api-key"), Self.equal(key, apiKey) { return true }
        if let authorization = request.header("authorization"), authorization.hasPrefix("Bearer "),
            Self.equal(String(authorization.dropFirst("Bearer ".count)), apiKey)
        {
            return true
        }
        return false
    }

    func cookie(_ name: String, in request: APIRequest) -> String? {
        for part in (request.header("cookie") ?? "").split(separator: ";") {
            let pair = part.trimmingCharacters(in: .whitespaces)
            if pair.hasPrefix(name + "=") { return String(pair.dropFirst(name.count + 1)) }
        }
        return nil
    }

    func basicCredentials(_ request: APIRequest) -> (String, String)? {
        guard let authorization = request.header("authorization"), authorization.hasPrefix("Basic "),
            let data = Data(base64Encoded: String(authorization.dropFirst("Basic ".count)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: data, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
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
