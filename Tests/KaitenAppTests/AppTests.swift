import Foundation
import KaitenApp
import KaitenConfig
import KaitenTestSupport
import Logging
import Testing

/// The use-case layer called as every front-end calls it: one call per verb on a home made for
/// the test, no process, no peer.
@Suite(.timeLimit(.minutes(1))) struct AppTests {
    final class Said: @unchecked Sendable {
        private let lock = NSLock()
        private var lines: [String] = []
        func add(_ line: String) { lock.withLock { lines.append(line) } }
        var all: [String] { lock.withLock { lines } }
    }

    static func app(_ dir: TemporaryDirectory, said: Said) throws -> App {
        let home = Home(path: dir.file("home"))
        _ = try KaitenHome.initialize(home, name: "app-test", listenAddress: "tcp://127.0.0.1:0", guiAddress: "127.0.0.1:0")
        return App(
            home: home, logger: .init(label: "test"),
            diagnostics: Diagnostics(error: said.add, warning: { said.add("warning: " + $0) }, note: said.add))
    }

    @Test func foldersAndSelectionsThroughTheLayer() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-app")
        defer { dir.remove() }
        let said = Said()
        let app = try Self.app(dir, said: said)
        let peer = "LXONAJ2-BUJHTRL-4AZYOG4-5H4JWNG-XA4OJHO-JEGBUIY-D5N2DL5-KCJ33AQ"
        _ = try app.addPeer(peer, name: "nas", addresses: [], compression: "metadata")
        guard case .added(let path, let created) = try app.addFolder("f", path: dir.file("f"), label: nil, type: "sendreceive", shares: ["nas"])
        else { Issue.record("not added"); return }
        #expect(created && FileManager.default.fileExists(atPath: path + "/.stfolder"))
        #expect(try app.folderList().entries.map(\.id) == ["f"])
        #expect(try app.peers().entries.contains { $0.name == "nas" && $0.folders == ["f"] })

        // Nothing in the global index: refused without --force, written with it.
        #expect(throws: (any Error).self) { try app.select("f", ["docs"], force: false) }
        let selected = try app.select("f", ["docs", "docs/a.txt"], force: true)
        guard selected.count == 2, case .path("docs") = selected[0], case .coveredBy("docs/a.txt", parent: "docs") = selected[1] else {
            Issue.record("\(selected)")
            return
        }
        // A path selected through its parent is not removable alone: refused, the file unchanged.
        let refused = try app.deselect("f", ["docs/a.txt"])
        #expect(refused.count == 1 && refused[0].refused)
        let removed = try app.deselect("f", ["docs"])
        guard removed.count == 1, case .path("docs") = removed[0] else {
            Issue.record("\(removed)")
            return
        }

        // The status of a folder with no peer's index yet, with what the layer said on the way.
        let status = try app.status(folders: ["f"])
        #expect(status.folders.map(\.id) == ["f"] && status.folders[0].peers.isEmpty && status.service == nil)
        #expect(throws: (any Error).self) { try app.status(folders: ["nope"]) }
        #expect(ExitStatus(for: Result { try app.removeFolder("nope") }.failure!) == .failure)
        guard case .removed = try app.removeFolder("f") else { Issue.record("not removed"); return }
        #expect(try app.folderList().entries.isEmpty)
    }
}
