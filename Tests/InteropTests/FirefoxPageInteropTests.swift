import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The web page in Firefox (Debian's ESR), as in Chromium: driven through Firefox's own remote
/// protocol, Marionette (length-prefixed JSON over a loopback socket; Debian has no geckodriver).
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct FirefoxPageInteropTests {
    typealias REST = RESTInteropTests
    static let firefox = ProcessRunner.which("firefox-esr")

    /// A headless Firefox with a profile of its own, its Marionette server on a free port.
    final class Firefox {
        let process: OwnedChild
        let fd: Int32
        var nextID = 0

        init(profile: String, home: String) throws {
            try FileManager.default.createDirectory(atPath: profile, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
            let port = try FreePort.next()
            try """
            user_pref("marionette.port", \(port));
            user_pref("browser.shell.checkDefaultBrowser", false);
            user_pref("datareporting.policy.dataSubmissionEnabled", false);
            user_pref("app.update.enabled", false);
            user_pref("network.captive-portal-service.enabled", false);
            """.write(toFile: profile + "/user.js", atomically: true, encoding: .utf8)
            process = try OwnedChild(
                executable: try #require(FirefoxPageInteropTests.firefox),
                arguments: ["--headless", "--marionette", "--no-remote", "--profile", profile, "about:blank"],
                environment: ["HOME": home, "PATH": "/usr/bin:/bin", "MOZ_CRASHREPORTER_DISABLE": "1"], logPath: nil)
            var connected: Int32 = -1
            let deadline = Date().addingTimeInterval(60)
            while connected < 0 && Date() < deadline {
                connected = LoopbackSocket.connect(port: port)
                if connected < 0 { usleep(200_000) }
            }
            guard connected >= 0 else {
                process.signal(SIGKILL)
                _ = try? process.wait(timeout: 10, what: "firefox")
                throw HarnessError("Firefox's Marionette did not listen on \(port) within 60 s")
            }
            fd = connected
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let hello = try read() as? [String: Any]
            guard hello?["marionetteProtocol"] as? Int == 3 else { throw HarnessError("not Marionette 3: \(String(describing: hello))") }
            _ = try command("WebDriver:NewSession", ["acceptInsecureCerts": true])
        }

        /// One message: its length in decimal, a colon, the JSON.
        func read() throws -> Any {
            var length = 0
            var byte: UInt8 = 0
            while true {
                guard Glibc.read(fd, &byte, 1) == 1 else { throw HarnessError("Marionette closed or timed out") }
                if byte == UInt8(ascii: ":") { break }
                guard byte >= 48, byte <= 57, length < 100_000_000 else { throw HarnessError("not a Marionette length") }
                length = length * 10 + Int(byte - 48)
            }
            var data = [UInt8](repeating: 0, count: length)
            var got = 0
            while got < length {
                let n = data.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + got, length - got) }
                guard n > 0 else { throw HarnessError("Marionette closed or timed out") }
                got += n
            }
            return try JSONSerialization.jsonObject(with: Data(data))
        }

        /// Sends a command and returns its result's `value` (or the whole result); an error
        /// answer is thrown with its message.
        @discardableResult
        func command(_ name: String, _ parameters: [String: Any] = [:]) throws -> Any? {
            nextID += 1
            let body = try JSONSerialization.data(withJSONObject: [0, nextID, name, parameters] as [Any])
            let message = Array("\(body.count):".utf8) + Array(body)
            guard message.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, message.count) }) == message.count else {
                throw HarnessError("cannot write to Marionette")
            }
            guard let answer = try read() as? [Any], answer.count == 4 else { throw HarnessError("not a Marionette answer") }
            if let error = answer[2] as? [String: Any] { throw HarnessError("\(name): \(error["error"] ?? "") \(error["message"] ?? "")") }
            return (answer[3] as? [String: Any])?["value"] ?? answer[3]
        }

        func go(_ url: String) throws { try command("WebDriver:Navigate", ["url": url]) }

        func script(_ source: String) throws -> Any? { try command("WebDriver:ExecuteScript", ["script": source, "args": [Any]()]) }

        /// Waits until `source` (a script's body) returns true.
        func waitFor(_ what: String, timeout: Double = 30, _ source: String) async throws {
            let deadline = Date().addingTimeInterval(timeout)
            while Date() < deadline {
                if try script(source) as? Bool == true { return }
                try await Task.sleep(for: .milliseconds(100))
            }
            throw HarnessError("Firefox: timed out waiting for \(what)")
        }

        func close() {
            _ = try? command("WebDriver:DeleteSession")
            Glibc.close(fd)
            process.signal(SIGTERM)
            _ = try? process.wait(timeout: 10, what: "firefox")
        }
    }

    /// In Firefox: the link becomes a session, the folder's tree shows (a hostile name as text),
    /// ticking a directory shows its plan, applying it pulls exactly that, byte for byte, and a
    /// request without the CSRF token is refused.
    @Test(.enabled(if: firefox != nil, "no firefox-esr (scripts/test installs Debian's)"))
    func thePageWorksInFirefox() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-firefox", runArguments: ["--apply", "none"]) { world, st, base, key in
            let hostile = "<img src=x onerror=document.title='pwned'>.txt"
            try TestFiles.write(world.peerData + "/other/" + hostile, "hostile name\n")
            try await ApplyInteropTests.rescan(st)
            try await RunInteropTests.waitFor("the hostile name in Kaiten's index") {
                try world.kaiten("ls", ApplyInteropTests.folder, "other").stdout.contains(hostile)
            }
            let link = try world.kaiten("ui").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let firefox = try Firefox(profile: world.dir.file("firefox-profile"), home: world.dir.file("firefox-home"))
            defer { firefox.close() }
            try firefox.go(link)
            try await firefox.waitFor("the folder's tree", "return document.querySelector(\"tr[data-path='docs']\") !== null")
            #expect(try firefox.command("WebDriver:GetCurrentURL") as? String == base + "/ui/")
            #expect(try firefox.script("return document.querySelector(\"input[data-select='docs']\").checked") as? Bool == true)

            try firefox.script("document.querySelector(\"input[data-select='other']\").click()")
            try await firefox.waitFor(
                "other/c.txt in the plan", "return document.querySelector(\"#plan li[data-path='other/c.txt'][data-action='pull']\") !== null")
            try firefox.script("document.getElementById('apply').click()")
            try await firefox.waitFor("the apply's outcome", timeout: 60, "return document.getElementById('outcome').textContent === 'Applied.'")
            #expect(ApplyInteropTests.sha(world.local + "/other/c.txt") == ApplyInteropTests.sha(world.peerData + "/other/c.txt"))
            #expect(ApplyInteropTests.sha(world.local + "/other/" + hostile) == ApplyInteropTests.sha(world.peerData + "/other/" + hostile))

            // The hostile name is text; nothing ran.
            try firefox.script("document.querySelector(\"tr[data-path='other'] button.dir\").click()")
            try await firefox.waitFor("the hostile name's row", "return [...document.querySelectorAll('#tree tbody tr')].some((r) => r.dataset.path === 'other/' + \(String(decoding: try JSONSerialization.data(withJSONObject: [hostile]), as: UTF8.self))[0])")
            #expect(try firefox.script("return document.title") as? String == "Kaiten")
            #expect(try firefox.script("return document.querySelectorAll('#tree img').length") as? Int == 0)
            // A state-changing request from the page's origin without the CSRF token is refused.
            let status = try await Self.fetchStatus(firefox, "/rest/kaiten/select?folder=\(ApplyInteropTests.folder)")
            #expect(status == 403, "\(status)")
        }
    }

    /// The status of a POST the page's origin makes with its cookie but no CSRF token.
    static func fetchStatus(_ firefox: Firefox, _ path: String) async throws -> Int {
        try firefox.script("window.__status = null; fetch('\(path)', { method: 'POST', body: '{}' }).then((r) => { window.__status = r.status; })")
        try await firefox.waitFor("the request's answer", "return window.__status !== null")
        return try firefox.script("return window.__status") as? Int ?? -1
    }
}
