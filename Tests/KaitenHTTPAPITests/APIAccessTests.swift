import Foundation
import KaitenConfig
import Testing

@testable import KaitenHTTPAPI

/// Who the REST API answers, decided without a socket. Each refusal here is one check of
/// ``APIAccess``: a test fails when its check is removed.
struct APIAccessTests {
    static let gui = GUIConfiguration(isEnabled: true, address: "127.0.0.1:8384", apiKey: "the-key")

    func request(_ path: String, headers: [String: String]) -> APIRequest {
        APIRequest(method: "GET", uri: path, headers: headers)
    }

    @Test func theKeyInItsHeaderOrAsABearerTokenLetsARequestIn() {
        let access = APIAccess(gui: Self.gui, listensOnLoopback: true)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1:8384", "X-API-Key": "the-key"])) == nil)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["host": "localhost:8384", "Authorization": "Bearer the-key"])) == nil)
    }

    @Test func noKeyAWrongKeyOrAKeyInTheQueryIsRefusedWithoutData() {
        let access = APIAccess(gui: Self.gui, listensOnLoopback: true)
        let csrf = APIResponse.text("CSRF Error", status: 403)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1"])) == csrf)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "X-API-Key": "the-kez"])) == csrf)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "X-API-Key": "the-key-longer"])) == csrf)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "Authorization": "Bearer wrong"])) == csrf)
        #expect(access.refusal(for: request("/rest/system/status?apikey=the-key&api_key=the-key", headers: ["Host": "127.0.0.1"])) == csrf)
    }

    @Test func anEmptyKeyInTheConfigurationIsNoKey() {
        var gui = Self.gui
        gui.apiKey = ""
        let access = APIAccess(gui: gui, listensOnLoopback: true)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "X-API-Key": ""])) != nil)
    }

    @Test func aForeignHostNameIsRefusedOnALoopbackListenerEvenWithTheKey() {
        let access = APIAccess(gui: Self.gui, listensOnLoopback: true)
        let hostError = APIResponse.text("Host check error", status: 403)
        for host in ["evil.example:8384", "127.0.0.1.evil.example", "10.0.0.1:8384", "", "localhost.evil.example"] {
            #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": host, "X-API-Key": "the-key"])) == hostError, "\(host)")
        }
        for host in ["127.0.0.1", "127.0.0.1:8384", "[::1]:8384", "localhost", "LOCALHOST:1", "kaiten.localhost:8384", "127.1.2.3"] {
            #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": host, "X-API-Key": "the-key"])) == nil, "\(host)")
        }
        // Not on loopback, or switched off: the host is not checked.
        #expect(APIAccess(gui: Self.gui, listensOnLoopback: false).refusal(for: request("/rest/x", headers: ["Host": "nas.lan", "X-API-Key": "the-key"])) == nil)
        var skipping = Self.gui
        skipping.insecureSkipHostcheck = true
        #expect(APIAccess(gui: skipping, listensOnLoopback: true).refusal(for: request("/rest/x", headers: ["Host": "proxy", "X-API-Key": "the-key"])) == nil)
    }

    @Test func theHealthCheckIsOpenAndNothingElseIs() {
        let access = APIAccess(gui: Self.gui, listensOnLoopback: true)
        #expect(access.refusal(for: request("/rest/noauth/health", headers: ["Host": "127.0.0.1"])) == nil)
        #expect(access.refusal(for: request("/rest/noauthx", headers: ["Host": "127.0.0.1"])) != nil)
    }

    static let hash = try! PasswordHash.make("secret")

    static var withUser: GUIConfiguration {
        var gui = Self.gui
        gui.user = "admin"
        gui.password = hash
        return gui
    }

    static func basic(_ user: String, _ password: String) -> String { "Basic " + Data("\(user):\(password)".utf8).base64EncodedString() }

    func cookies(_ decision: APIAccess.Decision) -> [String: String] {
        let headers: [APIResponse.Header]
        switch decision {
        case .answer(let response): headers = response.headers
        case .allow(let adding): headers = adding
        }
        var found: [String: String] = [:]
        for header in headers where header.name == "Set-Cookie" {
            let pair = header.value.prefix { $0 != ";" }
            if let equals = pair.firstIndex(of: "=") { found[String(pair[..<equals])] = String(pair[pair.index(after: equals)...]) }
        }
        return found
    }

    @Test func aConfiguredUserIsAskedForCredentials() {
        let access = APIAccess(gui: Self.withUser, listensOnLoopback: true, deviceShortID: "ABCDEFG")
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1"])) == .text("Forbidden", status: 403))
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "X-API-Key": "the-key"])) == nil)
        // Wrong credentials say nothing more than none.
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "Authorization": Self.basic("admin", "wrong")])) == .text("Forbidden", status: 403))
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "Authorization": Self.basic("root", "secret")])) == .text("Forbidden", status: 403))
        // syncthing 1.x (and 2.x with sendBasicAuthPrompt): the browser is asked.
        var prompting = Self.withUser
        prompting.sendBasicAuthPrompt = true
        let challenge = APIAccess(gui: prompting, listensOnLoopback: true, deviceShortID: "ABCDEFG").refusal(for: request("/", headers: ["Host": "127.0.0.1"]))
        #expect(challenge?.status == 401 && challenge?.headers.contains { $0.name == "WWW-Authenticate" && $0.value.hasPrefix("Basic ") } == true)
    }

    @Test func aBrowserLogsInAndEveryRestRequestCarriesItsPagesCSRFToken() {
        let access = APIAccess(gui: Self.withUser, listensOnLoopback: true, deviceShortID: "ABCDEFG")
        let sessions = APISessions()
        // The page load with the password: a session and a CSRF token.
        let page = access.decide(request("/", headers: ["Host": "127.0.0.1", "Authorization": Self.basic("admin", "secret")]), sessions: sessions)
        let issued = cookies(page)
        let session = try! #require(issued["sessionid-ABCDEFG"])
        let token = try! #require(issued["CSRF-Token-ABCDEFG"])
        guard case .allow = page else { Issue.record("the page load was refused"); return }
        // The password alone does not make a REST call: a page of another site could send it.
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "Authorization": Self.basic("admin", "secret")]), sessions: sessions) == .text("CSRF Error", status: 403))
        // The session and the token do; either alone does not.
        let cookie = "sessionid-ABCDEFG=\(session)"
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "Cookie": cookie, "X-CSRF-Token-ABCDEFG": token]), sessions: sessions) == nil)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "Cookie": cookie]), sessions: sessions) == .text("CSRF Error", status: 403))
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "X-CSRF-Token-ABCDEFG": token]), sessions: sessions) == .text("Forbidden", status: 403))
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "Cookie": cookie, "X-CSRF-Token-ABCDEFG": "made-up"]), sessions: sessions) == .text("CSRF Error", status: 403))
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "Cookie": "sessionid-ABCDEFG=made-up", "X-CSRF-Token-ABCDEFG": token]), sessions: sessions) == .text("Forbidden", status: 403))
    }

    @Test func theLoginFormStartsASessionAndLogoutEndsIt() {
        let access = APIAccess(gui: Self.withUser, listensOnLoopback: true, deviceShortID: "ABCDEFG", secure: true)
        let sessions = APISessions()
        func login(_ body: String) -> APIAccess.Decision {
            access.decide(APIRequest(method: "POST", uri: "/rest/noauth/auth/password", headers: ["Host": "127.0.0.1"], body: Array(body.utf8)), sessions: sessions)
        }
        guard case .answer(let wrong) = login(#"{"username":"admin","password":"nope","stayLoggedIn":false}"#) else { Issue.record("no answer"); return }
        #expect(wrong == .text("Forbidden", status: 403))
        guard case .answer(let garbled) = login("{") else { Issue.record("no answer"); return }
        #expect(garbled.status == 400)
        guard case .answer(let ok) = login(#"{"username":"admin","password":"secret","stayLoggedIn":true}"#) else { Issue.record("no answer"); return }
        #expect(ok.status == 204)
        let header = try! #require(ok.headers.first { $0.name == "Set-Cookie" }?.value)
        // Over HTTPS, not for scripts, not sent by other sites, kept for the configured time.
        #expect(header.contains("; Secure") && header.contains("; HttpOnly") && header.contains("SameSite=Strict") && header.contains("Max-Age=604800"), "\(header)")
        let session = try! #require(cookies(.answer(ok))["sessionid-ABCDEFG"])
        let token = sessions.issueCSRFToken()
        let call = request("/rest/system/status", headers: ["Host": "127.0.0.1", "Cookie": "sessionid-ABCDEFG=\(session)", "X-CSRF-Token-ABCDEFG": token])
        #expect(access.refusal(for: call, sessions: sessions) == nil)
        _ = access.decide(APIRequest(method: "POST", uri: "/rest/noauth/auth/logout", headers: ["Host": "127.0.0.1", "Cookie": "sessionid-ABCDEFG=\(session)"]), sessions: sessions)
        #expect(access.refusal(for: call, sessions: sessions) == .text("Forbidden", status: 403))
    }

    @Test func kaitenUIsLinkWorksOnceAndBecomesASession() {
        let access = APIAccess(gui: Self.gui, listensOnLoopback: true, deviceShortID: "ABCDEFG")
        let sessions = APISessions()
        let token = sessions.issueLoginToken()
        let link = request("/ui/login?token=\(token)", headers: ["Host": "127.0.0.1"])
        guard case .answer(let first) = access.decide(link, sessions: sessions) else { Issue.record("no answer"); return }
        // On to the page, the token out of the address bar, a session and the page's CSRF token.
        #expect(first.status == 303 && first.headers.contains(.init("Location", "/ui/")))
        let issued = cookies(.answer(first))
        let session = try! #require(issued["sessionid-ABCDEFG"])
        let csrf = try! #require(issued["CSRF-Token-ABCDEFG"])
        #expect(access.refusal(for: link, sessions: sessions)?.status == 403, "used once")
        let call = request("/rest/system/status", headers: ["Host": "127.0.0.1", "Cookie": "sessionid-ABCDEFG=\(session)", "X-CSRF-Token-ABCDEFG": csrf])
        #expect(access.refusal(for: call, sessions: sessions) == nil)
        #expect(
            access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "Cookie": "sessionid-ABCDEFG=\(session)"]), sessions: sessions)
                == .text("CSRF Error", status: 403))
        // A link not opened in time is refused.
        let late = sessions.issueLoginToken(now: Date().addingTimeInterval(-APISessions.loginTokenLifetime - 1))
        #expect(access.refusal(for: request("/ui/login?token=\(late)", headers: ["Host": "127.0.0.1"]), sessions: sessions)?.status == 403)
        #expect(access.refusal(for: request("/ui/login?token=made-up", headers: ["Host": "127.0.0.1"]), sessions: sessions)?.status == 403)
    }

    @Test func withoutAUserAPageLoadsTokenOpensNothing() {
        let access = APIAccess(gui: Self.gui, listensOnLoopback: true, deviceShortID: "ABCDEFG")
        let sessions = APISessions()
        let token = sessions.issueCSRFToken()
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "X-CSRF-Token-ABCDEFG": token]), sessions: sessions) == .text("CSRF Error", status: 403))
    }

    @Test func metricsAreOpenOnlyWhenTheConfigurationSaysSo() {
        #expect(APIAccess(gui: Self.gui, listensOnLoopback: true).refusal(for: request("/metrics", headers: ["Host": "127.0.0.1"]))?.status == 403)
        var open = Self.gui
        open.metricsWithoutAuth = true
        let access = APIAccess(gui: open, listensOnLoopback: true)
        #expect(access.refusal(for: request("/metrics", headers: ["Host": "127.0.0.1"])) == nil)
        // Only /metrics, and the Host check still holds.
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1"]))?.status == 403)
        #expect(access.refusal(for: request("/metrics", headers: ["Host": "evil.example"])) == .text("Host check error", status: 403))
    }
}

extension APIAccess {
    /// The refusal `request` gets, nil when it goes on to the router.
    func refusal(for request: APIRequest, sessions: APISessions = APISessions()) -> APIResponse? {
        if case .answer(let response) = decide(request, sessions: sessions) { return response }
        return nil
    }
}
