import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// Discovery servers and relays that lie (issue 16, part 5), played by scripted TLS servers on
/// 127.0.0.1: no crash, a line naming what was wrong, and the peer reached another way or
/// reported unreachable.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(3)))
struct DiscoveryBadInputTests {
    static func home(_ dir: TemporaryDirectory, options: [(String, String)]) throws -> (path: String, me: DeviceID) {
        let path = dir.file("kaiten")
        let created = try KaitenCLI.run(["init", "--home", path, "--name", "k", "--listen", "tcp://127.0.0.1:0"])
        #expect(created.status == 0, "\(created.stderr)")
        let config = try ConfigFile.load(path: path + "/config.xml")
        for (name, value) in options { config.setOption(name, value) }
        try config.write()
        return (path, try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    /// A discovery server answering every lookup with garbage: the peer with only `dynamic`
    /// is reported unreachable and the answer is named; with a static address as well, the
    /// peer is reached through it.
    @Test func aDiscoveryServerAnsweringGarbage() async throws {
        let body = Array("{garbage!".utf8)
        let server = try await ScriptedTLSServer { received in
            guard String(decoding: received, as: UTF8.self).contains("\r\n\r\n") else { return nil }
            return .init(Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8) + body)
        }
        let dir = try TemporaryDirectory(prefix: "kaiten-badlookup")
        defer { dir.remove() }
        let url = "https://127.0.0.1:\(server.port)/v2/?id=\(server.identity.deviceID)"
        let (home, me) = try Self.home(dir, options: [
            ("globalAnnounceEnabled", "true"), ("localAnnounceEnabled", "false"), ("globalAnnounceServer", url),
        ])
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try await withSyncthing(st) { st in
            try await st.addDevice(me, name: "k")
            #expect(try KaitenCLI.run(["peer", "add", st.deviceID.description, "--name", "a", "--address", "dynamic", "--home", home]).status == 0)
            let unreachable = try KaitenCLI.run(["peer", "check", "--home", home])
            #expect(unreachable.status == 1)
            #expect(unreachable.stderr.contains("the answer is not a JSON object"), "\(unreachable.stderr)")
            #expect(unreachable.stdout.contains("its address is `dynamic`"), "\(unreachable.stdout)")

            #expect(
                try KaitenCLI.run(["peer", "edit", st.deviceID.description, "--address", st.address, "--address", "dynamic", "--home", home])
                    .status == 0)
            let reached = try KaitenCLI.run(["peer", "check", "--home", home])
            #expect(reached.status == 0, "\(reached.stdout)\(reached.stderr)")
            #expect(reached.stdout.contains("at \(st.address) (static)"), "\(reached.stdout)")
        }
        await server.close()
    }

    /// A relay that invites Kaiten to a session with some other device, and one that does not
    /// speak the relay protocol at all: each is named, and the peer reported unreachable.
    @Test func aRelayThatLiesAboutTheSession() async throws {
        let someoneElse = (0..<32).map { _ in UInt8.random(in: 0...255) }
        let liar = try await ScriptedTLSServer(alpn: ["bep-relay"]) { received in
            // A whole ConnectRequest (12-byte header, type 5, a 32-byte ID): invite to another's session.
            guard received.count >= 12 + 36, received[7] == 5 else { return nil }
            var invitation: [UInt8] = [0x9E, 0x79, 0xBC, 0x40, 0, 0, 0, 6, 0, 0, 0, 88]
            invitation += [0, 0, 0, 32] + someoneElse + [0, 0, 0, 32] + Array(repeating: 7, count: 32)
            invitation += [0, 0, 0, 4, 127, 0, 0, 1] + [0, 0, 0, 1] + [0, 0, 0, 0]
            return .init(invitation)
        }
        let babbler = try await ScriptedTLSServer(alpn: ["bep-relay"]) { received in
            received.count >= 12 ? .init(Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8)) : nil
        }
        let dir = try TemporaryDirectory(prefix: "kaiten-badrelay")
        defer { dir.remove() }
        let (home, _) = try Self.home(dir, options: [("relaysEnabled", "true")])
        let peer = "MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD"
        let lying = "relay://127.0.0.1:\(liar.port)/?id=\(liar.identity.deviceID)"
        #expect(try KaitenCLI.run(["peer", "add", peer, "--name", "p", "--address", lying, "--home", home]).status == 0)
        let invited = try KaitenCLI.run(["peer", "check", "--home", home])
        #expect(invited.status == 1)
        #expect(invited.stdout.contains("the relay's invitation is not for a session with this peer"), "\(invited.stdout)\(invited.stderr)")

        let babbling = "relay://127.0.0.1:\(babbler.port)/?id=\(babbler.identity.deviceID)"
        #expect(try KaitenCLI.run(["peer", "edit", peer, "--address", babbling, "--home", home]).status == 0)
        let garbled = try KaitenCLI.run(["peer", "check", "--home", home])
        #expect(garbled.status == 1)
        #expect(garbled.stdout.contains("not the relay protocol"), "\(garbled.stdout)\(garbled.stderr)")
        await liar.close()
        await babbler.close()
    }
}
