import Foundation
@testable import KaitenApp
import KaitenApply
import KaitenConfig
import KaitenProtocol
import KaitenReconcile
import KaitenService
import Testing

/// The one place an outcome becomes an exit code: each ending and each error, as `kaiten --help`
/// documents them, without running a verb.
@Suite(.timeLimit(.minutes(1))) struct OutcomeTests {
    struct Other: Error {}

    @Test func errorsMapToTheirDocumentedStatus() throws {
        #expect(ExitStatus(for: VerbEnded(.stale, "moved")).code == 3)
        #expect(ExitStatus(for: VerbEnded(.interrupted(by: SIGTERM))).code == 143)
        #expect(ExitStatus(for: ArgumentError("--ttl -1")).code == 64)
        #expect(ExitStatus(for: Result { try DeviceID("not-a-device-id") }.failure!).code == 64)
        #expect(ExitStatus(for: Other()).code == 1)
        #expect(ExitStatus(for: ConfigError(.unknownFolder, file: "config.xml", "no such folder")).code == 1)
    }

    static func plan(conflicts: [Conflict.Kind] = [], notApplied: String? = nil) -> Plan {
        let folder = FolderPlan(
            id: "f", path: "/f", stignore: .init(changed: false, content: "", managed: true),
            conflicts: conflicts.map { Conflict(kind: $0, path: "p-\($0.rawValue)", reason: "why", choices: []) },
            notApplied: notApplied)
        return Plan(
            lineage: "l", planID: "p", createdAt: "now", deviceID: "me", baseline: .init(configSHA256: "", folders: []), folders: [folder])
    }

    @Test func nothingToApplyIsSuccessUnlessSomethingWasHeldBack() {
        #expect(ApplyOutcome(plan: Self.plan(), report: nil, skipped: false).status(failOnConflict: true) == .success)
        #expect(ApplyOutcome(plan: Self.plan(), report: nil, skipped: true).status(failOnConflict: false) == .brake)
        #expect(ApplyOutcome(plan: Self.plan(conflicts: [.holdersOffline]), report: nil, skipped: false).status(failOnConflict: false) == .brake)
        #expect(ApplyOutcome(plan: Self.plan(notApplied: "unmanaged"), report: nil, skipped: false).status(failOnConflict: false) == .brake)
        let open = ApplyOutcome(plan: Self.plan(conflicts: [.extraneous]), report: nil, skipped: false)
        #expect(open.status(failOnConflict: false) == .success)
        #expect(open.status(failOnConflict: true) == .pending)
    }

    @Test func anAppliedPlanEndsByItsWorstOutcome() {
        var report = ApplyReport(conflicts: 1)
        let plan = Self.plan()
        #expect(ApplyOutcome(plan: plan, report: report, skipped: false).status(failOnConflict: false) == .success)
        #expect(ApplyOutcome(plan: plan, report: report, skipped: false).status(failOnConflict: true) == .pending)
        report.keptForSafety = [.init("f", "a")]
        #expect(ApplyOutcome(plan: plan, report: report, skipped: false).status(failOnConflict: true) == .brake)
        report.failed = [.init("f", "b", "disk full")]
        #expect(ApplyOutcome(plan: plan, report: report, skipped: false).status(failOnConflict: true) == .partial)
        report.interruptedBy = SIGINT
        #expect(ApplyOutcome(plan: plan, report: report, skipped: false).status(failOnConflict: true).code == 130)
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
