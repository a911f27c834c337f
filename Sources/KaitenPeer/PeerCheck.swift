import KaitenConfig
import KaitenProtocol
import Logging

/// `kaiten peer check`: can we reach each peer, do both sides know each other, and which
/// folders does each side share?
public enum PeerCheck {
    /// The outcome for one peer.
    public struct Result: Sendable, Codable {
        public var deviceID: String
        public var name: String
        public var address: String?
        /// How the peer was reached: `static` (config.xml), `lan`, `global`, `relay`.
        public var reachedVia: String?
        public var ok: Bool
        /// Why the check failed; nil when `ok`.
        public var problem: String?
        public var remoteName: String?
        public var clientName: String?
        public var clientVersion: String?
        /// How many connections the peer asks for in its Hello (1.25+; 0 when it does not say).
        /// Kaiten keeps one: a peer that asks for more settles for one with a device that does.
        public var connectionsWanted: Int?
        /// Folders both sides share with each other.
        public var sharedBothWays: [String] = []
        /// Folders this device shares with the peer, which the peer does not share back.
        public var sharedOnlyHere: [String] = []
        /// Folders the peer shares with this device, which this device does not have.
        public var offeredByPeer: [String] = []
        /// Folders the peer shares but has paused (or not started yet).
        public var pausedByPeer: [String] = []

        /// snake_case, as every JSON Kaiten prints.
        enum CodingKeys: String, CodingKey {
            case deviceID = "device_id", name, address, reachedVia = "reached_via", ok, problem, remoteName = "remote_name"
            case clientName = "client_name", clientVersion = "client_version", connectionsWanted = "connections_wanted"
            case sharedBothWays = "shared_both_ways", sharedOnlyHere = "shared_only_here", offeredByPeer = "offered_by_peer"
            case pausedByPeer = "paused_by_peer"
        }
    }

    /// Checks one peer, or every configured peer when `only` is nil.
    /// - Parameter addresses: where to dial each peer (config.xml's addresses, or discovery).
    public static func run(
        home: KaitenHome, only: DeviceID?, timeout: Double = 10, addresses: PeerAddressBook = ConfiguredAddresses(),
        logger: Logger = Logger(label: "kaiten.peer")
    ) async throws -> [Result] {
        let me = home.identity.deviceID
        let devices = home.config.devices.filter { $0.id != me && (only == nil || $0.id == only) }
        if let only, devices.isEmpty {
            throw ConfigError(.unknownDevice, file: home.config.path, "device \(only) is not configured")
        }
        let folders = home.config.folders
        let indexIDs = try LocalIndexIDs(home: home.home).ids(for: folders.map(\.id))
        let hello = KaitenVersion.hello(deviceName: home.config.device(id: me)?.name ?? "")

        var results: [Result] = []
        for device in devices {
            // Folders shared with it encrypted are offered with their token, as a session would.
            let sealed = try SealedFolders.exchanges(for: device.id, in: folders)
            let clusterConfig = ClusterConfigBuilder.make(
                folders: folders, devices: home.config.devices, me: me, peer: device.id, localIndexIDs: indexIDs, sealed: sealed,
                held: try SealedFolders.held(for: device.id, in: folders))
            results.append(
                await check(
                    device: device, me: me, identity: home.identity, hello: hello, clusterConfig: clusterConfig,
                    ourFolders: Set(folders.filter { $0.isShared(with: device.id) }.map(\.id)),
                    timeout: timeout, addresses: addresses, logger: logger))
        }
        return results
    }

    static func check(
        device: DeviceConfiguration, me: DeviceID, identity: Identity, hello: BEPHello, clusterConfig: BEPClusterConfig,
        ourFolders: Set<String>, timeout: Double, addresses book: PeerAddressBook, logger: Logger
    ) async -> Result {
        var result = Result(deviceID: device.id.description, name: device.name, ok: false)
        let routes = await book.routes(for: device)
        guard !routes.isEmpty else {
            result.problem = book.whyNoRoute(for: device)
            return result
        }
        var connection: PeerConnection?
        var lastError = ""
        var pending = routes
        var refuted: Set<PeerAddress> = []
        while connection == nil && !pending.isEmpty {
            for route in pending {
                let address = route.address
                result.address = address.description
                result.reachedVia = route.how
                do {
                    var settings = PeerSettings()
                    settings.helloTimeout = timeout
                    connection = try await PeerDialer.connect(
                        to: address, expecting: device.id, identity: identity, hello: hello, settings: settings,
                        logger: logger)
                    break
                } catch let error as PeerError {
                    lastError = error.reason
                    if route.source == .lan, error.code == .unexpectedDevice || error.code == .tlsRefused {
                        book.refute(device.id, host: address.host)
                        refuted.insert(address)
                    }
                } catch {
                    lastError = "\(error)"
                }
            }
            pending = connection == nil ? await book.routes(afterRefuting: refuted, tried: pending, device: device) : []
        }
        guard let connection else {
            result.problem = lastError
            return result
        }
        result.remoteName = connection.hello.deviceName
        result.clientName = connection.hello.clientName
        result.clientVersion = connection.hello.clientVersion
        result.connectionsWanted = Int(connection.hello.numConnections)
        // A peer that does not know us hangs up right after its Hello, possibly before this
        // write lands; the events below say what happened either way.
        try? await connection.sendClusterConfig(clusterConfig)
        let theirs = await firstClusterConfig(from: connection, timeout: timeout)
        await connection.close(reason: "kaiten peer check done")
        guard case .success(let remote) = theirs else {
            if case .failure(let why) = theirs { result.problem = why.reason }
            return result
        }
        var offered = Set<String>()
        var paused = Set<String>()
        for folder in remote.folders where folder.devices.contains(where: { $0.id.elementsEqual(me.bytes) }) {
            offered.insert(folder.id)
            if folder.paused { paused.insert(folder.id) }
        }
        result.sharedBothWays = ourFolders.intersection(offered).sorted()
        result.sharedOnlyHere = ourFolders.subtracting(offered).sorted()
        result.offeredByPeer = offered.subtracting(ourFolders).sorted()
        result.pausedByPeer = paused.intersection(ourFolders).sorted()
        if !result.sharedOnlyHere.isEmpty {
            result.problem =
                "not shared by the peer: \(result.sharedOnlyHere.joined(separator: ", ")) (share it with this device on the peer)"
        } else {
            result.ok = true
        }
        return result
    }

    private struct Failure: Error { let reason: String }

    private static func firstClusterConfig(from connection: PeerConnection, timeout: Double) async -> Swift.Result<
        BEPClusterConfig, Failure
    > {
        let timer = Task {
            try await Task.sleep(nanoseconds: UInt64(timeout * 1_000_000_000))
            await connection.close(reason: "no ClusterConfig within \(Int(timeout)) s")
        }
        defer { timer.cancel() }
        for await event in connection.events {
            switch event {
            case .clusterConfig(let clusterConfig):
                // A secondary connection's ClusterConfig (1.25+) lists no folders; wait for the real one.
                if clusterConfig.secondary { continue }
                return .success(clusterConfig)
            case .closed(let reason):
                switch reason {
                case .byUs(let text): return .failure(Failure(reason: text))
                default:
                    return .failure(
                        Failure(
                            reason:
                                "the peer closed the connection right after the Hello (\(reason)): it does not know this device, or refused it; add this device's ID there"
                        ))
                }
            case .index:
                continue
            }
        }
        return .failure(Failure(reason: "connection ended"))
    }
}

/// What Kaiten calls itself in its Hello.
public enum KaitenVersion {
    public static let clientName = "kaiten"
    public static let current = "v0.1.0"

    /// The Hello Kaiten sends: our name as configured, client `kaiten`, our version.
    public static func hello(deviceName: String) -> BEPHello {
        var hello = BEPHello()
        hello.deviceName = deviceName
        hello.clientName = clientName
        hello.clientVersion = current
        return hello
    }
}
