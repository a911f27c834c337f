import ArgumentParser
import Foundation
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Index: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch, compact and rebuild the global index Kaiten keeps per folder.",
            discussion: """
                The global index is what peers announced, kept in an append-only log per folder \
                (index/<folder>.log in the home). `index sync` brings it up to date; peers send \
                only what changed since the last sync.
                """,
            subcommands: [Sync.self, Compact.self, Rebuild.self])
    }
}

extension Kaiten.Index {
    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Receive what is new from every peer sharing the folders, and append it to the log.",
            discussion: """
                Connects to each peer that shares one of the folders, sends what Kaiten already \
                holds so that only newer entries come, appends them (fsynced per batch) and \
                disconnects. Prints a line per folder and peer. Exits 1 if any peer failed.

                Example:
                  kaiten index sync photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Folder IDs. When omitted: every configured folder.")
        var folders: [String] = []

        @Option(help: "Seconds to wait for a peer's index. When omitted: 120.")
        var timeout: Double = 120

        @Flag(help: "Print a JSON array of per-peer results.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                switch try await global.app.syncIndex(folders: folders, timeout: timeout) {
                case .keptCurrent(let service, let lastUpdate):
                    if json {
                        try Terminal.json([IndexReport]())
                    } else {
                        print("\(service) keeps the index current\(lastUpdate.map { " (last update: \($0))" } ?? ""); nothing to do")
                    }
                case .synced(let reports):
                    try Self.render(reports, json: json)
                    if reports.contains(where: { !$0.ok }) { throw VerbEnded(.failure) }
                }
            }
        }

        static func render(_ reports: [IndexReport], json: Bool) throws {
            if json { return try Terminal.json(reports) }
            if reports.isEmpty { Terminal.note("no peer shares these folders") }
            Terminal.print(IndexView.lines(reports))
        }
    }

    struct Compact: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Rewrite index logs with only their live records.",
            discussion: """
                Kaiten compacts a log by itself when dead records outweigh live ones. The new log is \
                written beside the old one, fsynced and renamed over it: a crash leaves one or \
                the other, whole. A log of more than 4 MiB then gets a new snapshot beside it \
                (FOLDER.log.snap), from which the next open reads the view in place.

                Example:
                  kaiten index compact photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Folder IDs. When omitted: every configured folder.")
        var folders: [String] = []

        func run() async throws {
            try await reportingErrors {
                for (id, before, after) in try global.app.compactIndex(folders: folders) { print("\(id): \(before) → \(after) bytes") }
            }
        }
    }

    struct Rebuild: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Drop a folder's index log and fetch full indexes from its peers again.",
            discussion: """
                The remedy for a damaged log. Only Kaiten's copy of what peers announced is \
                dropped; no file in the folder is touched. When this device's own index of the \
                folder (index/FOLDER.local) is damaged too, it is dropped as well and starts \
                again under a new index ID (peers then take it in full). Both are checked \
                before anything is removed.

                Example:
                  kaiten index rebuild photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Option(help: "Seconds to wait for a peer's index. When omitted: 120.")
        var timeout: Double = 120

        func run() async throws {
            try await reportingErrors {
                let reports = try await global.app.rebuildIndex(folder, timeout: timeout)
                try Sync.render(reports, json: false)
                if reports.contains(where: { !$0.ok }) { throw VerbEnded(.failure) }
            }
        }
    }
}
