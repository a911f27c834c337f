import Foundation
import KaitenProtocol
import Testing

@testable import KaitenDiscovery

/// The discovery messages without sockets: local announcements as syncthing writes and reads
/// them, the servers a config names, lookup answers good and bad.
@Suite(.timeLimit(.minutes(5)))
struct DiscoveryMessageTests {
    static let id = try! DeviceID("MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD")

    /// The bytes syncthing sends (magic, then the Announce fields 1, 2 and 3 in order),
    /// written out by hand.
    static func syncthingPacket(addresses: [String], instance: UInt8) -> [UInt8] {
        var bytes: [UInt8] = [0x2E, 0xA7, 0xD9, 0x0B, 0x0A, 0x20] + id.bytes
        for address in addresses { bytes += [0x12, UInt8(address.utf8.count)] + Array(address.utf8) }
        return bytes + [0x18, instance]
    }

    @Test func aPacketFromSyncthingDecodes() throws {
        let packet = Self.syncthingPacket(addresses: ["tcp://0.0.0.0:22000", "relay://192.0.2.9:22067/?id=X"], instance: 42)
        let announcement = try LocalAnnouncement.decode(packet)
        #expect(announcement.device == Self.id)
        #expect(announcement.instanceID == 42)
        #expect(announcement.addresses == ["tcp://0.0.0.0:22000", "relay://192.0.2.9:22067/?id=X"])
        // And what Kaiten writes is the same bytes.
        #expect(LocalAnnouncement(device: Self.id, addresses: announcement.addresses, instanceID: 42).encoded() == packet)
    }

    @Test func unspecifiedHostsBecomeTheSenderAsSyncthingDoes() {
        let announcement = LocalAnnouncement(
            device: Self.id,
            addresses: [
                "tcp://0.0.0.0:22000", "tcp://:22001", "tcp://[::]:22002", "tcp://192.0.2.7:22003", "tcp4://0.0.0.0:22004",
                "tcp6://[::]:22005", "relay://198.51.100.1:22067/?id=X", "not an address", "tcp://host-without-port",
            ],
            instanceID: 1)
        #expect(
            announcement.dialable(source: "10.1.2.3") == [
                "tcp://10.1.2.3:22000", "tcp://10.1.2.3:22001", "tcp://10.1.2.3:22002", "tcp://192.0.2.7:22003",
                "tcp4://10.1.2.3:22004", "relay://198.51.100.1:22067/?id=X",
            ])
        #expect(
            announcement.dialable(source: "fe80::1").prefix(3) == ["tcp://[fe80::1]:22000", "tcp://[fe80::1]:22001", "tcp://[fe80::1]:22002"])
        #expect(!announcement.dialable(source: "fe80::1").contains { $0.hasPrefix("tcp4://") })
        #expect(announcement.dialable(source: "fe80::1").contains("tcp6://[fe80::1]:22005"))
    }

    @Test func badPacketsAreNamedNotCrashedOn() {
        #expect(throws: LocalAnnouncement.Problem.tooShort) { try LocalAnnouncement.decode([0x2E, 0xA7]) }
        #expect(throws: LocalAnnouncement.Problem.oldVersion) { try LocalAnnouncement.decode([0x7D, 0x79, 0xBC, 0x40, 0]) }
        #expect(throws: LocalAnnouncement.Problem.wrongMagic(0xDEAD_BEEF)) { try LocalAnnouncement.decode([0xDE, 0xAD, 0xBE, 0xEF]) }
        // A device ID of 5 bytes, and a field cut short.
        #expect(throws: LocalAnnouncement.Problem.badDeviceID) {
            try LocalAnnouncement.decode([0x2E, 0xA7, 0xD9, 0x0B, 0x0A, 0x05, 1, 2, 3, 4, 5])
        }
        let cut = Array(Self.syncthingPacket(addresses: ["tcp://0.0.0.0:22000"], instance: 1).dropLast(8))
        #expect {
            try LocalAnnouncement.decode(cut)
        } throws: { error in
            if case .undecodable = error as? LocalAnnouncement.Problem { return true }
            return false
        }
        // Random bytes after the magic never crash the decoder.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let noise = (0..<Int.random(in: 0...80, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            _ = try? LocalAnnouncement.decode([0x2E, 0xA7, 0xD9, 0x0B] + noise)
        }
    }

    @Test func theServersAConfigNames() throws {
        let (defaults, problems) = DiscoveryServer.servers(from: ["default"])
        #expect(problems.isEmpty)
        #expect(defaults.map(\.url) == [
            "https://discovery-lookup.syncthing.net:443/v2/", "https://discovery-announce-v4.syncthing.net:443/v2/",
            "https://discovery-announce-v6.syncthing.net:443/v2/",
        ])
        #expect(defaults.map(\.looksUp) == [true, false, false])
        #expect(defaults.map(\.announces) == [false, true, true])
        #expect(defaults.allSatisfy { $0.pinnedID == nil && !$0.insecure })

        let pinned = try DiscoveryServer("https://10.0.0.1:8443/v2/?id=\(Self.id)")
        #expect(pinned.pinnedID == Self.id && pinned.insecure && pinned.announces && pinned.looksUp)
        #expect(pinned.host == "10.0.0.1" && pinned.port == 8443 && pinned.path == "/v2/")
        let v6 = try DiscoveryServer("https://[2001:db8::1]:8443/?insecure&nolookup")
        #expect(v6.host == "2001:db8::1" && v6.insecure && !v6.looksUp && v6.pinnedID == nil)

        let (_, bad) = DiscoveryServer.servers(from: ["http://10.0.0.1:80/", "https://10.0.0.1:8443/?id=NOT-AN-ID", "ftp://x:1/", "nonsense"])
        #expect(bad.count == 4)
    }

    @Test func lookupAnswersAreChecked() throws {
        let good = Array(#"{"seen":"2026-11-24T05:00:00Z","addresses":["tcp://192.0.2.1:22000",7,"relay://192.0.2.2:22067/?id=X"]}"#.utf8)
        #expect(try GlobalDiscovery.addresses(inLookupAnswer: good) == ["tcp://192.0.2.1:22000", "relay://192.0.2.2:22067/?id=X"])
        for garbage in ["", "null", "[1,2]", "{\"addresses\":\"tcp://x:1\"}", "<html>", "{\"seen\":1}"] {
            #expect(throws: (any Error).self) { try GlobalDiscovery.addresses(inLookupAnswer: Array(garbage.utf8)) }
        }
        let many = "{\"addresses\":[" + (0..<500).map { "\"tcp://192.0.2.1:\($0 + 1)\"" }.joined(separator: ",") + "]}"
        #expect(try GlobalDiscovery.addresses(inLookupAnswer: Array(many.utf8)).count == GlobalDiscovery.maximumAddresses)
    }

    @Test func onlyDialableAddressesAreAnnounced() {
        #expect(
            GlobalDiscovery.announceable(["tcp://127.0.0.1:22000", "tcp://0.0.0.0:22000", "tcp://0.0.0.0:0", "tcp://[::1]:1", "tcp://10.0.0.2:22000"])
                == ["tcp://0.0.0.0:22000", "tcp://10.0.0.2:22000"])
    }

    @Test func relayPoolAnswersAndURLs() throws {
        let answer = Array(#"{"relays":[{"url":"relay://192.0.2.1:22067/?id=\#(Self.id)&pingInterval=1m0s"},{"url":"tcp://192.0.2.2:1"},{"nourl":1},"x"]}"#.utf8)
        let relays = try RelayPool.relays(inPoolAnswer: answer)
        #expect(relays.map(\.description) == ["relay://192.0.2.1:22067/?id=\(Self.id)"])
        #expect(throws: (any Error).self) { try RelayPool.relays(inPoolAnswer: Array("<html>".utf8)) }
        let pool = try #require(DiscoveryServer(poolURL: "dynamic+https://relays.syncthing.net/endpoint"))
        #expect(pool.host == "relays.syncthing.net" && pool.port == 443 && pool.path == "/endpoint" && !pool.plainHTTP)
        let plain = try #require(DiscoveryServer(poolURL: "dynamic+http://10.0.0.1:8080/endpoint"))
        #expect(plain.port == 8080 && plain.plainHTTP)
        #expect(DiscoveryServer(poolURL: "relay://x:1/") == nil)
    }
}
