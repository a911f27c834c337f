import KaitenProtocol
import Testing

@testable import KaitenDiscovery

/// The local-discovery table against an impostor claiming a device's ID from many source
/// addresses (issue 42, item 3): the real device stays reachable.
@Suite(.timeLimit(.minutes(5)))
struct LocalSendersTests {
    static let device = try! DeviceID("P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2")
    static let real = "tcp://192.168.1.20:22000"
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int(seconds * 1000)) }

    /// Twelve impostor senders, each announcing five times a second from `from` to `to` seconds.
    func flood(_ table: inout LocalSenders, senders: Range<Int>, from: Double, to: Double) {
        var t = from
        while t < to {
            for i in senders {
                _ = table.heard(Self.device, from: "10.0.0.\(i)", addresses: ["tcp://10.0.0.\(i):22000"], instanceID: 7, at: at(t))
            }
            t += 0.2
        }
    }

    /// What the service's dials report back: each unconfirmed sender's address answered as
    /// another device (the impostor's own listener), so it is refuted.
    func dialAll(_ table: inout LocalSenders, at t: Double) {
        for (host, entry) in table.devices[Self.device] ?? [:] where !entry.confirmed { table.refute(Self.device, host: host, at: at(t)) }
    }

    @Test func twelveImpostorSendersCannotHideTheRealDevice() {
        var table = LocalSenders()
        flood(&table, senders: 1..<13, from: 0, to: 5)
        #expect(table.addresses(of: Self.device, at: at(5)).count == 8, "bounded")
        // The slots are full: the real device's first announcement waits...
        #expect(table.heard(Self.device, from: "192.168.1.20", addresses: [Self.real], instanceID: 1, at: at(5)) == .refused)
        // ...while the dials refute the slots' holders, and then the rest of the impostor's.
        dialAll(&table, at: 6)
        flood(&table, senders: 1..<13, from: 6, to: 8)
        dialAll(&table, at: 8)
        flood(&table, senders: 1..<13, from: 8, to: 30)
        #expect(table.addresses(of: Self.device, at: at(30)).isEmpty, "every impostor sender refuted and ignored")
        // Its next announcement is heard, its dial verifies it, and it stays first and kept
        // whatever the impostor sends, from old or new addresses.
        #expect(table.heard(Self.device, from: "192.168.1.20", addresses: [Self.real], instanceID: 1, at: at(30)) == .new)
        table.confirm(Self.device, host: "192.168.1.20", address: nil, at: at(30.5))
        for t in stride(from: 31.0, to: 120, by: 30) {
            flood(&table, senders: 1..<60, from: t, to: t + 1)
            _ = table.heard(Self.device, from: "192.168.1.20", addresses: [Self.real], instanceID: 1, at: at(t + 1))
            dialAll(&table, at: t + 2)
            #expect(table.addresses(of: Self.device, at: at(t + 2)).first == Self.real)
        }
    }

    @Test func aConfirmedSenderIsNeverRefutedAndNewSendersNeverGrowTheTable() {
        var table = LocalSenders()
        _ = table.heard(Self.device, from: "192.168.1.20", addresses: [Self.real], instanceID: 1, at: at(0))
        table.confirm(Self.device, host: "192.168.1.20", address: nil, at: at(0))
        table.refute(Self.device, host: "192.168.1.20", at: at(1))
        #expect(table.addresses(of: Self.device, at: at(1)) == [Self.real])
        flood(&table, senders: 1..<200, from: 1, to: 2)
        #expect((table.devices[Self.device]?.count ?? 0) <= 9, "eight unconfirmed slots and the confirmed one")
    }

    @Test func aRefutedSenderIsHeardAgainAfterAnInterval() {
        var table = LocalSenders()
        _ = table.heard(Self.device, from: "10.0.0.1", addresses: ["tcp://10.0.0.1:22000"], instanceID: 7, at: at(0))
        table.refute(Self.device, host: "10.0.0.1", at: at(1))
        #expect(table.heard(Self.device, from: "10.0.0.1", addresses: ["tcp://10.0.0.1:22000"], instanceID: 7, at: at(20)) == .refused)
        // A real device that answered badly while restarting is not shut out for long.
        #expect(table.heard(Self.device, from: "10.0.0.1", addresses: ["tcp://10.0.0.1:22000"], instanceID: 8, at: at(32)) == .new)
    }

    @Test func aSenderRestartingIsNewAndSilentOnesExpire() {
        var table = LocalSenders()
        #expect(table.heard(Self.device, from: "192.168.1.20", addresses: [Self.real], instanceID: 1, at: at(0)) == .new)
        #expect(table.heard(Self.device, from: "192.168.1.20", addresses: [Self.real], instanceID: 1, at: at(30)) == .again)
        #expect(table.heard(Self.device, from: "192.168.1.20", addresses: [Self.real], instanceID: 2, at: at(31)) == .new)
        #expect(table.addresses(of: Self.device, at: at(200)).isEmpty)
    }
}
