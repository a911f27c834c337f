import KaitenApp

/// `kaiten import`, `offload`, `thumb` and `view` as text.
public enum MediaView {
    /// One item of an import: `+` copied, `=` already there; nil for a failure (said as an error).
    public static func line(_ item: ImportItem) -> String? {
        switch item.decision {
        case .copy:
            let how = item.date.map { " (\($0.source.rawValue) date)" } ?? ""
            return "+ \(item.destination)  ← \(item.source)\(how)\(item.renamed ? ", renamed: the name was taken" : "")"
        case .alreadyThere(let existing): return "= \(item.source): already in the folder as \(existing)"
        case .duplicate(let first): return "= \(item.source): the same content as \(first)"
        case .failed: return nil
        }
    }

    public static func summary(_ copy: ImportCopy, dryRun: Bool) -> String {
        let copies = copy.items.filter { $0.decision == .copy }.count
        return
            "\(dryRun ? "would import" : "imported") \(dryRun ? copies : copy.imported) of \(copy.items.count) files (\(copy.items.count - copies - copy.failed) already in \(copy.folder) or repeated, \(copy.failed) failed)"
    }

    public static func line(_ step: OffloadStep) -> String {
        "offload: \(step.deselected) held by \(step.peers) peer\(step.peers == 1 ? "" : "s") and deselected; \(step.waiting) not yet held, kept"
    }

    /// The offload step as one of apply's JSON events (`type: offload`).
    public static func event(_ step: OffloadStep) -> [String: Any] {
        ["type": "offload", "folder": step.folder, "deselected": step.deselected, "waiting": step.waiting, "peers": step.peers]
    }

    /// One thumbnail made or found; nil for a failure (said as an error).
    public static func line(_ outcome: ThumbnailOutcome) -> String? {
        switch outcome.status {
        case .made:
            let how = outcome.method.map { " \($0.rawValue)" } ?? ""
            return "made    \(outcome.path) (\(outcome.width ?? 0)×\(outcome.height ?? 0)\(how)\(outcome.local ? ", local" : ""))"
        case .cached: return "cached  \(outcome.path)"
        case .failed: return nil
        }
    }

    public static func summary(_ run: ThumbnailRun) -> String {
        let document = ThumbnailRunDocument(run)
        return
            "\(document.made) made, \(document.cached) already cached, \(document.failed) failed, of \(run.outcomes.count) images and videos; fetched \(Terminal.human(Int64(run.fetchedBytes))) (\(run.fetchedBlocks) blocks) from peers"
    }

    public static func summary(_ report: ViewReport, folder: String) -> String {
        "\(folder): \(report.linked.count) linked, \(report.relinked.count) linked again (replaced in the source), \(report.removed.count) removed (gone from the source), \(report.kept) unchanged"
    }

    /// Files in the view Kaiten did not link; nil when there are none.
    public static func foreign(_ report: ViewReport, folder: String) -> String? {
        guard !report.foreign.isEmpty else { return nil }
        let count = report.foreign.count
        return "\(folder): \(count) file\(count == 1 ? "" : "s") in the view that Kaiten did not link, left alone (\(report.foreign.prefix(3).joined(separator: ", ")))"
    }

    /// What `get` wrote.
    public static func summary(_ fetched: Fetched) -> String {
        let report = fetched.report
        let place = fetched.isDirectory ? "under \(fetched.target)" : "to \(fetched.target)"
        return
            "\(report.written) of \(report.written + report.failed.count) written \(place) (\(Terminal.human(report.bytes)); blocks: \(report.blocksFetched) fetched from peers, \(report.blocksReadLocally) read from local files)"
    }
}
