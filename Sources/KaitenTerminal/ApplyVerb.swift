import Foundation
import KaitenApp

#if canImport(Glibc)
import Glibc
#endif

/// `kaiten apply` as the command line runs it: the request, the plan shown and the question
/// asked, the events rendered, the outcome's exit code. `import`, `offload` and `view sync` end
/// with one and call it as it is, not through argv.
public struct ApplyVerb {
    public var request: ApplyRequest
    public var yes = false
    public var json = false
    public var failOnConflict = false
    public var app: App

    public init(request: ApplyRequest, yes: Bool = false, json: Bool = false, failOnConflict: Bool = false, app: App) {
        self.request = request
        self.yes = yes
        self.json = json
        self.failOnConflict = failOnConflict
        self.app = app
    }

    public func run() async throws {
        let output = ApplyOutput(json: json)
        defer { output.flush() }
        let stop = StopSignal()
        let outcome = try await app.apply(
            request,
            ApplyFrontEnd(
                confirm: { try confirmed($0, output: output) },
                events: { event in
                    // From the first change on, SIGINT and SIGTERM stop the apply between
                    // blocks; until then they end the process at once.
                    if case .start = event { stop.install() }
                    output.handle(event)
                },
                stop: stop, asks: !yes))
        if let report = outcome.report { output.summary(report, plan: outcome.plan) }
        let status = outcome.status(failOnConflict: failOnConflict)
        if status != .success { throw VerbEnded(status) }
    }

    /// Shows a fresh plan and asks for confirmation (on a terminal, unless --yes). False
    /// when there is nothing to apply (the summary is said).
    func confirmed(_ plan: Plan, output: ApplyOutput) throws -> Bool {
        // Under a timer (no terminal) the output is one line per action and a summary.
        if !json && (isatty(1) == 1 || !yes) { Terminal.print(PlanView.lines(plan)) }
        guard plan.summary.hasChanges else {
            output.summary(ApplyReport(conflicts: plan.summary.conflicts), plan: plan)
            return false
        }
        if !yes {
            guard isatty(0) == 1 else {
                throw VerbEnded(.failure, "not a terminal: pass --yes to apply without confirmation (a timer must say so)")
            }
            print("\nApply this plan? Only 'yes' is accepted: ", terminator: "")
            fflush(nil)
            guard readLine()?.trimmingCharacters(in: .whitespaces) == "yes" else {
                print("Apply cancelled; nothing was changed.")
                throw VerbEnded(.failure)
            }
        }
        return true
    }
}
