import KaitenProtocol

/// Who announced each device on the LAN, by sender IP: the table behind local discovery,
/// kept as a value (every decision takes the time as an argument: testable without a socket).
///
/// Anyone on the LAN can send an announcement claiming any device ID. The TLS check by device
/// ID decides who a peer is, so a false claim costs a failed dial; but the table is bounded
/// (a flood would cost memory without end otherwise), and a bound is what an impostor fills
/// to hide the real device. So the dials' outcomes come back to the table:
/// - a sender whose address a verified connection came from is **confirmed**
///   (``confirm(_:host:address:at:)``): never displaced, and dialled first;
/// - a sender whose address answered as another device, or not with TLS, is **refuted**
///   (``refute(_:host:at:)``): dropped, and its announcements ignored for ``refutedFor``, so
///   its slot goes to the next sender heard — the real device among them.
/// An impostor sending from more new source addresses than the dials can refute can still
/// delay a device never heard before until it is reached some other way (a static address,
/// global discovery, or it dialling in); once confirmed, it stays.
struct LocalSenders {
    struct Entry: Equatable {
        var addresses: [String]
        var instanceID: Int64
        var seen: ContinuousClock.Instant
        var confirmed: Bool
    }

    /// What one announcement did.
    enum Heard: Equatable {
        /// A sender not heard lately, or one that restarted (a new instance ID): worth dialling.
        case new
        /// Heard before: its addresses refreshed.
        case again
        /// Not admitted: the table is full of senders that may not be displaced.
        case refused
    }

    let lifetime: Duration
    let maximumSenders: Int
    let maximumDevices: Int
    /// How long a refuted sender is ignored: an announcement interval of syncthing's (a real
    /// device that answered badly while restarting is heard again at its next one).
    let refutedFor: Duration
    /// Refuted senders remembered per device, the most recent kept.
    let maximumRefuted: Int
    private(set) var devices: [DeviceID: [String: Entry]] = [:]
    private var refuted: [DeviceID: [String: ContinuousClock.Instant]] = [:]

    init(
        lifetime: Duration = .seconds(90), maximumSenders: Int = 8, maximumDevices: Int = 1024, refutedFor: Duration = .seconds(30),
        maximumRefuted: Int = 256
    ) {
        self.lifetime = lifetime
        self.maximumSenders = maximumSenders
        self.maximumDevices = maximumDevices
        self.refutedFor = refutedFor
        self.maximumRefuted = maximumRefuted
    }

    private func live(_ device: DeviceID, at now: ContinuousClock.Instant) -> [String: Entry] {
        (devices[device] ?? [:]).filter { now - $0.value.seen < lifetime }
    }

    /// An announcement of `device` from the sender at `ip`.
    mutating func heard(_ device: DeviceID, from ip: String, addresses: [String], instanceID: Int64, at now: ContinuousClock.Instant) -> Heard {
        var senders = live(device, at: now)
        if var old = senders[ip] {
            let restarted = old.instanceID != instanceID
            old.addresses = addresses
            old.instanceID = instanceID
            old.seen = now
            senders[ip] = old
            devices[device] = senders
            return restarted ? .new : .again
        }
        if let at = refuted[device]?[ip], now - at < refutedFor { return .refused }
        // Full: the slots free up as the dials refute their holders.
        if senders.values.count(where: { !$0.confirmed }) >= maximumSenders { return .refused }
        if devices[device] == nil && devices.count >= maximumDevices {
            devices = devices.filter { $0.value.values.contains { now - $0.seen < lifetime } }
            if devices.count >= maximumDevices { return .refused }
        }
        senders[ip] = Entry(addresses: addresses, instanceID: instanceID, seen: now, confirmed: false)
        devices[device] = senders
        return .new
    }

    /// A connection to or from `device` at `host` passed the TLS check: that sender is the
    /// device. Its entry is kept whatever unconfirmed senders announce (made with `address`
    /// when the sender is not in the table).
    mutating func confirm(_ device: DeviceID, host: String, address: String?, at now: ContinuousClock.Instant) {
        var senders = live(device, at: now)
        refuted[device]?[host] = nil
        if senders[host] != nil {
            senders[host]!.confirmed = true
        } else if let address {
            let confirmed = senders.filter(\.value.confirmed)
            if confirmed.count >= maximumSenders, let oldest = confirmed.min(by: { $0.value.seen < $1.value.seen }) {
                senders[oldest.key] = nil
            }
            senders[host] = Entry(addresses: [address], instanceID: 0, seen: now, confirmed: true)
        } else {
            return
        }
        devices[device] = senders
    }

    /// A dial to what the sender at `host` announced for `device` met another device, or no
    /// TLS: it is not the device. Its entry goes, and its announcements are ignored for
    /// ``refutedFor``. A confirmed sender is left alone.
    mutating func refute(_ device: DeviceID, host: String, at now: ContinuousClock.Instant) {
        guard devices[device]?[host]?.confirmed != true else { return }
        devices[device]?[host] = nil
        var hosts = (refuted[device] ?? [:]).filter { now - $0.value < refutedFor }
        hosts[host] = now
        if hosts.count > maximumRefuted, let oldest = hosts.min(by: { $0.value < $1.value }) { hosts[oldest.key] = nil }
        refuted[device] = hosts
        if refuted.count > maximumDevices { refuted = refuted.filter { $0.value.values.contains { now - $0 < refutedFor } } }
    }

    /// The addresses `device` announced lately, confirmed senders first, then the most recent.
    func addresses(of device: DeviceID, at now: ContinuousClock.Instant) -> [String] {
        let ordered = live(device, at: now).values.sorted {
            $0.confirmed != $1.confirmed ? $0.confirmed : $0.seen > $1.seen
        }
        var addresses: [String] = []
        for entry in ordered { for address in entry.addresses where !addresses.contains(address) { addresses.append(address) } }
        return addresses
    }
}
