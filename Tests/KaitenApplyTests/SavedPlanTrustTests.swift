import KaitenConfig
import KaitenReconcile
import KaitenTestSupport
import Testing

@testable import KaitenApply
@testable import KaitenTransfer

/// A saved plan only ever does what a fresh plan from its baseline would (issue 10, item 2).
@Suite(.timeLimit(.minutes(5)))
struct SavedPlanTrustTests {
    static func plan(_ actions: [Action], stignore: String = "!/a.txt\n!/b.txt\n*\n", conflicts: [Conflict] = []) -> Plan {
        let folder = FolderPlan(
            id: "f", path: "/data/f", stignore: .init(changed: true, content: stignore, managed: true), actions: actions,
            conflicts: conflicts)
        return Plan(
            lineage: "l", planID: "p", createdAt: "now", deviceID: "D", baseline: .init(configSHA256: "", folders: []), folders: [folder])
    }

    static let a = Action(action: .pull, path: "a.txt", size: 10, reason: "selected", version: ["AAAAAAA:1"], cause: .selected)
    static let b = Action(action: .pull, path: "b.txt", size: 99, reason: "selected", version: ["AAAAAAA:2"], cause: .selected)

    @Test func aPathOutsideTheFolderIsNamedAsAnEdit() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let escape = Action(action: .pull, path: "../../../etc/cron.d/x", size: 10, reason: "selected", version: ["AAAAAAA:1"], cause: .selected)
        let error = #expect(throws: ApplyError.self) { try Applier.checkOrigin(Self.plan([Self.a, escape]), home: Home(path: directory.path)) }
        #expect(error?.code == .stale)
        #expect(error?.hint.contains("\"../../../etc/cron.d/x\" is not a path inside the folder") == true, "\(error?.hint ?? "")")
        #expect(error?.hint.contains("edited") == true)
    }

    @Test func anUneditedPlanMatches() {
        #expect(Applier.firstDifference(Self.plan([Self.a, Self.b]), from: Self.plan([Self.a, Self.b])) == nil)
    }

    @Test func anEditedStIgnoreIsRefused() {
        let edited = Self.plan([Self.a], stignore: "#include /etc/passwd\n*\n")
        let difference = Applier.firstDifference(edited, from: Self.plan([Self.a]))
        #expect(difference?.contains(".stignore") == true)
    }

    @Test func swappedPathsAreRefused() {
        var swappedA = Self.a
        var swappedB = Self.b
        (swappedA.path, swappedB.path) = (Self.b.path, Self.a.path)
        let difference = Applier.firstDifference(Self.plan([swappedA, swappedB]), from: Self.plan([Self.a, Self.b]))
        #expect(difference == "f: pull b.txt is not in a fresh plan as it is in the file")
    }

    @Test func anAddedDeletionIsRefusedButOneHeldBackForOfflineHoldersIsNot() {
        let delete = Action(action: .delete, path: "c.txt", size: 5, reason: "deselected", cause: .deselected)
        #expect(Applier.firstDifference(Self.plan([Self.a, delete]), from: Self.plan([Self.a])) != nil)
        let heldBack = Conflict(kind: .holdersOffline, path: "c.txt", reason: "offline", choices: [])
        #expect(Applier.firstDifference(Self.plan([Self.a, delete]), from: Self.plan([Self.a], conflicts: [heldBack])) == nil)
    }
}
