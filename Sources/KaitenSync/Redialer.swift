import KaitenProtocol
import Synchronization

/// What the redialer works on: the peers' connections as a registry keeps them, and a way to
/// dial. ``PeerSessions`` is one; a test gives a fake and no socket.
protocol RedialTarget: Sendable {
    /// The peers with an open connection, and whether each goes through a relay.
    func connectedPeers() -> [DeviceID: Bool]
    /// Why `device`'s last connection ended, once (nil after it was taken, or if none ended).
    func takeLossReason(_ device: DeviceID) -> String?
    /// Dials `devices` (one at a time with the other exchanges); the problem of each not reached.
    /// With `directOnly`, relays are not tried (a relayed connection being upgraded).
    func dialReportingProblems(_ devices: Set<DeviceID>, directOnly: Bool) async -> [DeviceID: String]
    /// Yields when a connection is kept or lost; ends when the target closes.
    func connectionChanges() -> AsyncStream<Void>
}

/// Keeps the wanted peers connected: each one without a connection is dialled again with the
/// backoff of ``RedialSchedule``; a peer discovery just found is dialled at once; one connected
/// through a relay is offered a direct connection every `upgradeInterval`. What happens is said
/// through `warn` the way a service's log says it, once per loss or kind of failure. Every wait is
/// on `clock` (the continuous clock in service; a test's moves only when the test says).
enum Redialer {
    /// Starts the loops; cancel the task to stop them.
    static func start<C: Clock>(
        wanted: [DeviceID], target: any RedialTarget, found: AsyncStream<DeviceID>?, upgradeInterval: Int,
        tick: Duration = .seconds(1), clock: C, warn: @escaping @Sendable (String) -> Void
    ) -> Task<Void, Never> where C.Instant == ContinuousClock.Instant {
        let changes = target.connectionChanges()
        let rushed = Rushed()
        // Woken by a connection change or a peer found on the LAN (told before the loop starts
        // waits for it: nothing found meanwhile is missed).
        let (wakes, waker) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        rushed.onWake { waker.yield() }
        let listener = found.map { found in
            Task {
                for await device in found where wanted.contains(device) {
                    rushed.devices.withLock { _ = $0.insert(device) }
                    rushed.wake()
                }
            }
        }
        // A connection through a relay is replaced by a direct one when one can be made: tried
        // every reconnectionIntervalS (as syncthing redials better addresses).
        let upgrader = Task {
            while !Task.isCancelled {
                try? await clock.sleep(for: .seconds(upgradeInterval))
                let relayed = Set(target.connectedPeers().filter(\.value).keys).intersection(wanted)
                guard !relayed.isEmpty, !Task.isCancelled else { continue }
                _ = await target.dialReportingProblems(relayed, directOnly: true)
            }
        }
        return Task {
            defer {
                listener?.cancel()
                upgrader.cancel()
            }
            var schedule = RedialSchedule()
            let relay = Task {
                for await _ in changes { waker.yield() }
                waker.finish()
            }
            defer { relay.cancel() }
            var woken = wakes.makeAsyncIterator()
            while !Task.isCancelled {
                // Every peer connected (a peer that dialled in meanwhile needs no redial): sleep
                // until a connection is lost rather than look every second.
                let connected = target.connectedPeers()
                for device in wanted where connected[device] != nil && schedule.isScheduled(device) { schedule.connected(device) }
                if wanted.allSatisfy({ connected[$0] != nil }) && rushed.isEmpty {
                    guard await woken.next() != nil else { return }
                    continue
                }
                try? await clock.sleep(for: tick)
                let open = target.connectedPeers()
                let now = clock.now
                for device in wanted where open[device] == nil && schedule.lost(device, now: now) {
                    // Lost a moment ago: said once, with why.
                    if let why = target.takeLossReason(device) {
                        warn("\(device.shortDescription): connection lost: \(why); dialling again in \(RedialSchedule.firstDelay) s")
                    }
                }
                // Just heard on the LAN: dialled now, whatever the backoff said.
                for device in rushed.take() where open[device] == nil { schedule.rush(device, now: now) }
                let missing = schedule.due(among: wanted.filter { open[$0] == nil }, now: now)
                guard !missing.isEmpty, !Task.isCancelled else { continue }
                // A peer may dial in while this waits its turn: the exchange drops the duplicate.
                let still = Set(missing.filter { target.connectedPeers()[$0] == nil })
                let problems = still.isEmpty ? [:] : await target.dialReportingProblems(still, directOnly: false)
                let reached = target.connectedPeers()
                for device in missing {
                    switch schedule.dialled(device, reached: reached[device] != nil, problem: problems[device], now: now) {
                    case .reconnected(let device): warn("reconnected to \(device.shortDescription)")
                    case .failing(let device, let why):
                        warn("\(device.shortDescription): \(why); dialling again with backoff (up to \(RedialSchedule.longestDelay) s)")
                    case nil: break
                    }
                }
            }
        }
    }
}

/// The peers discovery just found, waiting for the redial loop to dial them.
private final class Rushed: Sendable {
    let devices = Mutex<Set<DeviceID>>([])
    private let waker = Mutex<(@Sendable () -> Void)?>(nil)

    var isEmpty: Bool { devices.withLock { $0.isEmpty } }

    func take() -> Set<DeviceID> { devices.withLock { devices in defer { devices = [] }; return devices } }

    func onWake(_ wake: @escaping @Sendable () -> Void) { waker.withLock { $0 = wake } }

    func wake() { waker.withLock { $0 }?() }
}
