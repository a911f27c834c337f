import Foundation
import KaitenApply
import KaitenHTTPAPI
import KaitenReconcile
import KaitenService

#if canImport(Glibc)
import Glibc
#endif

/// The one JSON form of what an apply says (`apply --json`, `import --json`, `offload --json`:
/// one flat object per line, keys sorted, with the schema version `v` and the `time`), for
/// every front-end that streams it.
public enum ApplyEventJSON {
    /// An event's fields, without `v` and `time`.
    public static func fields(_ event: ApplyEvent) -> [String: Any] {
        switch event {
        case .start(let actions, let bytes):
            return ["type": "apply_start", "actions": actions, "pull_bytes": bytes]
        case .progress(let done, let total, let bytesDone, let bytesTotal, _):
            return ["type": "progress", "files_done": done, "files_total": total, "bytes_done": bytesDone, "bytes_total": bytesTotal]
        case .done(let folder, let action, let note):
            var object: [String: Any] = [
                "type": "action_done", "folder": folder, "action": action.action.rawValue, "path": action.path, "size": action.size,
            ]
            if let note { object["note"] = note }
            return object
        case .failed(let folder, let action, let reason):
            return ["type": "action_failed", "folder": folder, "action": action.action.rawValue, "path": action.path, "reason": reason]
        case .kept(let folder, let action, let reason):
            return ["type": "action_kept", "folder": folder, "action": action.action.rawValue, "path": action.path, "reason": reason]
        case .conflictCopy(let folder, let path, let copy):
            return ["type": "conflict_copy", "folder": folder, "path": path, "copy": copy]
        case .sendHeld(let folder, let path, let peers):
            return ["type": "send_held", "folder": folder, "path": path, "peers": peers.joined(separator: ",")]
        case .sendNotHeld(let folder, let path, let reason):
            return ["type": "send_not_held", "folder": folder, "path": path, "reason": reason]
        case .awaitingPeers(let held, let total):
            return ["type": "awaiting_peers", "held": held, "total": total]
        case .removedTemporary(let folder, let path):
            return ["type": "action_done", "folder": folder, "action": "remove_temporary", "path": path]
        }
    }

    /// The last event of an apply.
    public static func summary(_ report: ApplyReport, plan: Plan, seconds: Double) -> [String: Any] {
        [
            "type": "summary", "done": report.done, "failed": report.failed.count, "conflicts": report.conflicts,
            "pulled_bytes": report.pulledBytes, "freed_bytes": report.freedBytes, "seconds": seconds,
            "blocks_fetched": report.blocksFetched, "blocks_copied_locally": report.blocksCopiedLocally,
            "blocks_rejected": report.blocksRejected, "blocks_refused": report.blocksRefused, "blocks_lost": report.blocksLost,
            "not_applied": plan.summary.notApplied, "plan_id": plan.planID, "not_done": report.notDone,
            "interrupted_by": report.interruptedBy.map { Int($0) } ?? 0, "kept_for_safety": report.keptForSafety.count,
            "sent": report.sent.count, "not_held": report.notHeld.count, "conflict_copies": report.conflictCopies.count,
        ]
    }

    /// Writes events as lines. One per stream: it keeps the last second's timestamp (formatting
    /// each of a large deselect's 100,000 events cost more than its checks).
    public final class Lines: @unchecked Sendable {
        private var stamps = SecondStamps()

        public init() {}

        /// One event as one line of JSON, newline included. Events are flat (strings and
        /// numbers), so this writes them directly: JSONSerialization cost more than pulling a
        /// small file.
        public func line(_ fields: [String: Any]) -> String {
            var event = fields
            event["v"] = ServiceEvent.schemaVersion
            event["time"] = stamps.text(at: time(nil))
            if let line = FlatJSON.object(event) { return line + "\n" }
            let data = (try? JSONSerialization.data(withJSONObject: event, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
            return String(decoding: data, as: UTF8.self) + "\n"
        }
    }
}
