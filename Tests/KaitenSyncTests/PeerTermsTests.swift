import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenSync

/// What a reload compares to decide whether a peer's connection stays open: its entry and the
/// folders shared with it, nothing else.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct PeerTermsTests {
    static let peer = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")
    static let other = try! DeviceID("MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD")

    /// A config with the two peers and a folder shared with `peer`, edited by `edit`.
    func config(_ edit: (ConfigFile) throws -> Void = { _ in }) throws -> ConfigFile {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let home = Home(path: directory.file("home"))
        _ = try KaitenHome.initialize(home, name: "k", listenAddress: "tcp://127.0.0.1:0")
        let config = try ConfigFile.load(path: home.configPath)
        try config.addDevice(DeviceConfiguration(id: Self.peer, name: "a", addresses: ["tcp://127.0.0.1:22000"]))
        try config.addDevice(DeviceConfiguration(id: Self.other, name: "b"))
        try config.addFolder(FolderConfiguration(id: "f", path: "/data/f", devices: [Self.peer]))
        try config.addFolder(FolderConfiguration(id: "g", path: "/data/g", devices: [Self.other]))
        try edit(config)
        return config
    }

    @Test func aReloadThatChangesNothingOfAPeerKeepsItsTerms() throws {
        let before = try config()
        // Another peer's folder and the options changing are none of this peer's business.
        let after = try config { config in
            try config.shareFolder(id: "g", with: Self.peer)
            try config.unshareFolder(id: "g", from: Self.peer)
            config.setOption("reconnectionIntervalS", "30")
            try config.editDevice(Self.other, name: "renamed")
        }
        #expect(PeerSessions.PeerTerms(Self.peer, in: before) == PeerSessions.PeerTerms(Self.peer, in: after))
    }

    @Test(arguments: ["removed", "renamed", "address", "shared", "unshared"])
    func aChangeOfItsEntryOrItsFoldersChangesItsTerms(_ change: String) throws {
        let before = try config()
        let after = try config { config in
            switch change {
            case "removed": try config.removeDevice(Self.peer)
            case "renamed": try config.editDevice(Self.peer, name: "a2")
            case "address": try config.editDevice(Self.peer, addresses: ["tcp://127.0.0.1:22001"])
            case "shared": try config.shareFolder(id: "g", with: Self.peer)
            default: try config.unshareFolder(id: "f", from: Self.peer)
            }
        }
        #expect(PeerSessions.PeerTerms(Self.peer, in: before) != PeerSessions.PeerTerms(Self.peer, in: after))
    }
}
