import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenSync
import KaitenTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A browser on `kaiten ui`'s page: Debian's Chromium, headless, driven by chromedriver's
/// WebDriver protocol, against `kaiten run` with the real syncthing as its peer.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct WebPageInteropTests {
    typealias REST = RESTInteropTests

    static let chromium = ProcessRunner.which("chromium")
    static let chromedriver = ProcessRunner.which("chromedriver")

    /// A WebDriver session with headless Chromium.
    final class Browser {
        let driver: OwnedChild
        let base: String
        let session: String
        static let elementKey = "element-6066-11e4-a52e-4f735466cecf"

        init(profile: String, log: String, arguments extra: [String] = []) throws {
            let port = try FreePort.next()
            driver = try OwnedChild(
                executable: try #require(WebPageInteropTests.chromedriver),
                arguments: ["--port=\(port)", "--allowed-ips=127.0.0.1"], logPath: log)
            base = "http://127.0.0.1:\(port)"
            var status: Int = 0
            for _ in 0..<100 where status != 200 {
                status = (try? REST.curl(base + "/status").status) ?? 0
                if status != 200 { usleep(100_000) }
            }
            let capabilities: [String: Any] = [
                "capabilities": [
                    "alwaysMatch": [
                        "goog:chromeOptions": [
                            "binary": try #require(WebPageInteropTests.chromium),
                            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir=\(profile)",
                                "--window-size=1200,900", "--no-first-run", "--disable-background-networking"] + extra,
                        ]
                    ]
                ]
            ]
            let created = try Self.call(base + "/session", "POST", capabilities)
            session = try #require((created["value"] as? [String: Any])?["sessionId"] as? String, "\(created)")
        }

        static func call(_ url: String, _ method: String, _ body: Any? = nil) throws -> [String: Any] {
            let file = NSTemporaryDirectory() + "/kaiten-webdriver-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            if let body { try JSONSerialization.data(withJSONObject: body).write(to: URL(fileURLWithPath: file)) }
            defer { unlink(file) }
            let answer = try REST.curl(url, method: method, headers: ["Content-Type: application/json"], bodyFile: body == nil ? nil : file)
            return try #require(try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any], "\(answer.body)")
        }

        /// A WebDriver command's value; an error it answers (a stale element, none found) is thrown.
        func call(_ path: String, _ method: String = "GET", _ body: Any? = nil) throws -> Any? {
            let value = try Self.call(base + "/session/\(session)" + path, method, body ?? (method == "POST" ? [String: Any]() : nil))["value"]
            if let failure = value as? [String: Any], let error = failure["error"] as? String {
                throw WebDriverError(description: "\(method) \(path): \(error): \(failure["message"] ?? "")")
            }
            return value
        }

        struct WebDriverError: Error, CustomStringConvertible {
            let description: String
        }

        func go(_ url: String) throws { _ = try call("/url", "POST", ["url": url]) }

        /// The elements `css` finds now.
        func find(_ css: String) throws -> [String] {
            let found = try call("/elements", "POST", ["using": "css selector", "value": css]) as? [[String: Any]] ?? []
            return found.compactMap { $0[Self.elementKey] as? String }
        }

        func waitFor(_ css: String, _ what: String) async throws -> String {
            var found: String?
            try await RunInteropTests.waitFor(what, timeout: 30) {
                found = try find(css).first
                return found != nil
            }
            return found!
        }

        func click(_ element: String) throws { _ = try call("/element/\(element)/click", "POST") }

        /// Types `text` into an input, as a person would.
        func type(_ text: String, into element: String) throws {
            _ = try call("/element/\(element)/clear", "POST")
            _ = try call("/element/\(element)/value", "POST", ["text": text])
        }

        /// Searches the page's folder for `text` (the search box and its button).
        func search(_ text: String) throws {
            try type(text, into: try #require(try find("#q").first))
            try click(try #require(try find("#search button[type='submit']").first))
        }

        func text(_ element: String) throws -> String { try call("/element/\(element)/text") as? String ?? "" }

        /// Presses and releases one key, as a person at the keyboard (WebDriver's key codes:
        /// Tab U+E004, Enter U+E007).
        func press(_ key: String) throws {
            _ = try call("/actions", "POST", ["actions": [["type": "key", "id": "keyboard", "actions": [["type": "keyDown", "value": key], ["type": "keyUp", "value": key]]]]])
        }

        /// Tabs through the page until `css` has the focus (at most `limit` presses).
        func tab(to css: String, limit: Int = 60) throws -> Bool {
            for _ in 0..<limit {
                try press("\u{E004}")
                if try script("return document.activeElement.matches(\"\(css)\")") as? Bool == true { return true }
            }
            return false
        }

        func script(_ source: String) throws -> Any? { try call("/execute/sync", "POST", ["script": source, "args": [Any]()]) }

        func screenshot(to path: String) throws {
            guard let encoded = try call("/screenshot") as? String, let data = Data(base64Encoded: encoded) else { return }
            try data.write(to: URL(fileURLWithPath: path))
        }

        /// Ends the session (Chromium quits) and chromedriver: asked to shut down, then killed
        /// if it has not within five seconds.
        func close() {
            _ = try? Self.call(base + "/session/\(session)", "DELETE")
            _ = try? REST.curl(base + "/shutdown")
            _ = try? driver.wait(timeout: 5, what: "chromedriver")
        }
    }

    /// `kaiten run --ui ADDR` serves the page (and the API it calls) on a listener of its own;
    /// with --allow-remote over HTTPS only, its session cookie Secure. A non-loopback address
    /// without --allow-remote is refused before anything listens. (Tests bind loopback only:
    /// --allow-remote is what turns TLS on, whatever the address.)
    @Test(.enabled(if: chromium != nil && chromedriver != nil, "no chromium and chromedriver (scripts/test installs Debian's)"))
    func thePageHasAListenerOfItsOwnAndRemoteMeansHTTPS() async throws {
        let refused = try KaitenCLI.run(["run", "--ui", "192.0.2.1:8386", "--home", NSTemporaryDirectory() + "/kaiten-no-home"])
        #expect(refused.status == 64 && refused.stderr.contains("--allow-remote"), "\(refused.stderr)")

        try await REST.withKaitenBesideSyncthing("kaiten-web-ui", runArguments: ["--apply", "none", "--ui", "127.0.0.1:0", "--allow-remote"]) { world, st, base, key in
            var page = ""
            try await RunInteropTests.waitFor("the page's own listener") {
                let record = FileManager.default.contents(atPath: world.home + "/state/service.json").flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
                page = record?["page_url"] as? String ?? ""
                return !page.isEmpty
            }
            #expect(page.hasPrefix("https://127.0.0.1:") && page != base, "\(page) beside \(base)")
            #expect(try world.kaiten("status").stdout.contains("the web page's own listener at \(page)"))
            // TLS only: plain HTTP on that port gets no page.
            let plain = try REST.curl(page.replacingOccurrences(of: "https://", with: "http://") + "/ui/")
            #expect(plain.status != 200, "\(plain.body)")
            // The same API behind it.
            #expect(try REST.curl(page + "/rest/system/status", headers: ["X-API-Key: \(key)"], insecure: true).status == 200)

            let ui = try world.kaiten("ui")
            let link = ui.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(ui.status == 0 && link.hasPrefix(page + "/ui/login?token="), "\(ui.stdout)\(ui.stderr)")
            // The session cookie a browser gets over HTTPS is Secure and HttpOnly.
            let jar = world.dir.file("cookies")
            _ = try REST.curl(link, insecure: true, cookieJar: jar)
            let cookies = try String(contentsOfFile: jar, encoding: .utf8).split(separator: "\n").filter { $0.hasPrefix("#HttpOnly_") }
            #expect(cookies.count == 1 && cookies[0].split(separator: "\t").dropFirst(3).first == "TRUE", "\(cookies)")

            let browser = try Browser(
                profile: world.dir.file("chromium-profile"), log: world.dir.file("chromedriver.log"), arguments: ["--ignore-certificate-errors"])
            defer { browser.close() }
            try browser.go(try world.kaiten("ui").stdout.trimmingCharacters(in: .whitespacesAndNewlines))
            _ = try await browser.waitFor("tr[data-path='docs']", "the folder's tree over HTTPS")
            #expect((try browser.call("/url") as? String) == page + "/ui/")
            // A file opened there is reached through the page's own origin (/ondemand/), since
            // the on-demand server listens on loopback alone: other/c.txt is only on the peer.
            try browser.click(try #require(try browser.find("tr[data-path='other'] button.dir").first))
            try browser.click(try await browser.waitFor("tr[data-path='other/c.txt'] button.open", "other/c.txt's row"))
            let download = try await browser.waitFor("#download", "the download link")
            let href = try browser.call("/element/\(download)/attribute/href") as? String ?? ""
            #expect(href.hasPrefix("/ondemand/"), "\(href)")
            _ = try browser.script("window.__got = null; fetch(document.getElementById('download').href).then((r) => r.text()).then((t) => { window.__got = t; })")
            try await RunInteropTests.waitFor("the file through the page's origin") { try browser.script("return window.__got") as? String != nil }
            #expect(try browser.script("return window.__got") as? String == "c, not selected at first\n")
            // A range, as a player seeking asks for one.
            _ = try browser.script("window.__range = null; fetch(document.getElementById('download').href, { headers: { Range: 'bytes=3-5' } }).then(async (r) => { window.__range = r.status + ' ' + await r.text(); })")
            try await RunInteropTests.waitFor("a range through the page's origin") { try browser.script("return window.__range") as? String != nil }
            #expect(try browser.script("return window.__range") as? String == "206 not", "a range of the file, as a player asks")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/other/c.txt"))
            // Without the session, /ondemand/ opens nothing, signed link or not.
            let bare = try REST.curl(page + href, insecure: true)
            #expect(bare.status == 403, "\(bare.status) \(bare.body)")
        }
    }

    /// The search box over a folder of 100,000 paths finds one name, a glob's matches and
    /// everything (its time is measured by `scripts/bench search`, in a release build). The
    /// index is written into the home's log as a peer's (a device that is never online): the
    /// search reads the index alone, whoever announced it, and syncthing scanning 100,000
    /// files twice per CI run would cost minutes for nothing this test checks.
    @Test(.enabled(if: chromium != nil && chromedriver != nil, "no chromium and chromedriver (scripts/test installs Debian's)"))
    func aSearchOfAHundredThousandPathsFindsWhatItAsks() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-web-search")
        defer { dir.remove() }
        let home = dir.file("home")
        let created = try KaitenCLI.run(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:\(try FreePort.next())", "--gui-address", "127.0.0.1:0"])
        #expect(created.status == 0, "\(created.stderr)")
        let peer = try DeviceID(bytes: Array(repeating: 0x5A, count: 32))
        try FileManager.default.createDirectory(atPath: dir.file("data/.stfolder"), withIntermediateDirectories: true)
        #expect(try KaitenCLI.run(["peer", "add", peer.description, "--name", "away", "--address", "tcp://127.0.0.1:1", "--home", home]).status == 0)
        #expect(try KaitenCLI.run(["folder", "add", "f", "--path", dir.file("data"), "--share", peer.description, "--home", home]).status == 0)
        let opened = try KaitenHome.open(Home(path: home))
        let log = try PeerGenerations.openLog(home: opened, folder: "f", readOnly: false)
        let files = SyntheticIndex.photos(count: 100_000)
        try log.apply(device: peer, indexID: 7, files: files, isFullIndex: true)
        log.close()

        let run = try RunInteropTests.Running.start(home: home, logPath: dir.file("run.log"), ["--apply", "none"])
        defer { run.stop() }
        var base = ""
        try await RunInteropTests.waitFor("the REST API listening", log: run) {
            let record = FileManager.default.contents(atPath: home + "/state/service.json").flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
            base = record?["rest_url"] as? String ?? ""
            return !base.isEmpty
        }
        let ui = try KaitenCLI.run(["ui", "--home", home])
        #expect(ui.status == 0, "\(ui.stdout)\(ui.stderr)")
        let browser = try Browser(profile: dir.file("chromium-profile"), log: dir.file("chromedriver.log"))
        defer { browser.close() }
        try browser.go(ui.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        _ = try await browser.waitFor("tr[data-path='photos']", "the folder's tree")

        // One name among 100,000.
        try browser.search("IMG_77777.jpg")
        let row = try await browser.waitFor("#tree tr[data-path='photos/2015/27/IMG_77777.jpg']", "IMG_77777.jpg found")
        #expect(try browser.text(row).contains("photos/2015/27/IMG_77777.jpg"))
        let summary = try #require(try browser.find("#search-summary").first)
        #expect(try browser.text(summary).hasPrefix("1 match(es) ("))
        #expect(try browser.find("#tree tbody tr").count == 1)
        // A glob over every name, and a search that matches them all, shown in part.
        try browser.search("IMG_7777?.jpg")
        try await RunInteropTests.waitFor("ten matches of a glob") {
            try browser.text(summary).hasPrefix("10 match(es)")
        }
        try browser.search("photos")
        try await RunInteropTests.waitFor("every path matched, the first shown") {
            try browser.text(summary).hasPrefix("101021 match(es), the first 200 shown")
        }
        #expect(try browser.find("#tree tbody tr").count == 200)
        // Ticking a match selects it: a line of the selection file, planned.
        try browser.click(try #require(try browser.find("input[data-select='photos/2000/0/IMG_0.jpg']").first))
        _ = try await browser.waitFor("#plan li[data-path='photos/2000/0/IMG_0.jpg'][data-action='pull']", "the ticked match planned")
        #expect(try String(contentsOfFile: home + "/selections/f.txt", encoding: .utf8).contains("photos/2000/0/IMG_0.jpg"))
        try browser.screenshot(to: (ProcessInfo.processInfo.environment["KAITEN_SCREENSHOTS"] ?? dir.path) + "/search-100k.png")
        // Size and date bounds: IMG_7777 and IMG_77770…77779 match the text; 76K and more
        // (1000 + n bytes) leaves the ten; from 2023-11-16 (1,700,000,000 + n) none of them.
        try browser.type("76K", into: try #require(try browser.find("#search-min").first))
        try browser.search("IMG_7777")
        try await RunInteropTests.waitFor("ten matches of 76K and more") { try browser.text(summary).hasPrefix("10 match(es)") }
        _ = try browser.script("document.getElementById('search-after').value = '2023-11-16'")
        try browser.click(try #require(try browser.find("#search button[type='submit']").first))
        try await RunInteropTests.waitFor("no match from 2023-11-16") { try browser.text(summary).hasPrefix("0 match(es)") }
        try browser.type("lots", into: try #require(try browser.find("#search-min").first))
        try browser.click(try #require(try browser.find("#search button[type='submit']").first))
        try await RunInteropTests.waitFor("a bad size said") { try browser.text(summary).contains("not a size: lots") }
        try browser.click(try #require(try browser.find("#search-clear").first))
        _ = try await browser.waitFor("tr[data-path='photos']", "the tree again after clearing")

        // A bad glob is said, not a failure of the page.
        try browser.search("[unclosed")
        try await RunInteropTests.waitFor("the bad glob said") { try browser.text(summary).contains("[unclosed") }
    }

    @Test(.enabled(if: chromium != nil && chromedriver != nil, "no chromium and chromedriver (scripts/test installs Debian's)"))
    func aPersonTicksADirectorySeesItsPlanAndAppliesItInTheBrowser() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-web", runArguments: ["--apply", "none"]) { world, st, base, key in
            // A name a page must show as text, never run.
            let hostile = "<img src=x onerror=document.title='pwned'>.txt"
            try TestFiles.write(world.peerData + "/other/" + hostile, "hostile name\n")
            try await ApplyInteropTests.rescan(st)
            try await RunInteropTests.waitFor("the hostile name in Kaiten's index") {
                let tree = try? JSONSerialization.jsonObject(with: Data(REST.curl(base + "/rest/db/browse?folder=\(ApplyInteropTests.folder)&prefix=other", headers: ["X-API-Key: \(key)"]).body.utf8)) as? [[String: Any]]
                return tree?.contains { $0["name"] as? String == hostile } == true
            }

            // `kaiten ui` gives a one-time link.
            let ui = try world.kaiten("ui")
            #expect(ui.status == 0, "\(ui.stdout)\(ui.stderr)")
            let link = ui.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(link.hasPrefix(base + "/ui/login?token="), "\(link)")

            let browser = try Browser(profile: world.dir.file("chromium-profile"), log: world.dir.file("chromedriver.log"))
            defer { browser.close() }
            try browser.go(link)
            // The token became a cookie and left the address bar; the tree of the folder shows.
            _ = try await browser.waitFor("tr[data-path='docs']", "the folder's tree")
            #expect((try browser.call("/url") as? String) == base + "/ui/")
            // KAITEN_SCREENSHOTS keeps them (Docs/images has the ones the README shows).
            let shots = ProcessInfo.processInfo.environment["KAITEN_SCREENSHOTS"] ?? world.dir.file("screenshots")
            try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
            try browser.screenshot(to: shots + "/tree.png")

            // docs is selected (ticked); other is not. Tick other: its file is planned.
            let docs = try #require(try browser.find("input[data-select='docs']").first)
            #expect(try browser.call("/element/\(docs)/selected") as? Bool == true)
            try browser.click(try #require(try browser.find("input[data-select='other']").first))
            _ = try await browser.waitFor("#plan li[data-path='other/c.txt'][data-action='pull']", "other/c.txt in the plan")
            #expect(try String(contentsOfFile: world.home + "/selections/\(ApplyInteropTests.folder).txt", encoding: .utf8).contains("other"))
            try browser.screenshot(to: shots + "/plan.png")
            // Applying pulls exactly that, byte for byte.
            try browser.click(try #require(try browser.find("#apply").first))
            try await RunInteropTests.waitFor("other/c.txt pulled") {
                RunInteropTests.content(world.local + "/other/c.txt") == "c, not selected at first\n"
            }
            // The page says so once it has shown the folder again, in sync.
            try await RunInteropTests.waitFor("the page in sync after the apply") {
                guard let summary = try browser.find("#plan-summary").first, let outcome = try browser.find("#outcome").first else { return false }
                return try browser.text(summary).hasPrefix("In sync") && browser.text(outcome) == "Applied."
            }
            // The apply is over: every file it pulled is in place (c.txt alone was waited for, and
            // the next file's rename may come a moment after it).
            #expect(RunInteropTests.content(world.local + "/other/" + hostile) == "hostile name\n")

            // The hostile name is text on the page: no element made of it, nothing run. (Opening
            // a directory asks for neither the peers' completion nor the rounds again.)
            func asked(_ path: String) throws -> Int {
                try browser.script("return performance.getEntriesByType('resource').filter((e) => e.name.includes('\(path)')).length") as? Int ?? -1
            }
            let completions = try asked("/rest/db/completion"), rounds = try asked("/rest/kaiten/rounds")
            #expect(completions > 0 && rounds > 0)
            try browser.click(try #require(try browser.find("tr[data-path='other'] button.dir").first))
            let row = try await browser.waitFor("tr[data-path='other/\(hostile.replacingOccurrences(of: "'", with: "\\'"))']", "the hostile name's row")
            #expect(try browser.text(row).contains(hostile))
            #expect(try browser.find("img").isEmpty)
            #expect(try browser.script("return document.title") as? String == "Kaiten")
            #expect(try asked("/rest/db/completion") == completions && asked("/rest/kaiten/rounds") == rounds)

            // Sorting: by size (largest first, then smallest), by name again.
            try browser.click(try #require(try browser.find("#tree tbody tr:not([data-path]) button.dir").first))
            try browser.click(try await browser.waitFor("tr[data-path='docs'] button.dir", "the root listed again"))
            _ = try await browser.waitFor("tr[data-path='docs/a.txt']", "docs listed")
            func order() throws -> [String] {
                try browser.script("return [...document.querySelectorAll('#tree tbody tr[data-path]')].map((r) => r.dataset.path)") as? [String] ?? []
            }
            #expect(try order() == ["docs/a.txt", "docs/b.txt"])
            try browser.click(try #require(try browser.find("th[data-sort='size'] button").first))
            try await RunInteropTests.waitFor("docs by size, largest first") { try order() == ["docs/a.txt", "docs/b.txt"] && (try browser.find("th[data-sort='size'][aria-sort='descending']").count == 1) }
            try browser.click(try #require(try browser.find("th[data-sort='size'] button").first))
            try await RunInteropTests.waitFor("docs by size, smallest first") { try order() == ["docs/b.txt", "docs/a.txt"] }
            try browser.click(try #require(try browser.find("th[data-sort='name'] button").first))
            try await RunInteropTests.waitFor("docs by name again") { try order() == ["docs/a.txt", "docs/b.txt"] }

            // Search: a text anywhere in the path, and a glob, from the whole index.
            try browser.search("C.TXT")
            _ = try await browser.waitFor("#tree tr[data-path='other/c.txt']", "other/c.txt found by a search")
            #expect(try browser.text(try #require(try browser.find("#search-summary").first)).hasPrefix("1 match(es)"))
            try browser.search("<img*")
            let found = try await browser.waitFor("tr[data-path='other/\(hostile.replacingOccurrences(of: "'", with: "\\'"))']", "the hostile name found by a glob")
            #expect(try browser.text(found).contains("other/" + hostile))
            #expect(try browser.find("img").isEmpty)
            try browser.screenshot(to: shots + "/search.png")

            // The link was for one browser, once.
            #expect(try REST.curl(link).status == 403)
            // Without the cookie and the page's token, a change is refused.
            let forged = try REST.curl(
                base + "/rest/kaiten/select?folder=\(ApplyInteropTests.folder)", method: "POST", headers: ["Content-Type: application/json", "Cookie: sessionid-\(world.me.shortDescription)=made-up"])
            #expect(forged.status == 403, "\(forged)")
        }
    }

    /// Open without keeping: a video from the peer plays in the page and seeks (the player's
    /// range requests), a picture shows, any file downloads under its own name; none of them is
    /// selected or written into the folder.
    @Test(.enabled(if: chromium != nil && chromedriver != nil, "no chromium and chromedriver (scripts/test installs Debian's)"))
    func aVideoPlaysAndSeeksAndAFileDownloadsWithoutBeingKept() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-web-open", runArguments: ["--apply", "none"]) { world, st, base, key in
            try TestMedia.ffmpeg(["-f", "lavfi", "-i", "testsrc=duration=6:size=320x240:rate=25", "-c:v", "libvpx", "-b:v", "400k", world.peerData + "/media/clip.webm"])
            try TestMedia.png(world.peerData + "/media/dot.png", width: 40, height: 30)
            try await ApplyInteropTests.rescan(st)
            try await RunInteropTests.waitFor("the media in Kaiten's index") {
                let tree = try? JSONSerialization.jsonObject(with: Data(REST.curl(base + "/rest/db/browse?folder=\(ApplyInteropTests.folder)&prefix=media", headers: ["X-API-Key: \(key)"]).body.utf8)) as? [[String: Any]]
                return tree?.count == 2
            }
            let link = try world.kaiten("ui").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let browser = try Browser(profile: world.dir.file("chromium-profile"), log: world.dir.file("chromedriver.log"))
            defer { browser.close() }
            try FileManager.default.createDirectory(atPath: ProcessInfo.processInfo.environment["KAITEN_SCREENSHOTS"] ?? world.dir.file("screenshots"), withIntermediateDirectories: true)
            try browser.go(link)
            try browser.click(try await browser.waitFor("tr[data-path='media'] button.dir", "the media directory"))
            // Thumbnails beside the names, made on demand into the Sushitrain-layout cache: the
            // picture's and a frame of the video.
            func thumbnailsLoaded(_ css: String) throws -> Int {
                try browser.script("return [...document.querySelectorAll(\"\(css)\")].filter((i) => i.complete && i.naturalWidth > 0).length") as? Int ?? 0
            }
            try await RunInteropTests.waitFor("both thumbnails shown") { try thumbnailsLoaded("#tree img.thumb") == 2 }
            let cached = (FileManager.default.enumerator(atPath: world.home + "/thumbnails")?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".jpg") }
            #expect(cached.count == 2, "\(cached)")
            // The grid: a tile per file, each with its thumbnail; a tile opens its file too.
            try browser.click(try #require(try browser.find("#view-grid").first))
            try await RunInteropTests.waitFor("the grid's thumbnails") { try thumbnailsLoaded("#grid .tile img") == 2 }
            #expect(try browser.script("return document.getElementById('tree').hidden") as? Bool == true)
            try browser.screenshot(to: (ProcessInfo.processInfo.environment["KAITEN_SCREENSHOTS"] ?? world.dir.file("screenshots")) + "/grid.png")
            try browser.click(try #require(try browser.find("#grid .tile[data-path='media/dot.png']").first))
            _ = try await browser.waitFor("#viewer img", "the picture opened from the grid")
            try browser.click(try #require(try browser.find("#view-grid").first))
            try browser.click(try await browser.waitFor("tr[data-path='media/clip.webm'] button.open", "the video's row"))
            _ = try await browser.waitFor("#viewer video", "the player")
            // Plays (muted, as a page may without a gesture), then seeks near the end.
            _ = try browser.script("""
                const video = document.querySelector("#viewer video");
                video.muted = true;
                return video.play().then(() => true);
                """)
            var played: [Any] = []
            try await RunInteropTests.waitFor("the video playing") {
                played = try browser.script("const v = document.querySelector('#viewer video'); return [v.currentTime, v.duration, v.error === null]") as? [Any] ?? []
                return (played.first as? Double ?? 0) > 0.3
            }
            #expect(abs((played[1] as? Double ?? 0) - 6) < 0.5, "\(played)")
            #expect(played[2] as? Bool == true)
            let seeked = try browser.script("""
                const video = document.querySelector("#viewer video");
                return new Promise((done) => {
                  video.addEventListener("seeked", () => done([video.currentTime, video.readyState]), { once: true });
                  video.currentTime = 5;
                });
                """) as? [Any]
            #expect(abs((seeked?[0] as? Double ?? 0) - 5) < 0.5 && (seeked?[1] as? Int ?? 0) >= 2, "\(String(describing: seeked))")
            let shots = ProcessInfo.processInfo.environment["KAITEN_SCREENSHOTS"] ?? world.dir.file("screenshots")
            try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
            try browser.screenshot(to: shots + "/video.png")
            // The link the player used answers ranges.
            let source = try #require(try browser.script("return document.querySelector('#viewer video').src") as? String)
            let range = try StreamInteropTests.curl(source, range: "100-199")
            #expect(range.status == 206 && range.body.count == 100, "\(range.status)")

            // A picture shows.
            try browser.click(try #require(try browser.find("tr[data-path='media/dot.png'] button.open").first))
            try await RunInteropTests.waitFor("the picture shown") {
                try browser.script("const img = document.querySelector('#viewer img'); return img !== null && img.complete && img.naturalWidth === 40") as? Bool == true
            }
            // Any file downloads under its name, byte for byte.
            try browser.click(try #require(try browser.find("#viewer-close").first))
            #expect(try browser.script("return document.getElementById('viewer').hidden") as? Bool == true)
            let download = try #require(try browser.script("return document.getElementById('download') ? null : 'closed'") as? String)
            #expect(download == "closed")
            try browser.click(try #require(try browser.find("tr[data-path='media/clip.webm'] button.open").first))
            var href = ""
            try await RunInteropTests.waitFor("the download link") {
                href = try browser.script("const a = document.getElementById('download'); return a ? a.href : null") as? String ?? ""
                return !href.isEmpty
            }
            let fetched = try StreamInteropTests.curl(href)
            #expect(fetched.status == 200)
            #expect(fetched.body == FileManager.default.contents(atPath: world.peerData + "/media/clip.webm"))
            #expect(fetched.headers["content-disposition"]?.hasPrefix("attachment; filename=\"clip.webm\"") == true, "\(fetched.headers)")

            // Nothing was kept.
            #expect(!(try String(contentsOfFile: world.home + "/selections/\(ApplyInteropTests.folder).txt", encoding: .utf8).contains("media")))
            #expect(!FileManager.default.fileExists(atPath: world.local + "/media"))
        }
    }

    /// Settle from the page: a file made here where the peer has another is listed with its
    /// choices, and one click deletes it (as `kaiten resolve --delete-local` would); the folder's peer is
    /// shown connected, with how much of the folder it holds.
    @Test(.enabled(if: chromium != nil && chromedriver != nil, "no chromium and chromedriver (scripts/test installs Debian's)"))
    func aConflictIsSettledWithOneClickAndThePeersAreShown() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-web-settle", runArguments: ["--apply", "none"]) { world, st, base, key in
            // Files made here, never synced, where the peer has other content (the selection
            // not applied yet): each a conflict.
            try TestFiles.write(world.local + "/docs/a.txt", "made here, not the peer's\n")
            try TestFiles.write(world.local + "/docs/b.txt", "made here too\n")
            #expect(try REST.curl(base + "/rest/db/scan?folder=\(ApplyInteropTests.folder)", method: "POST", headers: ["X-API-Key: \(key)"]).status == 200)
            var said = ""
            do {
                try await RunInteropTests.waitFor("the local files listed as conflicts") {
                    said = try REST.curl(base + "/rest/kaiten/conflicts", headers: ["X-API-Key: \(key)"]).body
                    let conflicts = try? JSONSerialization.jsonObject(with: Data(said.utf8)) as? [[String: Any]]
                    return conflicts?.count == 2
                }
            } catch {
                Issue.record("/rest/kaiten/conflicts said: \(said)")
                throw error
            }
            let link = try world.kaiten("ui").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let browser = try Browser(profile: world.dir.file("chromium-profile"), log: world.dir.file("chromedriver.log"))
            defer { browser.close() }
            try browser.go(link)
            let delete = try await browser.waitFor("#conflicts li[data-path='docs/a.txt'] button[data-choice='delete-local']", "the conflict's choices")
            let choices = try browser.script("return [...document.querySelectorAll(\"#conflicts li[data-path='docs/a.txt'] button\")].map((b) => b.dataset.choice)") as? [String]
            #expect(choices == ["use-global", "delete-local", "keep"], "\(String(describing: choices))")
            let peer = try await browser.waitFor("#peers tr[data-device='\(st.deviceID.description)'] td.connected", "the peer shown connected")
            #expect(try browser.text(peer).hasPrefix("connected, "))
            // The service's rounds as its API says them, the newest first: a round after the
            // scan saw the two conflicts, and with --apply none none applied anything. The page
            // shows the rounds as of its load (a round may have run since): each as the API has it.
            var rounds: [[String: Any]] = []
            try await RunInteropTests.waitFor("a round that saw the two conflicts") {
                rounds = try JSONSerialization.jsonObject(with: Data(REST.curl(base + "/rest/kaiten/rounds", headers: ["X-API-Key: \(key)"]).body.utf8)) as? [[String: Any]] ?? []
                return rounds.contains { $0["conflicts"] as? Int == 2 }
            }
            #expect(rounds.allSatisfy { $0["applied"] as? Int == 0 }, "\(rounds)")
            let numbers = rounds.compactMap { $0["number"] as? Int }
            #expect(numbers == numbers.sorted(by: >), "newest first: \(numbers)")
            let shown = try browser.script("return [...document.querySelectorAll('#rounds li')].map((li) => [Number(li.dataset.number), Number(li.dataset.pending)])") as? [[Int]] ?? []
            #expect(!shown.isEmpty)
            for item in shown {
                #expect(rounds.contains { $0["number"] as? Int == item[0] && $0["pending"] as? Int == item[1] }, "\(item) not among \(rounds)")
            }
            #expect(shown.map { $0[0] } == shown.map { $0[0] }.sorted(by: >))
            let shots = ProcessInfo.processInfo.environment["KAITEN_SCREENSHOTS"] ?? world.dir.file("screenshots")
            try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
            try browser.screenshot(to: shots + "/settle.png")

            try browser.click(delete)
            try await RunInteropTests.waitFor("the local copy deleted") { !FileManager.default.fileExists(atPath: world.local + "/docs/a.txt") }
            try await RunInteropTests.waitFor("the settled conflict gone from the page") { try browser.find("#conflicts li[data-path='docs/a.txt']").isEmpty }
            #expect(try browser.find("#conflicts li[data-path='docs/b.txt']").count == 1)
            // Keep: the file stays, unselected, and is no longer a conflict.
            try browser.click(try #require(try browser.find("#conflicts li[data-path='docs/b.txt'] button[data-choice='keep']").first))
            try await RunInteropTests.waitFor("nothing left to settle") {
                try browser.text(try #require(try browser.find("#conflicts-summary").first)) == "Nothing to settle."
            }
            #expect(RunInteropTests.content(world.local + "/docs/b.txt") == "made here too\n")
        }
    }

    /// `kaiten ui --site`: a directory of the folder served as a web site from the peers, on
    /// demand: its index.html, the style sheet, script and picture it names (each with its
    /// type), a subdirectory's page; nothing outside that directory, nothing without the
    /// signature, nothing kept.
    @Test(.enabled(if: chromium != nil && chromedriver != nil, "no chromium and chromedriver (scripts/test installs Debian's)"))
    func aDirectoryIsServedAsAWebSiteOnDemand() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-web-site", runArguments: ["--apply", "none"]) { world, st, base, key in
            let www = world.peerData + "/www"
            try TestFiles.write(www + "/index.html", """
                <!doctype html><html><head><title>Home page</title><link rel="stylesheet" href="style.css"><script src="app.js"></script></head>
                <body><img id="logo" src="img/dot.png" alt=""><a id="sub" href="sub/">more</a></body></html>
                """)
            try TestFiles.write(www + "/style.css", "body { background-color: rgb(1, 2, 3); }\n")
            try TestFiles.write(www + "/app.js", "document.addEventListener('DOMContentLoaded', () => { document.body.dataset.ran = 'yes'; });\n")
            try TestMedia.png(www + "/img/dot.png", width: 40, height: 30)
            try TestFiles.write(www + "/sub/index.html", "<!doctype html><title>Sub page</title>\n")
            try TestFiles.write(world.peerData + "/secret.txt", "outside the site\n")
            try await ApplyInteropTests.rescan(st)
            try await RunInteropTests.waitFor("the site in Kaiten's index") {
                try ["www/index.html", "www/style.css", "www/app.js", "www/img/dot.png", "www/sub/index.html", "secret.txt"].allSatisfy { name in
                    try REST.curl(base + "/rest/db/file?folder=\(ApplyInteropTests.folder)&file=\(name)", headers: ["X-API-Key: \(key)"]).status == 200
                }
            }
            let made = try world.kaiten("ui", "--site", ApplyInteropTests.folder + "/www")
            #expect(made.status == 0, "\(made.stdout)\(made.stderr)")
            let site = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(site.hasSuffix("/\(ApplyInteropTests.folder)/www/"), "\(site)")

            let browser = try Browser(profile: world.dir.file("chromium-profile"), log: world.dir.file("chromedriver.log"))
            defer { browser.close() }
            try browser.go(site)
            try await RunInteropTests.waitFor("the site's page with its style, script and picture") {
                let state = try browser.script("""
                    const img = document.getElementById("logo");
                    return [document.title, getComputedStyle(document.body).backgroundColor, document.body.dataset.ran || "", img ? img.naturalWidth : 0];
                    """) as? [Any]
                return state?[0] as? String == "Home page" && state?[1] as? String == "rgb(1, 2, 3)" && state?[2] as? String == "yes" && state?[3] as? Int == 40
            }
            try browser.click(try #require(try browser.find("#sub").first))
            try await RunInteropTests.waitFor("the subdirectory's page") { try browser.script("return document.title") as? String == "Sub page" }

            #expect(try StreamInteropTests.curl(site + "style.css").headers["content-type"] == "text/css; charset=utf-8")
            #expect(try StreamInteropTests.curl(site + "app.js").headers["content-type"] == "text/javascript; charset=utf-8")
            let redirect = try StreamInteropTests.curl(site + "sub")
            #expect(redirect.status == 301 && redirect.headers["location"]?.hasSuffix("/www/sub/") == true, "\(redirect.status) \(redirect.headers)")
            // Nothing outside the directory, however it is spelled; nothing with another signature.
            #expect(try StreamInteropTests.curl(site + "../secret.txt", extra: ["--path-as-is"]).status == 400)
            #expect(try StreamInteropTests.curl(site + "%2e%2e/secret.txt").status == 400)
            #expect(try StreamInteropTests.curl(site + "img/..%2f..%2fsecret.txt").status == 400)
            let forged = site.replacingOccurrences(of: "/\(ApplyInteropTests.folder)/www/", with: "/\(ApplyInteropTests.folder)/")
            #expect(try StreamInteropTests.curl(forged + "secret.txt").status == 403)
            // A file is not a site; nothing was selected or written.
            let file = try world.kaiten("ui", "--site", ApplyInteropTests.folder + "/www/index.html")
            #expect(file.status == 1 && file.stderr.contains("not a directory"), "\(file.stderr)")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/www"))
        }
    }

    /// On a phone-sized screen nothing is wider than the screen; with the keyboard alone a
    /// person ticks a directory (Tab, Space), sees its plan, and applies it (Tab, Enter),
    /// watching its progress.
    @Test(.enabled(if: chromium != nil && chromedriver != nil, "no chromium and chromedriver (scripts/test installs Debian's)"))
    func thePageFitsAPhoneAndWorksWithTheKeyboardAlone() async throws {
        try await REST.withKaitenBesideSyncthing("kaiten-web-keys", runArguments: ["--apply", "none"]) { world, st, base, key in
            // A file the peer sends at 1 MB/s: the apply takes seconds, and the page shows how far it is.
            try TestFiles.random(world.peerData + "/other/big.bin", size: 4_000_000)
            try await ApplyInteropTests.rescan(st)
            try await RunInteropTests.waitFor("other/big.bin in Kaiten's index") {
                try REST.curl(base + "/rest/db/file?folder=\(ApplyInteropTests.folder)&file=other/big.bin", headers: ["X-API-Key: \(key)"]).status == 200
            }
            var options = try await st.get("/rest/config/options") as? [String: Any] ?? [:]
            options["limitBandwidthInLan"] = true
            _ = try await st.put("/rest/config/options", json: options)
            var entry = try await st.get("/rest/config/devices/\(world.me)") as? [String: Any] ?? [:]
            entry["maxSendKbps"] = 1000
            _ = try await st.put("/rest/config/devices/\(world.me)", json: entry)
            let link = try world.kaiten("ui").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let browser = try Browser(profile: world.dir.file("chromium-profile"), log: world.dir.file("chromedriver.log"))
            defer { browser.close() }
            _ = try browser.call("/window/rect", "POST", ["width": 390, "height": 844])
            try browser.go(link)
            _ = try await browser.waitFor("tr[data-path='other'] input[data-select='other']", "the folder's tree")
            let widths = try browser.script("return [document.documentElement.scrollWidth, window.innerWidth]") as? [Int]
            #expect(widths?.count == 2 && widths![0] <= widths![1], "the page is wider than the phone: \(String(describing: widths))")
            let shots = ProcessInfo.processInfo.environment["KAITEN_SCREENSHOTS"] ?? world.dir.file("screenshots")
            try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
            try browser.screenshot(to: shots + "/phone.png")

            _ = try browser.script("document.activeElement.blur(); window.scrollTo(0, 0)")
            #expect(try browser.tab(to: "input[data-select='other']"), "Tab never reached the tick of other/")
            try browser.press(" ")
            _ = try await browser.waitFor("#plan li[data-path='other/c.txt'][data-action='pull']", "other/c.txt in the plan")
            #expect(try browser.tab(to: "#apply:not([disabled])"), "Tab never reached the apply button")
            try browser.press("\u{E007}")
            // Midway, the page says how far the apply is (bytes of the files it pulls).
            try await RunInteropTests.waitFor("the apply's progress shown midway") {
                let shown = try browser.script("return document.getElementById('outcome').dataset.progress") as? String ?? ""
                let parts = shown.split(separator: "/").compactMap { Int64($0) }
                return parts.count == 2 && parts[0] > 0 && parts[0] < parts[1]
            }
            #expect(try browser.text(try #require(try browser.find("#outcome").first)).hasPrefix("Applying… "))
            try await RunInteropTests.waitFor("other/ pulled", timeout: 90) {
                RunInteropTests.content(world.local + "/other/c.txt") == "c, not selected at first\n"
                    && ApplyInteropTests.sha(world.local + "/other/big.bin") == ApplyInteropTests.sha(world.peerData + "/other/big.bin")
            }
            try await RunInteropTests.waitFor("the page says it is applied") {
                try browser.text(try #require(try browser.find("#outcome").first)) == "Applied."
            }
            let progress = try #require(try JSONSerialization.jsonObject(with: Data(REST.curl(base + "/rest/kaiten/apply/progress", headers: ["X-API-Key: \(key)"]).body.utf8)) as? [String: Any])
            // docs/ (selected, never applied under --apply none) and other/: four files in all.
            #expect(progress["running"] as? Bool == false && progress["files_done"] as? Int == 4 && progress["files_total"] as? Int == 4, "\(progress)")
            #expect(progress["bytes_done"] as? Int == progress["bytes_total"] as? Int && progress["failed"] as? Int == 0, "\(progress)")
        }
    }
}
