import ArgumentParser
import Foundation
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Mount: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a folder's whole global tree in the file system, fetching files as they are read.",
            discussion: """
                Every file the peers announce appears under DIR with its size, date and mode; \
                a file kept on this device (selected and on disk) is the local file, any other \
                is fetched when read — only the blocks a read covers, each SHA-256-verified, \
                from any connected peer that holds it, read ahead for sequential reads. What \
                was fetched is kept in the home's block cache (cache/blocks, by content: a \
                renamed or duplicated file costs nothing twice), within --cache-budget, least \
                recently used blocks first out, never those of an open file; it survives \
                restarts, and a damaged block is dropped, never served. The tree follows the \
                peers' index while mounted (new files appear, deleted ones go, within a second). \
                A walk over the tree (find, du, a file manager listing) reads no content; du \
                counts what is really here (local files, cached blocks).

                A read that no peer answers fails with EIO after --read-timeout; a file no \
                connected peer holds fails to open with EIO unless its blocks are all cached \
                (cached and pinned files stay readable with every peer offline). A block that \
                fails verification is never handed to the reader. A mount left behind by a \
                killed process is cleared at the next start.

                In a folder that sends (sendreceive, sendonly), creating, writing, renaming and \
                removing act on the folder on disk as doing the same there would, and what is \
                made is selected, so the plan sends it; a file only on the peers is brought here \
                first. In a receiveonly folder, and with --read-only, they fail with EROFS. \
                Extended attributes say and change what is kept: \
                user.kaiten.state (online-only, partial, cached, pinned, local-only, conflict), \
                user.kaiten.holders (the connected peers holding the global version, one device \
                ID per line) and user.kaiten.pin (1 or 0; writing it pins or unpins, as `kaiten \
                pin` and `kaiten unpin` do).

                Runs in the foreground until SIGINT or SIGTERM, or `fusermount3 -u DIR`; exits \
                0 with nothing left mounted. Beside a running `kaiten run` or `kaiten serve` the \
                blocks come through it, as for `kaiten cat`. Needs /dev/fuse (Debian: fuse3).

                Examples:
                  mkdir -p ~/Photos && kaiten mount photos ~/Photos
                  getfattr -n user.kaiten.state ~/Photos/2019/IMG_0001.jpg
                  setfattr -n user.kaiten.pin -v 1 ~/Photos/2025
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: ArgumentHelp("An empty directory to show the folder at.", valueName: "dir"))
        var directory: String

        @Option(help: ArgumentHelp("The block cache's budget: a size (500M, 2G) or a share of its file system (10%). Default: 10 %, at most 20 GiB.", valueName: "size"))
        var cacheBudget: String?

        @Option(help: ArgumentHelp("Seconds a read waits for a peer's block before it fails with EIO.", valueName: "seconds"))
        var readTimeout: Int = 10

        @Flag(help: "Refuse every change with EROFS, even in a folder that sends (pins still work).")
        var readOnly = false

        func validate() throws {
            guard readTimeout > 0 else { throw ValidationError("--read-timeout takes a number of seconds above 0") }
        }

        func run() async throws {
            try await reportingErrors {
                let stamps = LockedISO8601()
                let log: @Sendable (String) -> Void = { line in FileHandle.standardError.write(Data("\(stamps.now()) \(line)\n".utf8)) }
                let absolute = (directory as NSString).isAbsolutePath
                    ? directory : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(directory)
                log("mounting \(folder) at \(absolute) (fusermount3 -u \(absolute), or Ctrl-C, to end)")
                var request = MountRequest(folder: folder, directory: absolute, cacheBudget: cacheBudget)
                request.readTimeout = .seconds(readTimeout)
                request.readOnly = readOnly
                let report = try await global.app.mount(
                    request, log: log,
                    onStop: { stop in SignalStop.install(stop) })
                let cache = report.cache
                log(
                    "unmounted: \(report.blocksFetched) block(s) fetched; cache \(Terminal.human(cache.bytes)) of \(Terminal.human(cache.budget)), \(cache.hits) hit(s), \(cache.evictions) eviction(s), \(cache.unkept) not kept (disk refused)"
                )
            }
        }
    }

    struct Pin: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Keep files on this device: add them to the folder's selection.",
            discussion: """
                The same as `kaiten select`, said as a file manager says it: the selection file \
                is what changes (the plan, the brakes and git see it), and the next apply — by \
                hand or by `kaiten run` — brings the files here. On a mount, `setfattr -n \
                user.kaiten.pin -v 1 PATH` does the same.

                Example:
                  kaiten pin photos 2025/summer
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "Folder-relative paths.")
        var paths: [String]

        func run() async throws {
            try await reportingErrors {
                for result in try global.app.select(folder, paths, force: false) { print(SelectionView.line(result)) }
            }
        }
    }

    struct Unpin: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop keeping files on this device: remove them from the folder's selection.",
            discussion: """
                The same as `kaiten deselect`: the local copies go only as a deselection lets \
                them go (at the next apply, never the last copy, never an edit not yet sent). \
                On a mount, `setfattr -n user.kaiten.pin -v 0 PATH` does the same.

                Example:
                  kaiten unpin photos 2019
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "Folder-relative paths, as they were pinned.")
        var paths: [String]

        func run() async throws {
            try await reportingErrors { try Deselect.deselect(global.app, folder, paths) }
        }
    }

    struct Free: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Free up space: drop the cached blocks of files that are not pinned.",
            discussion: """
                Files read through `kaiten mount` leave their blocks in the home's block cache; \
                this drops those of the named files (everything under a named directory). Pinned \
                files are left alone and named (unpin them first); blocks a pinned file shares \
                stay. A mount reading a freed file fetches it again.

                Example:
                  kaiten free media films/2019
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "Folder-relative files or directories.")
        var paths: [String]

        @Flag(help: "Print the result as JSON (see Docs/json.md).")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let freed = try global.app.free(folder, paths)
                if json {
                    try Terminal.json(freed)
                    return
                }
                for path in freed.pinned { Terminal.error("\(folder)/\(path): pinned, left alone (kaiten unpin \(folder) \(path))") }
                print("freed \(Terminal.human(freed.bytes)) of \(freed.files.count) file(s)")
            }
        }
    }
}
