import Foundation
import KaitenApply
import Synchronization

/// How far the apply the REST API runs has come, from its events: what a page shows while it
/// waits for the answer.
public final class ApplyProgress: Sendable {
    public struct Snapshot: Sendable, Encodable {
        public var running = false
        public var actions = 0
        public var done = 0
        public var failed = 0
        public var files_done = 0
        public var files_total = 0
        public var bytes_done: Int64 = 0
        public var bytes_total: Int64 = 0
        public var current = ""
    }

    private let state = Mutex(Snapshot())

    public init() {}

    public var snapshot: Snapshot { state.withLock { $0 } }

    func began() { state.withLock { $0 = Snapshot(running: true) } }

    func ended() { state.withLock { $0.running = false } }

    func record(_ event: ApplyEvent) {
        state.withLock { now in
            switch event {
            case .start(let actions, let bytes):
                now.actions = actions
                now.bytes_total = bytes
            case .progress(let filesDone, let filesTotal, let bytesDone, let bytesTotal, let current):
                (now.files_done, now.files_total, now.bytes_done, now.bytes_total, now.current) = (filesDone, filesTotal, bytesDone, bytesTotal, current)
            case .done: now.done += 1
            case .failed: now.failed += 1
            default: break
            }
        }
    }
}
