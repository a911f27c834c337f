import Foundation

/// A private network for a test, made of Linux network namespaces: one namespace per party
/// (a syncthing, a Kaiten, a discovery server), each with a veth link into a bridge that lives
/// in a namespace of its own. The addresses (10.x.y.0/24, x and y random) exist only inside
/// these namespaces; nothing is added to the machine's own network, and ``remove()`` deletes
/// every namespace (which deletes their links). Needs root (CAP_SYS_ADMIN): ``make(parties:)``
/// says why it cannot, and the test skips with that line.
public final class NetworkNamespaces: @unchecked Sendable {
    /// One party: its namespace and its address on the private network.
    public struct Party: Sendable {
        public let namespace: String
        public let address: String
        /// The network's broadcast address (x.y.z.255).
        public let broadcast: String
    }

    public let parties: [Party]
    private let names: [String]
    private static let ip = "/usr/sbin/ip"
    private static let counter = NSLock()
    nonisolated(unsafe) private static var made = 0

    private init(parties: [Party], names: [String]) {
        self.parties = parties
        self.names = names
    }

    /// Why namespaces cannot be made here (not root, no `ip`), or nil when they can.
    public static var unavailableReason: String? {
        if getuid() != 0 { return "needs root to create network namespaces (CI runs as root)" }
        if !FileManager.default.isExecutableFile(atPath: ip) { return "needs \(ip) (iproute2) to create network namespaces" }
        return nil
    }

    /// Makes `count` parties joined by one bridge.
    public static func make(parties count: Int) throws -> NetworkNamespaces {
        if let reason = unavailableReason { throw HarnessError(reason) }
        let serial: Int = counter.withLock {
            made += 1
            return made
        }
        let tag = "kt\(getpid() % 100_000)x\(serial)"
        let subnet = "10.\(Int.random(in: 64...250)).\(Int.random(in: 1...250))"
        let bridge = "\(tag)-sw"
        var names = [bridge]
        var parties: [Party] = []
        do {
            try run(["netns", "add", bridge])
            try run(["-n", bridge, "link", "add", "br0", "type", "bridge"])
            try run(["-n", bridge, "link", "set", "br0", "up"])
            for index in 0..<count {
                let name = "\(tag)-\(index)"
                try run(["netns", "add", name])
                names.append(name)
                try run(["-n", bridge, "link", "add", "p\(index)", "type", "veth", "peer", "name", "eth0", "netns", name])
                try run(["-n", bridge, "link", "set", "p\(index)", "master", "br0", "up"])
                let address = "\(subnet).\(index + 2)"
                try run(["-n", name, "addr", "add", "\(address)/24", "brd", "+", "dev", "eth0"])
                try run(["-n", name, "link", "set", "eth0", "up"])
                try run(["-n", name, "link", "set", "lo", "up"])
                parties.append(Party(namespace: name, address: address, broadcast: "\(subnet).255"))
            }
        } catch {
            NetworkNamespaces(parties: [], names: names).remove()
            throw error
        }
        return NetworkNamespaces(parties: parties, names: names)
    }

    /// The command line that runs `executable arguments` inside `party`'s namespace.
    public static func wrap(_ party: Party, _ executable: String, _ arguments: [String]) -> (String, [String]) {
        (ip, ["netns", "exec", party.namespace, executable] + arguments)
    }

    /// Deletes every namespace (and with them the links and the bridge).
    public func remove() {
        for name in names.reversed() { _ = try? Self.run(["netns", "del", name]) }
    }

    @discardableResult
    static func run(_ arguments: [String]) throws -> ProcessResult {
        let result = try ProcessRunner.run(ip, arguments, environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"])
        guard result.status == 0 else {
            throw HarnessError("ip \(arguments.joined(separator: " ")) failed: \(result.stderr)")
        }
        return result
    }
}
