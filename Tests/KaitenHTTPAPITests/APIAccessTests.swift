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

    @Test func aConfiguredUserIsAskedForCredentials() {
        var gui = Self.gui
        gui.user = "admin"
        gui.password = "$2a$10$abcdefghijklmnopqrstuv"
        let access = APIAccess(gui: gui, listensOnLoopback: true)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1"]))?.status == 401)
        #expect(access.refusal(for: request("/rest/system/status", headers: ["Host": "127.0.0.1", "X-API-Key": "the-key"])) == nil)
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
