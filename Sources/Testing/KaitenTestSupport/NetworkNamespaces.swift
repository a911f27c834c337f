import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// setns(2): Glibc's module map leaves it out.
@_silgen_name("setns")
private func enterNamespace(_ fd: Int32, _ type: Int32) -> Int32

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
                // The IPv6 link-local address usable at once (no duplicate detection: nothing
                // else is on this link), for local discovery's IPv6 multicast.
                _ = try? ProcessRunner.run(
                    ip, ["netns", "exec", name, "/bin/sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_dad"],
                    environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"])
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

    /// Gives `party` one more address on its network, `x.y.z.host` (another sender on the LAN,
    /// as far as the others can tell); returns it.
    public static func addAddress(host: Int, to party: Party) throws -> String {
        let address = party.address.split(separator: ".").dropLast().joined(separator: ".") + ".\(host)"
        try run(["-n", party.namespace, "addr", "add", "\(address)/24", "dev", "eth0"])
        return address
    }

    /// The command line that runs `executable arguments` inside `party`'s namespace.
    public static func wrap(_ party: Party, _ executable: String, _ arguments: [String]) -> (String, [String]) {
        (ip, ["netns", "exec", party.namespace, executable] + arguments)
    }

    /// Sends UDP datagrams from inside `party`'s namespace (spoofed or broken discovery
    /// packets, say): `packets` in turn, again every `interval`, until ``DatagramSender/stop()``.
    /// A thread of its own does it (setns(2) moves only the calling thread; and it must not
    /// wait on Swift's few cooperative threads, which the tests keep busy), so the packets keep
    /// coming whatever else runs. Throws when the first round cannot be sent.
    public static func sendDatagrams(
        _ packets: [[UInt8]], from party: Party, source: String? = nil, to host: String, port: Int, every interval: TimeInterval
    ) throws -> DatagramSender {
        let sender = DatagramSender()
        let started = DispatchSemaphore(value: 0)
        let thread = Thread {
            var signalled = false
            defer { if !signalled { started.signal() } }
            func fail(_ what: String) { sender.fail("\(what): \(String(cString: strerror(errno)))") }
            if let failed = enter(party) { return fail(failed) }
            let socket = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            guard socket >= 0 else { return fail("socket") }
            defer { close(socket) }
            var on: Int32 = 1
            setsockopt(socket, SOL_SOCKET, SO_BROADCAST, &on, socklen_t(MemoryLayout<Int32>.size))
            if let source {
                // One of the party's extra addresses (``addAddress(_:to:)``): a sender of its own.
                var local = sockaddr_in()
                local.sin_family = sa_family_t(AF_INET)
                guard inet_pton(AF_INET, source, &local.sin_addr) == 1 else { return fail("address \(source)") }
                let bound = withUnsafePointer(to: &local) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                guard bound == 0 else { return fail("bind \(source)") }
            }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { return fail("address \(host)") }
            while !sender.isStopped {
                for packet in packets {
                    // A refusal (nothing listens there yet) is no failure: the next round tries again.
                    _ = withUnsafePointer(to: &address) { pointer in
                        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            sendto(socket, packet, packet.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                        }
                    }
                }
                if !signalled {
                    signalled = true
                    started.signal()
                }
                Thread.sleep(forTimeInterval: interval)
            }
        }
        thread.start()
        started.wait()
        if let failure = sender.failure { throw HarnessError("sending datagrams from \(party.namespace): \(failure)") }
        return sender
    }

    /// A TCP socket listening on `party`'s address and `port`, made inside its namespace (by a
    /// thread of its own, as setns(2) moves only the calling thread): a server in this process
    /// (``ScriptedTLSServer``) serves the namespace through it.
    public static func listeningSocket(in party: Party, port: Int) throws -> CInt {
        let result = NSLock()
        nonisolated(unsafe) var outcome: Result<CInt, HarnessError> = .failure(HarnessError("not run"))
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            defer { done.signal() }
            func fail(_ what: String) { result.withLock { outcome = .failure(HarnessError("\(what): \(String(cString: strerror(errno)))")) } }
            if let failed = enter(party) { return fail(failed) }
            let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { return fail("socket") }
            var yes: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            _ = inet_pton(AF_INET, party.address, &address.sin_addr)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0, listen(fd, 16) == 0 else {
                fail("bind/listen")
                close(fd)
                return
            }
            result.withLock { outcome = .success(fd) }
        }
        thread.start()
        done.wait()
        return try result.withLock { outcome }.get()
    }

    /// Moves the calling thread (only it: setns(2)) into `party`'s network namespace; what
    /// failed, or nil.
    private static func enter(_ party: Party) -> String? {
        let namespace = open("/run/netns/\(party.namespace)", O_RDONLY | O_CLOEXEC)
        guard namespace >= 0 else { return "open /run/netns/\(party.namespace)" }
        defer { close(namespace) }
        return enterNamespace(namespace, 0x4000_0000 /* CLONE_NEWNET */) == 0 ? nil : "setns"
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

/// The sending thread of ``NetworkNamespaces/sendDatagrams(_:from:to:port:every:)``.
public final class DatagramSender: @unchecked Sendable {  // its state behind the lock
    private let lock = NSLock()
    private var stopped = false
    private var problem: String?

    var isStopped: Bool { lock.withLock { stopped } }
    var failure: String? { lock.withLock { problem } }
    func fail(_ why: String) { lock.withLock { problem = why } }

    public func stop() { lock.withLock { stopped = true } }
}
