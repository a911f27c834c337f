import Foundation
import KaitenProtocol
import Testing

@testable import KaitenPeer

/// What syncthing 1.25 to 2.x put on the wire that 1.19.2 never sent (issue 15, item 2).
@Suite(.timeLimit(.minutes(5)))
struct NewerPeerMessageTests {
    static let me = try! DeviceID(bytes: Array(repeating: 0x11, count: 32))
    static let peer = try! DeviceID(bytes: Array(repeating: 0x22, count: 32))

    static func clusterConfig(secondary: Bool) -> BEPClusterConfig {
        var config = BEPClusterConfig()
        config.secondary = secondary
        guard !secondary else { return config }
        var folder = BEPFolder()
        folder.id = "photos"
        folder.type = .sendOnly
        for (id, index) in [(me, UInt64(1)), (peer, UInt64(2))] {
            var device = BEPDevice()
            device.id = Data(id.bytes)
            device.indexID = index
            device.maxSequence = 10
            folder.devices.append(device)
        }
        config.folders = [folder]
        return config
    }

    @Test func aSecondaryClusterConfigIsNotReadAsSharingNothing() {
        var receiver = IndexReceiver(wanted: ["photos"], me: Self.me, peer: Self.peer, since: [:])
        receiver.apply(Self.clusterConfig(secondary: false))
        #expect(receiver.notSharedByPeer.isEmpty)
        receiver.apply(Self.clusterConfig(secondary: true))
        #expect(receiver.notSharedByPeer.isEmpty, "a secondary ClusterConfig must not unshare the folder")
        #expect(receiver.folders["photos"]?.target == 10)
    }

    @Test func helloCarriesConnectionsAndTimestampAndFolderTypeIsAnEnum() throws {
        var hello = BEPHello()
        hello.clientName = "syncthing"
        hello.clientVersion = "v2.1.3"
        hello.numConnections = 3
        hello.timestamp = 1_795_400_000_000_000_000
        let bytes: [UInt8] = try hello.serializedBytes()
        let decoded = try BEPHello(serializedBytes: bytes)
        #expect(decoded.numConnections == 3 && decoded.timestamp == 1_795_400_000_000_000_000)

        // 1.19.2's read_only = true is the same varint as 2.x's FOLDER_TYPE_SEND_ONLY.
        var folder = BEPFolder()
        folder.type = .sendOnly
        #expect(try folder.serializedBytes() as [UInt8] == [0x18, 0x01])
        #expect(try BEPFolder(serializedBytes: [0x18, 0x02] as [UInt8]).type == .receiveOnly)
    }
}
