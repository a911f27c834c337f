import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// SIGTERM and SIGINT run `stop` once (and are otherwise ignored).
public enum SignalStop {
    nonisolated(unsafe) static var sources: [DispatchSourceSignal] = []

    public static func install(_ stop: @escaping @Sendable () -> Void) {
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { stop() }
            source.resume()
            sources.append(source)
        }
    }
}

/// One ISO 8601 formatter shared by concurrent request handlers.
public final class LockedISO8601: @unchecked Sendable {
    private let formatter = ISO8601DateFormatter()
    private let lock = NSLock()

    public init() {}

    public func now() -> String {
        lock.lock()
        defer { lock.unlock() }
        return formatter.string(from: Date())
    }
}
