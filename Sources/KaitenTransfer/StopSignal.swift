import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// SIGINT and SIGTERM during an apply: the signal is noted, no new block or file is started,
/// blocks in flight are finished, temp files stay for the next apply to resume, and the command
/// says what was done and exits 128 + the signal (130, 143), as a shell expects.
public final class StopSignal: @unchecked Sendable {
    private let received = Atomic<Int32>(0)
    /// The signal sources, kept alive while this value lives (set once, by install()).
    private let lock = NSLock()
    private var sources: [DispatchSourceSignal] = []
    private var observers: [@Sendable (Int32) -> Void] = []

    public init() {}

    /// The signal that asked to stop, or nil.
    public var signal: Int32? {
        let value = received.load(ordering: .relaxed)
        return value == 0 ? nil : value
    }

    public var isSet: Bool { signal != nil }

    /// Catches SIGINT and SIGTERM for the life of this value (instead of dying at once). Once:
    /// a second call keeps the sources already catching them.
    public func install() {
        guard lock.withLock({ sources.isEmpty }) else { return }
        var installed: [DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM] {
            Glibc.signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in self?.raise(number) }
            source.resume()
            installed.append(source)
        }
        lock.withLock { sources = installed }
    }

    /// For tests and callers that stop on their own.
    public func raise(_ number: Int32) {
        guard received.compareExchange(expected: 0, desired: number, ordering: .relaxed).exchanged else { return }
        for observer in lock.withLock({ observers }) { observer(number) }
    }

    /// Runs `body` with the signal once it is raised (at once when it already is): for work
    /// that cannot poll, such as a client waiting on a socket for the service that applies.
    public func onRaise(_ body: @escaping @Sendable (Int32) -> Void) {
        let already: Int32? = lock.withLock {
            if let signal { return signal }
            observers.append(body)
            return nil
        }
        if let already { body(already) }
    }
}
