import KaitenApp

/// Lines for `kaiten decrypt`.
public enum EncryptionView {
    public static func line(_ outcome: DecryptOutcome) -> String {
        "\(outcome.status.rawValue.padding(toLength: 9, withPad: " ", startingAt: 0)) \(outcome.name ?? outcome.stored) (\(Terminal.human(outcome.size)))"
    }

    public static func failure(_ outcome: DecryptOutcome) -> String {
        if let name = outcome.name { return "\(outcome.stored) (\(name)): \(outcome.error ?? "failed")" }
        return "\(outcome.stored): \(outcome.error ?? "failed")"
    }

    public static func summary(_ run: DecryptRun) -> String {
        var parts: [String] = []
        for status in [DecryptOutcome.Status.written, .verified, .unchanged, .failed] {
            let count = run.outcomes.count { $0.status == status }
            if count > 0 || status == .failed { parts.append("\(count) \(status.rawValue)") }
        }
        return "folder \(run.folderID): " + parts.joined(separator: ", ")
    }
}
