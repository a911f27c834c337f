import Foundation
import KaitenApply
import KaitenConfig
import KaitenDiscovery
import KaitenPeer
import KaitenProtocol
import KaitenReconcile
import KaitenStream
import KaitenSync
import KaitenTransfer
import Logging
import Synchronization
import Glibc

/// What the last whole plan left for the user (its conflicts, and actions the mode did not
/// admit): a scoped round's status adds its own to these rather than hiding them.
final class Standing: Sendable {
    private let held = Mutex((pending: 0, conflicts: 0))

    func set(_ plan: Plan, mode: AutoApply) {
        let admitted = mode.filter(plan).folders.reduce(0) { $0 + $1.actions.count }
        let planned = plan.folders.reduce(0) { $0 + $1.actions.count }
        held.withLock { $0 = (planned - admitted, plan.folders.reduce(0) { $0 + $1.conflicts.count }) }
    }

    func get() -> (pending: Int, conflicts: Int) { held.withLock { $0 } }
}

/// What woke the loop, gathered until it looks: many triggers, one round.
final class Triggers: Sendable {
    struct Woken {
        var reason: String?
        /// The first reason that is not a path the watcher named: those may turn out to be
        /// the echo of the service's own writes, and a round is then not "after" them.
        var reasonBesidesPaths: String?
        var config = false
        var stop = false
        /// Something on disk (or the timer) rather than only peers' updates.
        var disk = false
        /// Something only a whole round answers: the timer, a selection file, lost events, a
        /// peer's full index, more paths than ``Service/scopeLimit``.
        var whole = false
        /// Per folder, the paths peers' updates named.
        var peerPaths: [String: Set<String>] = [:]
        /// Per folder, the paths the watcher named.
        var diskPaths: [String: Set<String>] = [:]

        mutating func merge(_ other: Woken) {
            reason = reason ?? other.reason
            reasonBesidesPaths = reasonBesidesPaths ?? other.reasonBesidesPaths
            config = config || other.config
            stop = stop || other.stop
            disk = disk || other.disk
            whole = whole || other.whole
            peerPaths.merge(other.peerPaths) { $0.union($1) }
            diskPaths.merge(other.diskPaths) { $0.union($1) }
        }
    }
    private let pending = Mutex(Woken())
    private let wake: AsyncStream<Void>
    private let wakeUp: AsyncStream<Void>.Continuation

    init() {
        (wake, wakeUp) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func yield(_ trigger: Service.Trigger) {
        pending.withLock { woken in
            switch trigger {
            case .config: woken.config = true
            case .stop: woken.stop = true
            case .disk, .timer:
                woken.disk = true
                woken.whole = true
            case .folder(let id, let path):
                woken.disk = true
                if !woken.whole { woken.diskPaths[id, default: []].insert(path) }
            case .eventsLost:
                woken.disk = true
                woken.whole = true
            case .peers(_, let folder, let names, let full):
                if full { woken.whole = true }
                if !woken.whole { woken.peerPaths[folder, default: []].formUnion(names) }
            }
            switch trigger {
            case .config, .stop: break
            default: if woken.reason == nil { woken.reason = trigger.reason }
            }
            switch trigger {
            case .config, .stop: break
            case .folder: break
            default: if woken.reasonBesidesPaths == nil { woken.reasonBesidesPaths = trigger.reason }
            }
            let paths = woken.peerPaths.values.reduce(0) { $0 + $1.count } + woken.diskPaths.values.reduce(0) { $0 + $1.count }
            if woken.whole || paths > Service.scopeLimit {
                woken.whole = true
                woken.peerPaths = [:]
                woken.diskPaths = [:]
            }
        }
        wakeUp.yield()
    }

    /// Waits for a trigger, then takes everything gathered.
    func wait() async -> Woken {
        for await _ in wake {
            let woken = take()
            if woken.reason != nil || woken.config || woken.stop { return woken }
        }
        return Woken(stop: true)
    }

    func take() -> Woken {
        pending.withLock { woken in
            defer { woken = Woken() }
            return woken
        }
    }
}

/// The last plan said, so that the same one is not said every round.
final class RoundLog: Sendable {
    private let last = Mutex<String?>(nil)
    func same(_ fingerprint: String) -> Bool {
        last.withLock { last in
            defer { last = fingerprint }
            return last == fingerprint
        }
    }
}

extension Service {
    enum Trigger: Sendable {
        /// A peer's index batch, with the names it carries (a full index asks for a whole round).
        case peers(DeviceID, folder: String, names: [String], full: Bool)
        /// A change on disk in a folder, at a path.
        case folder(String, path: String)
        /// The kernel dropped a folder's change events: only a whole round can tell what changed.
        case eventsLost(folder: String)
        case disk(String), timer, config, stop

        /// Why a round runs, for its log line.
        var reason: String {
            switch self {
            case .peers(let device, let folder, _, _): return "an index update from \(device.shortDescription) for \(folder)"
            case .folder(let id, let path): return "a change in \(id)/\(path)"
            case .eventsLost(let id): return "changes in \(id) the kernel did not report one by one"
            case .disk(let what): return what
            case .timer: return "the periodic rescan"
            case .config: return "config.xml"
            case .stop: return "stop"
            }
        }
    }
}
