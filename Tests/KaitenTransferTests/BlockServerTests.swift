import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import Testing

@testable import KaitenTransfer

/// What the block server refuses, before it reads a byte, without a socket.
@Suite(.timeLimit(.minutes(5)))
struct BlockServerTests {
    static let peer = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")
    static let stranger = try! DeviceID("MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD")

    /// A home with folder `f` shared with `peer` and folder `g` shared with nobody.
    static func server(in directory: TemporaryDirectory) throws -> (BlockServer, KaitenHome) {
        let home = Home(path: directory.file("home"))
        _ = try KaitenHome.initialize(home, name: "k", listenAddress: "tcp://127.0.0.1:0")
        let config = try ConfigFile.load(path: home.configPath)
        try config.addDevice(DeviceConfiguration(id: Self.peer, name: "a"))
        try config.addDevice(DeviceConfiguration(id: Self.stranger, name: "b"))
        try config.addFolder(FolderConfiguration(id: "f", path: directory.file("f"), devices: [Self.peer]))
        try config.addFolder(FolderConfiguration(id: "g", path: directory.file("g"), devices: [Self.stranger]))
        try config.write()
        let opened = try KaitenHome.open(home)
        return (BlockServer(home: opened), opened)
    }

    static func request(_ folder: String, _ name: String, offset: Int64 = 0, size: Int32 = 128) -> BEPRequest {
        var request = BEPRequest()
        request.id = 1
        request.folder = folder
        request.name = name
        request.offset = offset
        request.size = size
        return request
    }

    func refusal(_ result: Result<ResponseFrame, BlockServer.Refusal>) -> BlockServer.Refusal? {
        if case .failure(let refusal) = result { return refusal }
        return nil
    }

    @Test func aFolderNotSharedWithThePeerIsRefused() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (server, _) = try Self.server(in: directory)
        let refused = refusal(server.read(Self.request("g", "a.txt"), from: Self.peer))
        guard case .generic = refused else { Issue.record("\(String(describing: refused))"); return }
        #expect(refused?.code == .generic)
    }

    @Test(arguments: [(Int64(-1), Int32(128)), (Int64(0), Int32(0)), (Int64(0), Int32(BlockServer.maxBlockSize + 1))] as [(Int64, Int32)])
    func somethingThatIsNotABlockIsInvalid(offset: Int64, size: Int32) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (server, _) = try Self.server(in: directory)
        let refused = refusal(server.read(Self.request("f", "a.txt", offset: offset, size: size), from: Self.peer))
        guard case .invalid = refused else { Issue.record("\(String(describing: refused))"); return }
    }

    @Test(arguments: ["../outside.txt", "/etc/passwd", ".stignore", "a/../../b"])
    func aNameOutsideTheFolderIsInvalid(_ name: String) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (server, _) = try Self.server(in: directory)
        let refused = refusal(server.read(Self.request("f", name), from: Self.peer))
        guard case .invalid = refused else { Issue.record("\(name): \(String(describing: refused))"); return }
    }

    /// A device the folder is shared with encrypted is answered only through the connection's
    /// sealing path: a request that did not come through it is refused before a byte is read,
    /// and a plain device's request that claims to be sealed is refused too.
    @Test func anUntrustedDeviceIsAnsweredOnlyThroughTheSealingPath() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (_, home) = try Self.server(in: directory)
        let config = try ConfigFile.load(path: home.home.configPath)
        try config.shareFolder(id: "g", with: Self.peer, password: EncryptionPassword("pw"))
        try config.write()
        let server = BlockServer(home: try KaitenHome.open(home.home))
        guard case .generic = refusal(server.read(Self.request("g", "a.txt"), from: Self.peer)) else {
            Issue.record("a plain request from an untrusted device was not refused")
            return
        }
        guard case .generic = refusal(server.read(Self.request("f", "a.txt"), from: Self.peer, sealed: true)) else {
            Issue.record("a sealed request for a folder shared in plain text was not refused")
            return
        }
        // Sealed, for the folder it holds encrypted: past the sharing check (nothing announced here).
        guard case .invalid = refusal(server.read(Self.request("g", "a.txt"), from: Self.peer, sealed: true)) else {
            Issue.record("a sealed request from the untrusted device did not reach the announced-block check")
            return
        }
    }

    @Test func aReloadThatUnsharesTheFolderRefusesFromThenOn() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (server, home) = try Self.server(in: directory)
        let config = try ConfigFile.load(path: home.home.configPath)
        try config.unshareFolder(id: "f", from: Self.peer)
        try config.write()
        server.reconfigure(try KaitenHome.open(home.home))
        let refused = refusal(server.read(Self.request("f", "a.txt"), from: Self.peer))
        guard case .generic = refused else { Issue.record("\(String(describing: refused))"); return }
    }
}
