import KaitenProtocol

/// When to dial each wanted peer again, as a value (the sessions' redial loop does the dialling):
/// 2 s after a connection is lost, then twice as long after each failure up to 60 s; a peer just
/// heard on the LAN at once, whatever the backoff said; a failure said once per kind of failure,
/// not at every attempt.
public struct RedialSchedule: Sendable {
    public typealias Instant = ContinuousClock.Instant

    /// What the loop says after a dial.
    public enum Remark: Equatable, Sendable {
        case reconnected(DeviceID)
        /// A failure not said before for this peer (a new kind of failure is said again).
        case failing(DeviceID, why: String)
    }

    /// The first wait after a loss, and the longest.
    public static let firstDelay = 2
    public static let longestDelay = 60

    private var delay: [DeviceID: Int] = [:]
    private var due: [DeviceID: Instant] = [:]
    private var said: [DeviceID: String] = [:]

    public init() {}

    /// Whether `device` waits for a redial.
    public func isScheduled(_ device: DeviceID) -> Bool { due[device] != nil }

    /// When `device` is dialled next; nil when it is not waiting.
    public func dueTime(of device: DeviceID) -> Instant? { due[device] }

    /// A connected peer (dialled by us or dialling in) starts afresh the next time it is lost.
    public mutating func connected(_ device: DeviceID) {
        delay[device] = nil
        due[device] = nil
        said[device] = nil
    }

    /// A wanted peer found without a connection and not yet waiting: first dialled after
    /// ``firstDelay``. False when it was already waiting.
    @discardableResult
    public mutating func lost(_ device: DeviceID, now: Instant) -> Bool {
        guard due[device] == nil, delay[device] == nil else { return false }
        delay[device] = Self.firstDelay
        due[device] = now + .seconds(Self.firstDelay)
        return true
    }

    /// Heard on the LAN: dialled now.
    public mutating func rush(_ device: DeviceID, now: Instant) {
        due[device] = now
    }

    /// The peers whose time has come, among `candidates` (those still without a connection).
    public func due(among candidates: [DeviceID], now: Instant) -> [DeviceID] {
        candidates.filter { due[$0].map { $0 <= now } ?? false }
    }

    /// The outcome of dialling `device`: reached, or not with `problem`.
    public mutating func dialled(_ device: DeviceID, reached: Bool, problem: String?, now: Instant) -> Remark? {
        if reached {
            connected(device)
            return .reconnected(device)
        }
        let why = problem ?? "unreachable"
        let remark: Remark? = said[device] == why ? nil : .failing(device, why: why)
        said[device] = why
        let next = min(Self.longestDelay, (delay[device] ?? 1) * 2)
        delay[device] = next
        due[device] = now + .seconds(next)
        return remark
    }
}
