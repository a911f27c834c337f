import Foundation
import KaitenApp
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// How apply reports: a progress line on a terminal, one line per action otherwise, or JSON
/// events (`ApplyEventJSON`, the schema every front-end streams).
public final class ApplyOutput: @unchecked Sendable {
    public let json: Bool
    let progressOnTerminal: Bool
    let started = Date()
    /// When the transfers began (after the peers were dialled and the plan made): rate and
    /// ETA count from here, not from the index sync before.
    var transfersStarted: Date?
    var lastProgress = Date.distantPast
    private let lines = ApplyEventJSON.Lines()
    /// JSON lines of finished actions not written yet. Such a line waits for the next line of
    /// another kind (progress comes a few times a second while anything moves), 32 KiB of them,
    /// or a fifth of a second, whichever is first: one write per pulled small file cost 4 % of
    /// the pull's CPU, and a reader of the stream waits no longer than it would for progress.
    private let unwritten = Mutex<[UInt8]>([])
    static let unwrittenBytes = 32 << 10
    static let unwrittenDelay = 0.2

    /// Where JSON lines go: standard output.
    private let sink: @Sendable ([UInt8]) -> Void

    public convenience init(json: Bool) {
        self.init(json: json) { FileHandle.standardOutput.write(Data($0)) }
    }

    init(json: Bool, sink: @escaping @Sendable ([UInt8]) -> Void) {
        self.json = json
        self.sink = sink
        progressOnTerminal = !json && isatty(2) == 1
    }

    deinit { flush() }

    public func emit(_ fields: [String: Any]) {
        let line = lines.line(fields)
        let waits = fields["type"] as? String == "action_done"
        // Written under the lock, so that a flush by the timer never overtakes a later line.
        let schedule = unwritten.withLock { buffer -> Bool in
            let wasEmpty = buffer.isEmpty
            buffer.append(contentsOf: line.utf8)
            if waits && buffer.count < Self.unwrittenBytes { return wasEmpty }
            writeOut(&buffer)
            return false
        }
        if schedule {
            DispatchQueue.global().asyncAfter(deadline: .now() + Self.unwrittenDelay) { [weak self] in self?.flush() }
        }
    }

    /// Writes the lines still waiting (the verb's end, whatever way it ends).
    public func flush() {
        unwritten.withLock { writeOut(&$0) }
    }

    private func writeOut(_ buffer: inout [UInt8]) {
        guard !buffer.isEmpty else { return }
        sink(buffer)
        buffer.removeAll(keepingCapacity: true)
    }

    public func handle(_ event: ApplyEvent) {
        if case .start = event { transfersStarted = Date() }
        if json {
            // At most a few progress events a second; the last one always.
            if case .progress(let done, let total, _, _, _) = event {
                guard Date().timeIntervalSince(lastProgress) > 0.25 || done == total else { return }
                lastProgress = Date()
            }
            emit(ApplyEventJSON.fields(event))
            return
        }
        switch event {
        case .start, .removedTemporary:
            break
        case .progress(let done, let total, let bytesDone, let bytesTotal, let current):
            guard progressOnTerminal, Date().timeIntervalSince(lastProgress) > 0.2 || done == total else { return }
            lastProgress = Date()
            let elapsed = max(0.001, Date().timeIntervalSince(transfersStarted ?? started))
            let rate = Double(bytesDone) / elapsed
            // Under a second of data says little about the rate: no ETA until then.
            let eta = rate > 0 && elapsed >= 1 ? "ETA \(Int((Double(bytesTotal - bytesDone) / rate).rounded(.up)))s" : "ETA –"
            let percent = bytesTotal > 0 ? Int(Double(bytesDone) * 100 / Double(bytesTotal)) : 100
            let line = "\(done)/\(total) files, \(human(bytesDone)) of \(human(bytesTotal)) (\(percent) %), \(human(Int64(rate)))/s, \(eta)  \(current)"
            FileHandle.standardError.write(Data(("\r\u{1B}[K" + String(line.prefix(120))).utf8))
            if done == total { FileHandle.standardError.write(Data("\n".utf8)) }
        case .done(let folder, let action, let note):
            guard !progressOnTerminal || action.action != .pull || note != nil else { return }
            let verb: String
            switch action.action {
            case .writeStIgnore: verb = "wrote"
            case .pull: verb = "pulled"
            case .delete: verb = "deleted"
            case .mkdir: verb = "created"
            case .rmdir: verb = "removed"
            case .chmod: verb = "set permissions of"
            case .send: verb = "sent"
            case .sendDelete: verb = "sent the deletion of"
            }
            let sized = action.action == .pull || action.action == .delete || (action.action == .send && action.type == .file)
            clearProgress()
            print("\(folder): \(verb) \(action.path)\(sized ? " (\(human(action.size)))" : "")\(note.map { " — \($0)" } ?? "")")
        case .failed(let folder, let action, let reason):
            clearProgress()
            Terminal.error("\(folder): \(action.action.rawValue) \(action.path) FAILED: \(reason)")
        case .kept(let folder, let action, let reason):
            clearProgress()
            Terminal.error("\(folder): \(action.action.rawValue) \(action.path) NOT DONE: \(reason)")
        case .conflictCopy(let folder, let path, let copy):
            clearProgress()
            print("\(folder): \(path) changed here and on the peers; theirs is newer: the local copy is now \(copy)")
        case .sendHeld(let folder, let path, let peers):
            clearProgress()
            print("\(folder): \(path) is held by \(peers.map { String($0.prefix(7)) }.joined(separator: ", "))")
        case .sendNotHeld(let folder, let path, let reason):
            clearProgress()
            Terminal.error("\(folder): \(path) NOT YET HELD: \(reason)")
        case .awaitingPeers(let held, let total):
            if progressOnTerminal && held < total {
                FileHandle.standardError.write(Data("\r\u{1B}[Kwaiting for the peers to take what was sent: \(held)/\(total)".utf8))
            }
        }
    }

    private func human(_ bytes: Int64) -> String { TextFacts.human(bytes) }

    public func clearProgress() {
        if progressOnTerminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }

    public func summary(_ report: ApplyReport, plan: Plan) {
        if json {
            emit(ApplyEventJSON.summary(report, plan: plan, seconds: Date().timeIntervalSince(started)))
            return
        }
        if let signal = report.interruptedBy {
            print(
                "Interrupted by \(signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "signal \(signal)"): "
                    + "\(report.done) action\(report.done == 1 ? "" : "s") done, \(report.notDone) not done. Files cut short keep the "
                    + "blocks already fetched in their temp files; the next apply resumes them.")
        }
        var line = "Applied: \(report.done) action\(report.done == 1 ? "" : "s") (\(Terminal.human(report.pulledBytes)) pulled, \(Terminal.human(report.freedBytes)) freed)"
        if !report.sent.isEmpty {
            line += ", \(report.sent.count) change\(report.sent.count == 1 ? "" : "s") sent"
            if !report.notHeld.isEmpty { line += " (\(report.notHeld.count) not yet held by the peers)" }
        }
        if !report.failed.isEmpty { line += ", \(report.failed.count) failed" }
        if !report.keptForSafety.isEmpty { line += ", \(report.keptForSafety.count) deletion\(report.keptForSafety.count == 1 ? "" : "s") held back (too few connected peers hold the file)" }
        line += ", \(report.conflicts) conflict\(report.conflicts == 1 ? "" : "s") open."
        print(line)
        for failure in report.failed { print("  failed: \(failure.folder): \(failure.path): \(failure.reason)") }
        // Deletions held back for safety, and folders left alone, are said every time, on every
        // output: a timer's log must show why a folder does not match its selection.
        for folder in plan.folders {
            if let reason = folder.notApplied { print("  not applied: \(folder.id): \(reason)") }
            for conflict in folder.conflicts where conflict.kind == .holdersOffline {
                print("  kept: \(folder.id): \(conflict.path): \(conflict.reason)")
            }
        }
        if report.conflicts > 0 { print("  See them with: kaiten conflicts") }
    }
}
