import Foundation
import KaitenProtocol
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Local discovery (protocol v4) over IPv4 broadcast and IPv6 multicast: announces this device's addresses on the
/// LAN every 30 s, and remembers for 90 s what the peers on the LAN announce, as syncthing does
/// (`lib/discover/local.go`). One job: addresses on the LAN; dialling is the caller's.
///
/// Hearing a device it did not know (or one that restarted) makes it announce at once, and
/// syncthing does the same: so a Kaiten that just started hears its LAN peers within a moment,
/// not after their next 30 s tick — which is what lets a one-shot verb (`index sync`) use local
/// discovery at all.
public final class LocalDiscovery: Sendable {
    public static let interval: Duration = .seconds(30)
    public static let lifetime: Duration = .seconds(90)

    public let me: DeviceID
    public let port: Int
    /// Random per start: peers that see it change announce themselves at once.
    public let instanceID = Int64.random(in: 1...Int64.max)
    /// Whether announcements from the LAN can be heard (the port could be bound).
    public let isListening: Bool

    /// At most this many senders per device and devices in all (a LAN flooding announcements
    /// costs a bounded table, not memory without end); see ``LocalSenders``.
    static let maximumSenders = 8
    static let maximumDevices = 1024

    private struct State {
        var announced: [String] = []
        var senders = LocalSenders(lifetime: LocalDiscovery.lifetime, maximumSenders: LocalDiscovery.maximumSenders, maximumDevices: LocalDiscovery.maximumDevices)
        var subscribers: [UUID: AsyncStream<DeviceID>.Continuation] = [:]
        var warnedAbout: Set<String> = []
        var closed = false
    }

    private let state = Mutex(State())
    private let channel: Channel
    /// IPv6: the socket joined to the multicast group (receiving) and the one sending to it.
    private let multicastReceiver: Channel?
    private let multicastSender: Channel?
    private let group: SocketAddress?
    private let ticks: AsyncStream<Void>.Continuation
    private let tasks = Mutex<[Task<Void, Never>]>([])
    private let logger: Logger
    private let warn: @Sendable (String) -> Void

    /// Starts listening on UDP `port` (SO_REUSEADDR, so that several Kaiten processes on one
    /// machine all hear the LAN) and announcing `addresses` (this device's listen addresses;
    /// empty for a verb that does not listen, which still makes the peers announce themselves).
    /// A port that cannot be bound (a syncthing on this machine holds it without sharing) is
    /// said once; Kaiten then announces from another port and hears nothing.
    ///
    /// With `multicast` (`localAnnounceMCAddr`, `[ff12::8384]:21027`), IPv6 too, as syncthing:
    /// the group joined on every interface that multicasts, and every announcement sent to it
    /// on each of them (hop limit 1: the link only).
    public static func start(
        me: DeviceID, port: Int, multicast: String? = nil, addresses: [String], logger: Logger,
        warn: @escaping @Sendable (String) -> Void, group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> LocalDiscovery {
        let received = Mutex<(@Sendable ([UInt8], SocketAddress) -> Void)?>(nil)
        func bootstrap() -> DatagramBootstrap {
            DatagramBootstrap(group: group)
                .channelOption(.socketOption(.so_reuseaddr), value: 1)
                .channelOption(.socketOption(.so_broadcast), value: 1)
                .channelInitializer { channel in
                    channel.pipeline.addHandler(PacketHandler { bytes, source in received.withLock { $0 }?(bytes, source) })
                }
        }
        let channel: Channel
        let listening: Bool
        do {
            channel = try await bootstrap().bind(host: "0.0.0.0", port: port).get()
            listening = true
        } catch {
            warn(
                "local discovery: cannot listen on UDP port \(port) (\(error)); another program holds it "
                    + "(a syncthing on this machine?): peers on the LAN are announced to but not heard")
            channel = try await bootstrap().bind(host: "0.0.0.0", port: 0).get()
            listening = false
        }
        var receiver6: Channel?
        var sender6: Channel?
        var groupAddress: SocketAddress?
        if let multicast, let (host, groupPort) = Self.hostAndPort(multicast), let address = try? SocketAddress(ipAddress: host, port: groupPort),
            case .v6 = address
        {
            do {
                // Bound to every IPv6 address (a link-scope group cannot be bound to without an
                // interface), IPv6 only (the IPv4 socket hears the broadcasts), joined to the group.
                let receiver = try await bootstrap()
                    .channelOption(ChannelOptions.Types.SocketOption(level: .ipv6, name: .ipv6_v6only), value: 1)
                    .bind(host: "::", port: groupPort).get()
                var joined = 0
                for device in Self.multicastDevices() {
                    if (try? await (receiver as? MulticastChannel)?.joinGroup(address, device: device).get()) != nil { joined += 1 }
                }
                let sender = try await bootstrap().bind(host: "::", port: 0).get()
                _ = try? await (sender as? SocketOptionProvider)?.setIPv6MulticastHops(1).get()
                receiver6 = receiver
                sender6 = sender
                groupAddress = address
                logger.debug("local discovery: IPv6 group \(multicast) joined on \(joined) interfaces")
            } catch {
                logger.debug("local discovery: no IPv6 multicast (\(error)); IPv4 broadcasts only")
            }
        }
        let (ticks, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let discovery = LocalDiscovery(
            me: me, port: port, isListening: listening, channel: channel, multicastReceiver: receiver6, multicastSender: sender6,
            group: groupAddress, ticks: continuation, logger: logger, warn: warn)
        discovery.state.withLock { $0.announced = addresses }
        received.withLock { $0 = { [weak discovery] bytes, source in discovery?.receive(bytes, from: source) } }
        discovery.run(ticks: ticks)
        return discovery
    }

    private init(
        me: DeviceID, port: Int, isListening: Bool, channel: Channel, multicastReceiver: Channel?, multicastSender: Channel?,
        group: SocketAddress?, ticks: AsyncStream<Void>.Continuation, logger: Logger, warn: @escaping @Sendable (String) -> Void
    ) {
        self.multicastReceiver = multicastReceiver
        self.multicastSender = multicastSender
        self.group = group
        self.me = me
        self.port = port
        self.isListening = isListening
        self.channel = channel
        self.ticks = ticks
        self.logger = logger
        self.warn = warn
    }

    private func run(ticks stream: AsyncStream<Void>) {
        let ticks = self.ticks
        ticks.yield()  // the first announcement at once
        let timer = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.interval)
                ticks.yield()
            }
        }
        let sender = Task { [weak self] in
            for await _ in stream {
                guard let self else { return }
                await self.announce()
                // At most one announcement a second, however many new devices speak up (each
                // one heard makes this device announce).
                try? await Task.sleep(for: .seconds(1))
            }
        }
        tasks.withLock { $0 = [timer, sender] }
    }

    /// Changes what this device announces (its listeners are up) and announces it at once.
    public func setAddresses(_ addresses: [String]) {
        state.withLock { $0.announced = addresses }
        ticks.yield()
    }

    /// The addresses `device` announced on the LAN in the last 90 s, dialable as they are.
    public func addresses(of device: DeviceID) -> [String] {
        let now = ContinuousClock.now
        return state.withLock { $0.senders.addresses(of: device, at: now) }
    }

    /// A dial to what `host` announced for `device` met another device, or no TLS.
    public func refute(_ device: DeviceID, host: String) {
        let now = ContinuousClock.now
        state.withLock { $0.senders.refute(device, host: host, at: now) }
    }

    /// A connection with `device` at `host` passed the TLS check: that sender stays reachable
    /// whatever others claiming the device announce (``LocalSenders``).
    public func confirm(_ device: DeviceID, host: String, address: String?) {
        let now = ContinuousClock.now
        state.withLock { $0.senders.confirm(device, host: host, address: address, at: now) }
    }

    /// Waits until `device` has been heard on the LAN, or until `deadline`; its addresses.
    public func addresses(of device: DeviceID, waitingUntil deadline: ContinuousClock.Instant) async -> [String] {
        while true {
            let found = addresses(of: device)
            if !found.isEmpty || ContinuousClock.now >= deadline || !isListening { return found }
            try? await Task.sleep(for: .milliseconds(50))
            if Task.isCancelled { return addresses(of: device) }
        }
    }

    /// Devices heard for the first time (or again after a restart or a silence), from now on.
    public func discoveries() -> AsyncStream<DeviceID> {
        let (stream, continuation) = AsyncStream<DeviceID>.makeStream(bufferingPolicy: .bufferingNewest(64))
        let id = UUID()
        let closed = state.withLock { state in
            if !state.closed { state.subscribers[id] = continuation }
            return state.closed
        }
        if closed { continuation.finish() }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) } }
        return stream
    }

    func receive(_ bytes: [UInt8], from source: SocketAddress) {
        let sourceText = source.ipAddress ?? "?"
        let announcement: LocalAnnouncement
        do {
            announcement = try LocalAnnouncement.decode(bytes)
        } catch {
            let first = state.withLock { $0.warnedAbout.insert(sourceText).inserted }
            if first { warn("local discovery: ignored \(error) from \(sourceText)") }
            return
        }
        guard announcement.device != me, let ip = Self.host(of: source) else { return }
        let addresses = announcement.dialable(source: ip)
        let now = ContinuousClock.now
        let (isNew, subscribers) = state.withLock { state -> (Bool, [AsyncStream<DeviceID>.Continuation]) in
            let heard = state.senders.heard(announcement.device, from: ip, addresses: addresses, instanceID: announcement.instanceID, at: now)
            return (heard == .new, heard == .new ? Array(state.subscribers.values) : [])
        }
        guard isNew else { return }
        logger.debug("local discovery: \(announcement.device.shortDescription) at \(addresses.joined(separator: ", "))")
        // A device new to us may not know us either: announce at once (as syncthing does).
        ticks.yield()
        for subscriber in subscribers { subscriber.yield(announcement.device) }
    }

    /// The sender's address as a host to dial: an IPv6 link-local one with its interface
    /// (`fe80::1%eth0`), which is how it can be dialled.
    static func host(of source: SocketAddress) -> String? {
        guard let ip = source.ipAddress else { return nil }
        if case .v6(let address) = source, address.address.sin6_scope_id != 0, ip.lowercased().hasPrefix("fe80") {
            var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
            if if_indextoname(address.address.sin6_scope_id, &name) != nil { return ip + "%" + String(cString: name) }
        }
        return ip
    }

    /// One announcement to the broadcast address of every IPv4 network this machine is on
    /// (255.255.255.255 when there is none), as syncthing sends it.
    private func announce() async {
        let addresses = state.withLock { $0.announced }
        let packet = LocalAnnouncement(device: me, addresses: addresses, instanceID: instanceID).encoded()
        var sent = 0
        var lastError: Error?
        for target in Self.broadcastTargets() {
            guard let address = try? SocketAddress(ipAddress: target, port: port) else { continue }
            let buffer = channel.allocator.buffer(bytes: packet)
            do {
                try await channel.writeAndFlush(AddressedEnvelope(remoteAddress: address, data: buffer)).get()
                sent += 1
            } catch {
                lastError = error
            }
        }
        if let sender = multicastSender, let group, let options = sender as? SocketOptionProvider {
            for device in Self.multicastDevices() {
                do {
                    try await options.setIPv6MulticastIF(CUnsignedInt(device.interfaceIndex)).get()
                    try await sender.writeAndFlush(AddressedEnvelope(remoteAddress: group, data: sender.allocator.buffer(bytes: packet))).get()
                    sent += 1
                } catch {
                    lastError = error
                }
            }
        }
        if sent == 0, let lastError { logger.debug("local discovery: could not announce: \(lastError)") }
    }

    /// One interface per index that multicasts and has an IPv6 address (loopback left out).
    static func multicastDevices() -> [NIONetworkDevice] {
        var seen: Set<Int> = []
        return ((try? System.enumerateDevices()) ?? []).filter { device in
            guard device.multicastSupported, case .v6 = device.address, device.name != "lo" else { return false }
            return seen.insert(device.interfaceIndex).inserted
        }
    }

    /// `[ff12::8384]:21027` → ("ff12::8384", 21027).
    static func hostAndPort(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65535).contains(port) else {
            return nil
        }
        let host = text[..<colon].trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return host.isEmpty ? nil : (host, port)
    }

    /// The directed broadcast address of each IPv4 network with a global-unicast address
    /// (private ranges included; loopback and link-local not), or 255.255.255.255.
    static func broadcastTargets() -> [String] {
        var targets: [String] = []
        for device in (try? System.enumerateDevices()) ?? [] {
            guard case .v4 = device.address, let ip = device.address?.ipAddress, !ip.hasPrefix("127."), !ip.hasPrefix("169.254."),
                let broadcast = device.broadcastAddress?.ipAddress, !targets.contains(broadcast)
            else { continue }
            targets.append(broadcast)
        }
        return targets.isEmpty ? ["255.255.255.255"] : targets
    }

    public func close() async {
        let subscribers = state.withLock { state -> [AsyncStream<DeviceID>.Continuation] in
            state.closed = true
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        for task in tasks.withLock({ $0 }) { task.cancel() }
        ticks.finish()
        for subscriber in subscribers { subscriber.finish() }
        try? await channel.close()
        try? await multicastReceiver?.close()
        try? await multicastSender?.close()
    }
}

/// Hands each datagram's bytes and source to a closure.
private final class PacketHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let onPacket: @Sendable ([UInt8], SocketAddress) -> Void

    init(_ onPacket: @escaping @Sendable ([UInt8], SocketAddress) -> Void) {
        self.onPacket = onPacket
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        var buffer = envelope.data
        guard buffer.readableBytes <= LocalAnnouncement.maximumSize, let bytes = buffer.readBytes(length: buffer.readableBytes) else { return }
        onPacket(bytes, envelope.remoteAddress)
    }
}
