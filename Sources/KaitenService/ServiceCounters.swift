import Foundation
import Synchronization

/// What a service has done since it started, counted for `/metrics`: rounds, and the plan's
/// actions by folder, kind and outcome (done, failed, kept back by a brake or the apply mode).
final class ServiceCounters: Sendable {
    struct ItemKey: Hashable, Sendable {
        var folder: String
        var action: String
        var outcome: String
    }

    private let counts = Mutex<(rounds: Int, items: [ItemKey: Int])>((0, [:]))

    func roundEnded() { counts.withLock { $0.rounds += 1 } }

    /// Counts an action said done, failed or kept.
    func record(_ event: ServiceEvent) {
        guard ["done", "failed", "kept"].contains(event.kind), let folder = event.folder, let action = event.action else { return }
        counts.withLock { $0.items[ItemKey(folder: folder, action: action, outcome: event.kind), default: 0] += 1 }
    }

    var rounds: Int { counts.withLock { $0.rounds } }
    var items: [ItemKey: Int] { counts.withLock { $0.items } }
}
