import Foundation
import KaitenConfig
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Finding peers whose address is `dynamic` (issue 16): local discovery on a LAN and global
/// discovery through Debian's real discovery server, each between network namespaces the test
/// makes (a private bridge, 10.x.y.0/24 addresses that exist only inside them), with a real
/// syncthing in one namespace and Kaiten in another. Nothing reaches beyond those namespaces:
/// every home here names only the test's own discovery server, or has global discovery off.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(6)))
struct DiscoveryInteropTests {
    static let folder = ApplyInteropTests.folder

    /// The namespaces, or nil (and one line saying why) where they cannot be made.
    static func network(_ parties: Int) throws -> NetworkNamespaces {
        if let reason = NetworkNamespaces.unavailableReason {
            // Shown as skipped, never as passed (scripts/test fails a CI run that skips it).
            try Test.cancel("discovery interop \(reason)")
        }
        return try NetworkNamespaces.make(parties: parties)
    }

    /// A Kaiten home made with `--discovery on`, its other options as given.
    struct Home {
        let path: String
        let me: DeviceID
        let party: NetworkNamespaces.Party

        init(_ dir: TemporaryDirectory, party: NetworkNamespaces.Party, options: [(String, String)]) throws {
            path = dir.file("kaiten")
            self.party = party
            let created = try KaitenCLI.run([
                "init", "--home", path, "--name", "k", "--listen", "tcp://0.0.0.0:22000", "--discovery", "on",
            ])
            #expect(created.status == 0, "\(created.stderr)")
            me = try DeviceID(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
            let config = try ConfigFile.load(path: path + "/config.xml")
            for (name, value) in options { config.setOption(name, value) }
            try config.write()
        }

        /// `kaiten ARGS --home HOME` inside the home's namespace.
        @discardableResult
        func kaiten(_ arguments: String...) throws -> ProcessResult {
            let (executable, argv) = NetworkNamespaces.wrap(party, KaitenCLI.executable, arguments + ["--home", path])
            return try ProcessRunner.run(executable, argv, environment: ["PATH": "/usr/bin:/bin", "HOME": NSTemporaryDirectory()])
        }

        /// `kaiten run` inside the namespace, its stderr in `log`.
        func startRun(log: String) throws -> Process {
            let process = Process()
            let (executable, argv) = NetworkNamespaces.wrap(
                party, KaitenCLI.executable, ["run", "--home", path, "--debounce", "0.3", "--apply", "all"])
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = argv
            process.environment = ["PATH": "/usr/bin:/bin", "HOME": NSTemporaryDirectory()]
            _ = FileManager.default.createFile(atPath: log, contents: nil)
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
            process.standardOutput = FileHandle.nullDevice
            try process.runAlone()
            return process
        }
    }

    static func stop(_ process: Process) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        try? process.waitForExit(timeout: 20, what: "kaiten run")
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    static func waitFor(_ what: String, timeout: Double = 60, _ condition: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(250))
        }
        throw HarnessError("timed out waiting: \(what)")
    }

    /// Whether syncthing has a connection to `device`.
    static func connected(_ st: SyncthingInstance, to device: DeviceID) async throws -> Bool {
        let all = try await st.get("/rest/system/connections") as? [String: Any]
        let connection = (all?["connections"] as? [String: Any])?[device.description] as? [String: Any]
        return connection?["connected"] as? Bool ?? false
    }

    // MARK: - Local discovery

    /// A syncthing on one namespace, Kaiten on another, each knowing the other as `dynamic`,
    /// local discovery on both (global off): `peer check` finds the peer on the LAN and says
    /// so, `index sync` and `apply` work through that address, and `kaiten run`'s own
    /// announcement is heard by syncthing, which lists Kaiten's address among what it
    /// discovered.
    @Test func aDynamicPeerIsFoundOnTheLANAndSynced() async throws {
        let net = try Self.network(2)
        defer { net.remove() }
        let (stParty, kParty) = (net.parties[0], net.parties[1])
        let dir = try TemporaryDirectory(prefix: "kaiten-lan")
        defer { dir.remove() }
        let home = try Home(dir, party: kParty, options: [("globalAnnounceEnabled", "false")])
        let local = dir.file("local")
        let peerData = dir.file("peer")
        try TestFiles.write(peerData + "/docs/a.txt", "found on the LAN\n")
        try TestFiles.write(peerData + "/other/b.txt", "not selected\n")
        let st = try SyncthingInstance.generate(in: dir.path, name: "a", party: stParty)
        // IPv4 broadcasts only: syncthing's IPv6 multicasts go to a group Kaiten is not in
        // (the next test has the IPv6 ones alone).
        try st.setOptions([("localAnnounceEnabled", "true"), ("localAnnounceMCAddr", "[ff12::8399]:21027")])
        try await withSyncthing(st) { st in
            try await st.addDevice(home.me, name: "k", addresses: ["dynamic"])
            try await st.addFolder(id: Self.folder, path: peerData, devices: [home.me])
            try await ApplyInteropTests.waitScanned(st, files: 2)
            #expect(try home.kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", "dynamic").status == 0)
            let added = try home.kaiten("folder", "add", Self.folder, "--path", local, "--share", st.deviceID.description)
            #expect(added.status == 0, "\(added.stderr)")

            let check = try home.kaiten("peer", "check")
            #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
            #expect(check.stdout.contains("at tcp://\(stParty.address):22000 (lan)"), "\(check.stdout)")
            let sync = try home.kaiten("index", "sync")
            #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
            #expect(try home.kaiten("select", Self.folder, "docs").status == 0)
            let applied = try home.kaiten("apply", "--yes")
            #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
            #expect(RunInteropTests.content(local + "/docs/a.txt") == "found on the LAN\n")
            #expect(!FileManager.default.fileExists(atPath: local + "/other/b.txt"))

            // The service announces its listener; syncthing hears it and keeps the address.
            let run = try home.startRun(log: dir.file("run.log"))
            defer { Self.stop(run) }
            let expected = "tcp://\(kParty.address):22000"
            try await Self.waitFor("syncthing discovers Kaiten at \(expected)") {
                let discovered = try await st.get("/rest/system/discovery") as? [String: Any]
                let entry = discovered?[home.me.description] as? [String: Any]
                return (entry?["addresses"] as? [String] ?? []).contains(expected)
            }
            try await Self.waitFor("the two connected") { try await Self.connected(st, to: home.me) }
            // A new file on the peer reaches the service over that connection.
            try TestFiles.write(peerData + "/docs/new.txt", "after discovery\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("the new file pulled by the service") {
                RunInteropTests.content(local + "/docs/new.txt") == "after discovery\n"
            }
        }
    }

    /// Local discovery over IPv6 alone: syncthing's IPv4 broadcasts go to another port
    /// (`localAnnouncePort` 21099), so Kaiten hears it only through the multicast group
    /// `[ff12::8384]:21027` (`localAnnounceMCAddr`), and syncthing hears Kaiten there too.
    @Test func aDynamicPeerIsFoundThroughIPv6Multicast() async throws {
        let net = try Self.network(2)
        defer { net.remove() }
        let (stParty, kParty) = (net.parties[0], net.parties[1])
        let dir = try TemporaryDirectory(prefix: "kaiten-lan6")
        defer { dir.remove() }
        let home = try Home(dir, party: kParty, options: [("globalAnnounceEnabled", "false")])
        let st = try SyncthingInstance.generate(in: dir.path, name: "a", party: stParty)
        try st.setOptions([("localAnnounceEnabled", "true"), ("localAnnouncePort", "21099")])
        try await withSyncthing(st) { st in
            try await st.addDevice(home.me, name: "k", addresses: ["dynamic"])
            try await st.addFolder(id: Self.folder, path: dir.file("peer"), devices: [home.me])
            #expect(try home.kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", "dynamic").status == 0)
            #expect(try home.kaiten("folder", "add", Self.folder, "--path", dir.file("local"), "--share", st.deviceID.description).status == 0)
            var check = try home.kaiten("peer", "check")
            // Syncthing's first multicast may precede the link's readiness; its next answers ours.
            let deadline = Date().addingTimeInterval(20)
            while check.status != 0 && Date() < deadline {
                try await Task.sleep(for: .milliseconds(500))
                check = try home.kaiten("peer", "check")
            }
            #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
            // Its link-local address (with the interface, as it must be dialled), or one of the
            // IPv4 addresses its announcement lists.
            #expect(check.stdout.contains("(lan)") && (check.stdout.contains("%eth0]:22000") || check.stdout.contains(stParty.address)), "\(check.stdout)")
        }
    }

    /// The same home with discovery off: a `dynamic` peer is not dialled, and `peer check`
    /// says why and what to do.
    @Test func withDiscoveryOffADynamicPeerIsExplained() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-nodisco")
        defer { dir.remove() }
        let home = dir.file("kaiten")
        #expect(try KaitenCLI.run(["init", "--home", home, "--name", "k", "--listen", "tcp://127.0.0.1:0"]).status == 0)
        let peer = "MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD"
        #expect(try KaitenCLI.run(["peer", "add", peer, "--name", "nas", "--address", "dynamic", "--home", home]).status == 0)
        let check = try KaitenCLI.run(["peer", "check", "--home", home])
        #expect(check.status == 1)
        #expect(check.stdout.contains("discovery is off") && check.stdout.contains("--discovery on"), "\(check.stdout)\(check.stderr)")
    }

    /// A device on the LAN announcing another device's ID (its own listener behind it), and
    /// garbage on the discovery port: the TLS check by device ID decides who a peer is. With
    /// only the impostor heard, `peer check` refuses it and names who answered; with the real
    /// peer up as well, Kaiten reaches the real one while the impostor keeps announcing.
    @Test func aSpoofedAnnouncementDoesNotMakeAnotherDeviceThePeer() async throws {
        let net = try Self.network(3)
        defer { net.remove() }
        let (stParty, impostorParty, kParty) = (net.parties[0], net.parties[1], net.parties[2])
        let dir = try TemporaryDirectory(prefix: "kaiten-spoof")
        defer { dir.remove() }
        let home = try Home(dir, party: kParty, options: [("globalAnnounceEnabled", "false")])
        let st = try SyncthingInstance.generate(in: dir.path, name: "a", party: stParty)
        // IPv4 only, like the impostor's packets (its IPv6 multicasts go to another group).
        try st.setOptions([("localAnnounceEnabled", "true"), ("localAnnounceMCAddr", "[ff12::8399]:21027")])
        let impostor = try SyncthingInstance.generate(in: dir.path, name: "b", party: impostorParty)
        #expect(try home.kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", "dynamic").status == 0)
        #expect(try home.kaiten("folder", "add", Self.folder, "--path", dir.file("local"), "--share", st.deviceID.description).status == 0)

        // The impostor's namespace sends, five times a second, an announcement claiming a's ID
        // (its own address, which the receiver fills in) and three kinds of garbage.
        let claim = LocalAnnouncementBytes.make(device: st.deviceID, addresses: ["tcp://0.0.0.0:22000"])
        let garbage: [[UInt8]] = [[0x2E, 0xA7, 0xD9, 0x0B, 0xFF, 0xFF, 0xFF], [0x7D, 0x79, 0xBC, 0x40, 1, 2], Array("hello".utf8)]
        let spoofer = try NetworkNamespaces.sendDatagrams(
            [claim] + garbage, from: impostorParty, to: kParty.address, port: 21027, every: 0.2)
        defer { spoofer.stop() }

        try await withSyncthing(impostor) { _ in
            let refused = try home.kaiten("peer", "check")
            #expect(refused.status == 1)
            #expect(
                refused.stdout.contains("at tcp://\(impostorParty.address):22000 (lan)")
                    && refused.stdout.contains("the device answering there is \(impostor.deviceID)"), "\(refused.stdout)\(refused.stderr)")
            #expect(refused.stderr.contains("local discovery: ignored"), "garbage is said: \(refused.stderr)")

            try await withSyncthing(st) { st in
                try await st.addDevice(home.me, name: "k", addresses: ["dynamic"])
                try await st.addFolder(id: Self.folder, path: dir.file("peer"), devices: [home.me])
                // The impostor is heard first (five times a second) and found out by the TLS
                // check; the real peer answers each check's own announcement at once (syncthing
                // announces when it hears a new device instance) and is reached within the
                // check's patience: every check, not one in a few.
                for attempt in 1...3 {
                    let check = try home.kaiten("peer", "check")
                    #expect(check.status == 0, "check \(attempt): \(check.stdout)\(check.stderr)")
                    #expect(check.stdout.contains("at tcp://\(stParty.address):22000 (lan)"), "check \(attempt): \(check.stdout)")
                }
            }
        }
    }

    /// An impostor announcing the peer's ID from more source addresses than the table keeps
    /// per device (ten, each pointing at the impostor's own listener), before the real peer is
    /// ever heard: `kaiten run`'s dials refute them one by one, and the real peer is reached at
    /// its next announcement, whatever the impostor keeps sending.
    @Test func moreSpoofedSendersThanTheTableKeepsCannotHideTheRealPeer() async throws {
        let net = try Self.network(3)
        defer { net.remove() }
        let (stParty, impostorParty, kParty) = (net.parties[0], net.parties[1], net.parties[2])
        let dir = try TemporaryDirectory(prefix: "kaiten-spoof-many")
        defer { dir.remove() }
        let home = try Home(dir, party: kParty, options: [("globalAnnounceEnabled", "false")])
        let st = try SyncthingInstance.generate(in: dir.path, name: "a", party: stParty)
        try st.setOptions([("localAnnounceEnabled", "true"), ("localAnnounceMCAddr", "[ff12::8399]:21027")])
        let impostor = try SyncthingInstance.generate(in: dir.path, name: "b", party: impostorParty)
        #expect(try home.kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", "dynamic").status == 0)
        #expect(try home.kaiten("folder", "add", Self.folder, "--path", dir.file("local"), "--share", st.deviceID.description).status == 0)
        let claim = LocalAnnouncementBytes.make(device: st.deviceID, addresses: ["tcp://0.0.0.0:22000"])
        var spoofers: [DatagramSender] = []
        defer { for spoofer in spoofers { spoofer.stop() } }
        for host in 100..<110 {
            let source = try NetworkNamespaces.addAddress(host: host, to: impostorParty)
            spoofers.append(try NetworkNamespaces.sendDatagrams([claim], from: impostorParty, source: source, to: kParty.address, port: 21027, every: 0.2))
        }
        try await withSyncthing(impostor) { _ in
            let log = dir.file("run.log")
            let run = try home.startRun(log: log)
            defer { Self.stop(run) }
            // The slots are full of the impostor's senders before the real peer speaks.
            try await Task.sleep(for: .seconds(2))
            try await withSyncthing(st) { st in
                // The peer cannot dial Kaiten (no address it can reach): Kaiten must find it.
                try await st.addDevice(home.me, name: "k", addresses: ["tcp://127.0.0.1:9"])
                try await st.addFolder(id: Self.folder, path: dir.file("peer"), devices: [home.me])
                let deadline = Date().addingTimeInterval(90)
                var text = ""
                while Date() < deadline {
                    text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                    if text.contains("): connected at \(stParty.address):") { break }
                    try await Task.sleep(for: .milliseconds(500))
                }
                #expect(text.contains("): connected at \(stParty.address):"), "\(text)")
            }
        }
    }

    // MARK: - Relays

    /// The three parties of a relay test, each in its namespace: Debian's relay server, a
    /// syncthing (relays on; listening where `stListen` says, its default otherwise) and a
    /// Kaiten home (relays on, discovery off unless `homeOptions` says; listening where
    /// `kaitenListen` says). Nil, after one line, where the relay server or namespaces are not
    /// to be had. ``remove()`` stops the relay and deletes the rest.
    final class RelayWorld {
        let net: NetworkNamespaces
        let relayParty: NetworkNamespaces.Party
        let stParty: NetworkNamespaces.Party
        let kParty: NetworkNamespaces.Party
        let dir: TemporaryDirectory
        let binary: String
        var relay: RelayServerProcess
        let home: Home
        let st: SyncthingInstance
        var local: String { dir.file("local") }
        var peerData: String { dir.file("peer") }

        static func make(
            _ prefix: String, homeOptions: [(String, String)] = [], kaitenListen: ((RelayServerProcess) -> [String])? = nil,
            stOptions: [(String, String)] = [], stListen: ((RelayServerProcess) -> [String])? = nil
        ) throws -> RelayWorld {
            guard let binary = RelayServerProcess.binary else {
                try Test.cancel("relay interop needs strelaysrv (scripts/test unpacks Debian's syncthing-relaysrv)")
            }
            let net = try DiscoveryInteropTests.network(3)
            do {
                let dir = try TemporaryDirectory(prefix: prefix)
                let relay = try RelayServerProcess.start(binary, in: dir.file("relay"), party: net.parties[0])
                let defaults = [("localAnnounceEnabled", "false"), ("globalAnnounceEnabled", "false"), ("relaysEnabled", "true")]
                let home = try Home(dir, party: net.parties[2], options: defaults + homeOptions)
                if let kaitenListen {
                    let config = try ConfigFile.load(path: home.path + "/config.xml")
                    config.setListenAddresses(kaitenListen(relay))
                    try config.write()
                }
                let st = try SyncthingInstance.generate(in: dir.path, name: "a", party: net.parties[1])
                try st.setOptions([("relaysEnabled", "true")] + stOptions)
                if let stListen {
                    let config = try ConfigFile.load(path: st.home + "/config.xml")
                    config.setListenAddresses(stListen(relay))
                    try config.write()
                }
                return RelayWorld(net: net, dir: dir, binary: binary, relay: relay, home: home, st: st)
            } catch {
                net.remove()
                throw error
            }
        }

        private init(net: NetworkNamespaces, dir: TemporaryDirectory, binary: String, relay: RelayServerProcess, home: Home, st: SyncthingInstance) {
            self.net = net
            (relayParty, stParty, kParty) = (net.parties[0], net.parties[1], net.parties[2])
            self.dir = dir
            self.binary = binary
            self.relay = relay
            self.home = home
            self.st = st
        }

        /// Kaiten knows the peer only as `dynamic` (so it cannot dial it) and shares the
        /// folder with `docs` selected before any index came in; `kaiten run` is started and
        /// this returns once its log says `joined` (a relay that does not know a device makes
        /// syncthing wait ten minutes before asking again, so the join comes first).
        func startRunJoined(_ st: SyncthingInstance, joined: String) async throws -> (run: Process, log: String) {
            #expect(try home.kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", "dynamic").status == 0)
            #expect(try home.kaiten("folder", "add", DiscoveryInteropTests.folder, "--path", local, "--share", st.deviceID.description).status == 0)
            #expect(try home.kaiten("select", DiscoveryInteropTests.folder, "docs", "--force").status == 0)
            let log = dir.file("run.log")
            let run = try home.startRun(log: log)
            do {
                try await DiscoveryInteropTests.waitFor("Kaiten \(joined)") { (RunInteropTests.content(log) ?? "").contains(joined) }
            } catch {
                DiscoveryInteropTests.stop(run)
                throw error
            }
            return (run, log)
        }

        func remove() {
            relay.stop()
            dir.remove()
            net.remove()
        }
    }


    /// Debian's relay server in one namespace; a syncthing that listens only through it (no
    /// TCP listener: it cannot be dialled directly); Kaiten, relays on, with the peer's relay
    /// URI as its address. `peer check` reaches it via the relay, and index sync, apply and
    /// cat work through it, the bytes verified as always.
    @Test func aPeerThatListensOnlyThroughARelayIsReachedThroughIt() async throws {
        let world = try RelayWorld.make("kaiten-relay", stListen: { [$0.uri] })
        defer { world.remove() }
        let (relay, home, st, local, peerData) = (world.relay, world.home, world.st, world.local, world.peerData)
        try TestFiles.write(peerData + "/docs/a.txt", "through the relay\n")
        try TestFiles.random(peerData + "/docs/big.bin", size: 3_000_000)
        try await withSyncthing(st) { st in
            try await st.addDevice(home.me, name: "k", addresses: ["dynamic"])
            try await st.addFolder(id: Self.folder, path: peerData, devices: [home.me])
            try await ApplyInteropTests.waitScanned(st, files: 2)
            #expect(try home.kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", relay.uri).status == 0)
            #expect(try home.kaiten("folder", "add", Self.folder, "--path", local, "--share", st.deviceID.description).status == 0)

            // Syncthing joins the relay when it starts; until then the relay does not know it.
            var check = try home.kaiten("peer", "check")
            let deadline = Date().addingTimeInterval(30)
            while check.status != 0 && Date() < deadline {
                try await Task.sleep(for: .milliseconds(500))
                check = try home.kaiten("peer", "check")
            }
            #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
            #expect(check.stdout.contains("(relay)"), "\(check.stdout)")
            let sync = try home.kaiten("index", "sync")
            #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
            #expect(try home.kaiten("select", Self.folder, "docs").status == 0)
            let applied = try home.kaiten("apply", "--yes")
            #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
            #expect(RunInteropTests.content(local + "/docs/a.txt") == "through the relay\n")
            #expect(ApplyInteropTests.sha(local + "/docs/big.bin") == ApplyInteropTests.sha(peerData + "/docs/big.bin"))
            let cat = try home.kaiten("cat", Self.folder, "docs/a.txt")
            #expect(cat.status == 0 && cat.stdout == "through the relay\n", "\(cat.stdout)\(cat.stderr)")
        }
    }

    /// A relay that goes away in the middle of a pull: apply stops with a line naming the
    /// peer, nothing is left under the file's name, and once the relay is back (same keys,
    /// same address) the next apply completes the file, verified. A relay URI pinned to
    /// another relay's ID is refused, and a relay the peer has not joined is said to be one.
    @Test func aRelayThatDropsMidTransferLosesNothing() async throws {
        // Slow enough (1.5 MiB/s, the private addresses here counting as LAN) that the relay
        // can be stopped well before the end.
        let world = try RelayWorld.make(
            "kaiten-relaydrop", stOptions: [("maxSendKbps", "1536"), ("limitBandwidthInLan", "true")], stListen: { [$0.uri] })
        defer { world.remove() }
        let (home, st, local, peerData) = (world.home, world.st, world.local, world.peerData)
        let (relayParty, kParty) = (world.relayParty, world.kParty)
        let relay = world.relay
        try TestFiles.random(peerData + "/docs/big.bin", size: 12_000_000)
        try await withSyncthing(st) { st in
            try await st.addDevice(home.me, name: "k", addresses: ["dynamic"])
            try await st.addFolder(id: Self.folder, path: peerData, devices: [home.me])
            try await ApplyInteropTests.waitScanned(st, files: 1)

            // Pinned to the wrong relay: refused before anything is said to it.
            let wrong = "relay://\(relayParty.address):22067/?id=MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD"
            #expect(try home.kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", wrong).status == 0)
            let refused = try home.kaiten("peer", "check")
            let relayID = relay.deviceID.shortDescription
            #expect(refused.status == 1)
            #expect(refused.stdout.contains("not the id= in the relay URI (MFZWI3D)"), "\(refused.stdout)\(refused.stderr)")
            #expect(refused.stdout.contains("certificate is device \(relayID)"), "\(refused.stdout)")
            // The right relay, asked for a device that has not joined it.
            #expect(try home.kaiten("peer", "edit", st.deviceID.description, "--address", relay.uri).status == 0)
            #expect(try home.kaiten("folder", "add", Self.folder, "--path", local, "--share", st.deviceID.description).status == 0)
            var sync = try home.kaiten("index", "sync")
            let deadline = Date().addingTimeInterval(30)
            while sync.status != 0 && Date() < deadline {
                try await Task.sleep(for: .milliseconds(500))
                sync = try home.kaiten("index", "sync")
            }
            #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
            #expect(try home.kaiten("select", Self.folder, "docs").status == 0)

            let (executable, argv) = NetworkNamespaces.wrap(kParty, KaitenCLI.executable, ["apply", "--yes", "--home", home.path])
            let apply = Process()
            apply.executableURL = URL(fileURLWithPath: executable)
            apply.arguments = argv
            apply.environment = ["PATH": "/usr/bin:/bin", "HOME": NSTemporaryDirectory()]
            let errors = world.dir.file("apply.err")
            _ = FileManager.default.createFile(atPath: errors, contents: nil)
            apply.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
            apply.standardOutput = FileHandle.nullDevice
            try apply.runAlone()
            // The relay is killed half a second into the pull by a thread of its own: a task
            // could wait seconds for a cooperative thread when other suites keep them busy,
            // and the pull would be over.
            nonisolated(unsafe) let (running, relayServer) = (apply, relay)
            let docs = local + "/docs"
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                Thread {
                    let deadline = Date().addingTimeInterval(60)
                    while Date() < deadline && running.isRunning {
                        let names = (try? FileManager.default.contentsOfDirectory(atPath: docs)) ?? []
                        if names.contains(where: { $0.hasSuffix(".tmp") }) {
                            Thread.sleep(forTimeInterval: 0.5)
                            break
                        }
                        Thread.sleep(forTimeInterval: 0.02)
                    }
                    relayServer.killAbruptly()
                    done.resume()
                }.start()
            }
            try apply.waitForExit(timeout: 60, what: "kaiten apply")
            #expect(apply.terminationStatus != 0, "the pull cannot have finished at 1.5 MiB/s")
            let said = RunInteropTests.content(errors) ?? ""
            #expect(said.contains(st.deviceID.shortDescription) || said.contains("relay"), "\(said)")
            #expect(!FileManager.default.fileExists(atPath: local + "/docs/big.bin"), "nothing under the real name")

            world.relay = try RelayServerProcess.start(world.binary, in: world.dir.file("relay"), party: relayParty)
            // Syncthing rejoins a relay it lost only after a minute's backoff; restarted, it
            // joins at once.
            st.stop()
            try await st.start()
            var again = try home.kaiten("apply", "--yes")
            let until = Date().addingTimeInterval(120)
            while again.status != 0 && Date() < until {
                try await Task.sleep(for: .seconds(1))
                again = try home.kaiten("apply", "--yes")
            }
            #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
            #expect(ApplyInteropTests.sha(local + "/docs/big.bin") == ApplyInteropTests.sha(peerData + "/docs/big.bin"))
        }
    }

    /// The other way round: Kaiten listens only through the relay (its one listen address is
    /// the relay URI, and it cannot dial the peer: `dynamic`, discovery off); syncthing, given
    /// Kaiten's relay URI, connects through the relay, and `kaiten run` pulls the selection
    /// over that connection.
    @Test func kaitenRunIsReachedThroughTheRelayItJoined() async throws {
        // It listens through the relay and on TCP; syncthing is told only the relay at first.
        let world = try RelayWorld.make("kaiten-relayed", kaitenListen: { [$0.uri, "tcp://0.0.0.0:22000"] })
        defer { world.remove() }
        let (relay, home, st, local, peerData, kParty) = (world.relay, world.home, world.st, world.local, world.peerData, world.kParty)
        try TestFiles.write(peerData + "/docs/a.txt", "pulled over a relayed connection\n")
        try await withSyncthing(st) { st in
            try await st.addFolder(id: Self.folder, path: peerData, devices: [])
            try await ApplyInteropTests.waitScanned(st, files: 1)
            let (run, log) = try await world.startRunJoined(st, joined: "joined relay")
            defer { Self.stop(run) }
            try await st.addDevice(home.me, name: "k", addresses: [relay.uri])
            try await st.addFolder(id: Self.folder, path: peerData, devices: [home.me])
            try await Self.waitFor("the selection pulled through the relay", timeout: 90) {
                RunInteropTests.content(local + "/docs/a.txt") == "pulled over a relayed connection\n"
            }
            #expect(try await Self.connectionType(st, home.me).contains("relay"), "\(RunInteropTests.content(log) ?? "")")
            // The service says how the peer is connected.
            try await Self.waitFor("peer ls shows the relayed connection") {
                let listed = try home.kaiten("peer", "ls")
                return listed.stdout.contains("(relay)")
            }

            // Told Kaiten's direct address too, syncthing dials it (a better way than a relay);
            // Kaiten takes the direct connection in place of the relayed one.
            try await st.addDevice(home.me, name: "k", addresses: ["tcp://\(kParty.address):22000", relay.uri])
            try await Self.waitFor("the relayed connection replaced by a direct one", timeout: 90) {
                try await Self.connectionType(st, home.me).hasPrefix("tcp")
            }
            try await Self.waitFor("peer ls shows the direct connection") {
                try home.kaiten("peer", "ls").stdout.contains("(incoming)")
            }
            try TestFiles.write(peerData + "/docs/b.txt", "over the direct connection\n")
            try await ApplyInteropTests.rescan(st)
            try await Self.waitFor("a new file pulled over it") {
                RunInteropTests.content(local + "/docs/b.txt") == "over the direct connection\n"
            }
            #expect(try await Self.connectionType(st, home.me).hasPrefix("tcp"))
        }
    }

    /// A relay pool as a listen address (syncthing's `default` has relays.syncthing.net's; here
    /// a pool endpoint in the relay's namespace lists the test's relay): `kaiten run` fetches the
    /// list, joins the relay and is reached by syncthing through it.
    @Test func kaitenRunJoinsARelayFromAPool() async throws {
        let world = try RelayWorld.make("kaiten-pool")
        defer { world.remove() }
        let (relay, home, st, local, peerData, relayParty) = (world.relay, world.home, world.st, world.local, world.peerData, world.relayParty)
        let list = Array(#"{"relays":[{"url":"relay://\#(relayParty.address):1/?id=NOT-AN-ID"},{"url":"\#(relay.uri)"}]}"#.utf8)
        let pool = try await ScriptedTLSServer(plain: true, socket: NetworkNamespaces.listeningSocket(in: relayParty, port: 8080)) { received in
            guard String(decoding: received, as: UTF8.self).contains("\r\n\r\n") else { return nil }
            return .init(Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(list.count)\r\n\r\n".utf8) + list)
        }
        let config = try ConfigFile.load(path: home.path + "/config.xml")
        config.setListenAddresses(["dynamic+http://\(relayParty.address):8080/endpoint"])
        try config.write()
        try TestFiles.write(peerData + "/docs/a.txt", "through a relay from the pool\n")
        try await withSyncthing(st) { st in
            try await st.addFolder(id: Self.folder, path: peerData, devices: [])
            try await ApplyInteropTests.waitScanned(st, files: 1)
            let (run, _) = try await world.startRunJoined(st, joined: "joined relay \(relayParty.address):22067")
            defer { Self.stop(run) }
            try await st.addDevice(home.me, name: "k", addresses: [relay.uri])
            try await st.addFolder(id: Self.folder, path: peerData, devices: [home.me])
            try await Self.waitFor("the selection pulled through the relay", timeout: 90) {
                RunInteropTests.content(local + "/docs/a.txt") == "through a relay from the pool\n"
            }
        }
        await pool.close()
    }

    /// Kaiten reaches a peer through a relay while nothing better is known, and moves to a
    /// direct connection itself once the peer can be found on the LAN: `kaiten run` tries the
    /// direct addresses of a relayed peer every reconnectionIntervalS (5 s here). Syncthing
    /// cannot dial Kaiten (its listener is on loopback), so the direct connection is Kaiten's.
    @Test func kaitenRunMovesARelayedPeerToADirectConnection() async throws {
        let world = try RelayWorld.make(
            "kaiten-upgrade", homeOptions: [("localAnnounceEnabled", "true"), ("reconnectionIntervalS", "5")],
            kaitenListen: { _ in ["tcp://127.0.0.1:0"] }, stListen: { [$0.uri, "tcp://0.0.0.0:22000"] })
        defer { world.remove() }
        let (relay, home, st, peerData) = (world.relay, world.home, world.st, world.peerData)
        try TestFiles.write(peerData + "/docs/a.txt", "a\n")
        try await withSyncthing(st) { st in
            try await st.addDevice(home.me, name: "k", addresses: ["dynamic"])
            try await st.addFolder(id: Self.folder, path: peerData, devices: [home.me])
            try await ApplyInteropTests.waitScanned(st, files: 1)
            #expect(
                try home.kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", relay.uri, "--address", "dynamic").status == 0)
            #expect(try home.kaiten("folder", "add", Self.folder, "--path", world.dir.file("local"), "--share", st.deviceID.description).status == 0)

            let run = try home.startRun(log: world.dir.file("run.log"))
            defer { Self.stop(run) }
            try await Self.waitFor("connected through the relay", timeout: 60) {
                try await Self.connectionType(st, home.me).contains("relay")
            }
            // Syncthing starts announcing on the LAN; Kaiten hears it and dials it directly.
            var options = try await st.get("/rest/config/options") as? [String: Any] ?? [:]
            options["localAnnounceEnabled"] = true
            try await st.put("/rest/config/options", json: options)
            try await Self.waitFor("the relayed connection replaced by Kaiten's direct one", timeout: 60) {
                try await Self.connectionType(st, home.me) == "tcp-server"
            }
            try await Self.waitFor("peer ls shows it") { try home.kaiten("peer", "ls").stdout.contains("(lan)") }
        }
    }

    /// How syncthing is connected to `device` (`tcp-client`, `relay-server`, …), or "".
    static func connectionType(_ st: SyncthingInstance, _ device: DeviceID) async throws -> String {
        let all = try await st.get("/rest/system/connections") as? [String: Any]
        let connection = (all?["connections"] as? [String: Any])?[device.description] as? [String: Any]
        return connection?["type"] as? String ?? ""
    }

    // MARK: - Global discovery

    /// Debian's discovery server in one namespace, syncthing and Kaiten in two others, each
    /// knowing the other as `dynamic` and only the test's server (pinned by its `id=`): Kaiten
    /// looks syncthing up (`peer check` says `global`), syncs and pulls through that address;
    /// `kaiten run` announces itself, the server answers a lookup of Kaiten with Kaiten's
    /// address, and syncthing finds and connects to it.
    @Test func dynamicPeersFindEachOtherThroughTheDiscoveryServer() async throws {
        guard let binary = DiscoveryServerProcess.binary else {
            try Test.cancel("global discovery interop needs stdiscosrv (scripts/test unpacks Debian's syncthing-discosrv)")
        }
        let net = try Self.network(3)
        defer { net.remove() }
        let (srvParty, stParty, kParty) = (net.parties[0], net.parties[1], net.parties[2])
        let dir = try TemporaryDirectory(prefix: "kaiten-global")
        defer { dir.remove() }
        let server = try DiscoveryServerProcess.start(binary, in: dir.file("disco"), party: srvParty)
        defer { server.stop() }
        let url = "https://\(srvParty.address):8443/v2/?id=\(server.deviceID)"

        let home = try Home(dir, party: kParty, options: [("localAnnounceEnabled", "false"), ("globalAnnounceServer", url)])
        let local = dir.file("local")
        let peerData = dir.file("peer")
        try TestFiles.write(peerData + "/docs/a.txt", "looked up globally\n")
        let st = try SyncthingInstance.generate(in: dir.path, name: "a", party: stParty)
        try st.setOptions([("globalAnnounceEnabled", "true"), ("globalAnnounceServer", url), ("announceLANAddresses", "true")])
        try await withSyncthing(st) { st in
            try await st.addFolder(id: Self.folder, path: peerData, devices: [])
            try await ApplyInteropTests.waitScanned(st, files: 1)
            #expect(try home.kaiten("peer", "add", st.deviceID.description, "--name", "a", "--address", "dynamic").status == 0)
            #expect(try home.kaiten("folder", "add", Self.folder, "--path", local, "--share", st.deviceID.description).status == 0)

            // Syncthing announces 5 s after its start; until then the server does not know it.
            try await Self.waitFor("syncthing announced to the server") {
                server.lookup(st.deviceID, from: kParty).contains("tcp://\(stParty.address):22000")
            }
            // Syncthing learns of Kaiten only now, so that its first lookup finds it (the
            // server asks a client that missed to wait a minute before asking again).
            let run = try home.startRun(log: dir.file("run.log"))
            defer { Self.stop(run) }
            try await Self.waitFor("Kaiten announced to the server") {
                server.lookup(home.me, from: stParty).contains("tcp://\(kParty.address):22000")
            }
            Self.stop(run)

            let check = try home.kaiten("peer", "check")
            #expect(check.stdout.contains("at tcp://\(stParty.address):22000 (global)"), "\(check.stdout)\(check.stderr)")

            try await st.addDevice(home.me, name: "k", addresses: ["dynamic"])
            try await st.addFolder(id: Self.folder, path: peerData, devices: [home.me])
            let sync = try home.kaiten("index", "sync")
            #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
            #expect(try home.kaiten("select", Self.folder, "docs").status == 0)
            let applied = try home.kaiten("apply", "--yes")
            #expect(applied.status == 0, "\(applied.stdout)\(applied.stderr)")
            #expect(RunInteropTests.content(local + "/docs/a.txt") == "looked up globally\n")

            let again = try home.startRun(log: dir.file("run2.log"))
            defer { Self.stop(again) }
            try await Self.waitFor("the two connected", timeout: 90) { try await Self.connected(st, to: home.me) }
        }
    }

    /// A discovery server pinned by the wrong `id=`: Kaiten refuses it and says so; the peer
    /// is reported unreachable, nothing crashes.
    @Test func aDiscoveryServerWithTheWrongCertificateIsRefused() async throws {
        guard let binary = DiscoveryServerProcess.binary else {
            try Test.cancel("global discovery interop needs stdiscosrv (scripts/test unpacks Debian's syncthing-discosrv)")
        }
        let net = try Self.network(2)
        defer { net.remove() }
        let dir = try TemporaryDirectory(prefix: "kaiten-pin")
        defer { dir.remove() }
        let server = try DiscoveryServerProcess.start(binary, in: dir.file("disco"), party: net.parties[0])
        defer { server.stop() }
        let wrong = "MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD"
        let url = "https://\(net.parties[0].address):8443/v2/?id=\(wrong)"
        let home = try Home(dir, party: net.parties[1], options: [("localAnnounceEnabled", "false"), ("globalAnnounceServer", url)])
        #expect(try home.kaiten("peer", "add", server.deviceID.description, "--name", "x", "--address", "dynamic").status == 0)
        let check = try home.kaiten("peer", "check")
        #expect(check.status == 1)
        #expect(check.stderr.contains("not the id= in config.xml"), "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("its address is `dynamic`"), "\(check.stdout)")
    }
}

/// Debian's `strelaysrv` in a namespace, private (`-pools=""`: it joins no public pool): it
/// makes its keys on first start; its device ID is what a relay URI's `?id=` pins.
struct RelayServerProcess {
    let process: Process
    let deviceID: DeviceID
    let uri: String

    /// `$KAITEN_STRELAYSRV` (scripts/test sets it), or an installed one.
    static var binary: String? {
        let candidates = [ProcessInfo.processInfo.environment["KAITEN_STRELAYSRV"] ?? "", "/usr/bin/strelaysrv"]
        return candidates.first { !$0.isEmpty && FileManager.default.isExecutableFile(atPath: $0) }
    }

    static func start(_ binary: String, in directory: String, party: NetworkNamespaces.Party) throws -> RelayServerProcess {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let process = Process()
        let (executable, argv) = NetworkNamespaces.wrap(
            party, binary, ["-listen", "\(party.address):22067", "-keys", directory, "-pools=", "-status-srv=", "-nat=false"])
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = argv
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        _ = FileManager.default.createFile(atPath: directory + "/log", contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/log"))
        process.standardOutput = log
        process.standardError = log
        try process.runAlone()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, process.isRunning {
            if let text = try? String(contentsOfFile: directory + "/log", encoding: .utf8), text.contains("URI:"),
                let id = try? Identity.deviceID(certificatePath: directory + "/cert.pem")
            {
                return RelayServerProcess(process: process, deviceID: id, uri: "relay://\(party.address):22067/?id=\(id)")
            }
            usleep(100_000)
        }
        let text = (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? ""
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        throw HarnessError("strelaysrv did not come up:\n\(text)")
    }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        try? process.waitForExit(timeout: 10, what: "strelaysrv")
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// Gone at once, every connection through it cut (SIGKILL).
    func killAbruptly() {
        guard process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        try? process.waitForExit(timeout: 10, what: "strelaysrv")
    }
}

/// A local discovery packet as syncthing writes it, built here by hand (the magic, then the
/// Announce fields), so that a test can claim any device ID.
enum LocalAnnouncementBytes {
    static func make(device: DeviceID, addresses: [String], instance: UInt8 = 7) -> [UInt8] {
        var bytes: [UInt8] = [0x2E, 0xA7, 0xD9, 0x0B, 0x0A, 0x20] + device.bytes
        for address in addresses { bytes += [0x12, UInt8(address.utf8.count)] + Array(address.utf8) }
        return bytes + [0x18, instance]
    }
}

/// Debian's `stdiscosrv` in a namespace: it makes its own certificate on first start; its
/// device ID is what `?id=` pins.
struct DiscoveryServerProcess {
    let process: Process
    let deviceID: DeviceID
    let party: NetworkNamespaces.Party
    let directory: String

    /// `$KAITEN_STDISCOSRV` (scripts/test sets it), or an installed one.
    static var binary: String? {
        let candidates = [ProcessInfo.processInfo.environment["KAITEN_STDISCOSRV"] ?? "", "/usr/bin/stdiscosrv"]
        return candidates.first { !$0.isEmpty && FileManager.default.isExecutableFile(atPath: $0) }
    }

    static func start(_ binary: String, in directory: String, party: NetworkNamespaces.Party) throws -> DiscoveryServerProcess {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let process = Process()
        let (executable, argv) = NetworkNamespaces.wrap(
            party, binary,
            ["-listen", "\(party.address):8443", "-cert", directory + "/cert.pem", "-key", directory + "/key.pem", "-db-dir", directory + "/db"])
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = argv
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        _ = FileManager.default.createFile(atPath: directory + "/log", contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/log"))
        process.standardOutput = log
        process.standardError = log
        try process.runAlone()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if let text = try? String(contentsOfFile: directory + "/log", encoding: .utf8), text.contains("Server device ID is"),
                let id = try? Identity.deviceID(certificatePath: directory + "/cert.pem")
            {
                let server = DiscoveryServerProcess(process: process, deviceID: id, party: party, directory: directory)
                // Listening once it answers its /ping.
                while Date() < deadline {
                    if server.ping() { return server }
                    usleep(100_000)
                }
            }
            if !process.isRunning { break }
            usleep(100_000)
        }
        let log_ = (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? ""
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        throw HarnessError("stdiscosrv did not come up:\n\(log_)")
    }

    func ping() -> Bool {
        let (executable, argv) = NetworkNamespaces.wrap(
            party, "/usr/bin/curl", ["-sk", "-o", "/dev/null", "-w", "%{http_code}", "https://\(party.address):8443/ping"])
        return (try? ProcessRunner.run(executable, argv, environment: ["PATH": "/usr/bin:/bin"]).stdout) == "204"
    }

    /// The addresses the server gives for `device`, asked from `from`'s namespace.
    func lookup(_ device: DeviceID, from: NetworkNamespaces.Party) -> [String] {
        let (executable, argv) = NetworkNamespaces.wrap(
            from, "/usr/bin/curl", ["-sk", "https://\(party.address):8443/v2/?device=\(device.description)"])
        guard let out = try? ProcessRunner.run(executable, argv, environment: ["PATH": "/usr/bin:/bin"]).stdout,
            let object = try? JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any]
        else { return [] }
        return object["addresses"] as? [String] ?? []
    }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        try? process.waitForExit(timeout: 10, what: "stdiscosrv")
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}
