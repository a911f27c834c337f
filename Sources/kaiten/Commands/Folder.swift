import ArgumentParser
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Folder: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add, share, unshare, remove and list folders.",
            subcommands: [Add.self, Share.self, Unshare.self, Remove.self, List.self])
    }
}

extension Kaiten.Folder {
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a folder to config.xml.",
            discussion: """
                The folder ID must be the same on every device sharing it. Every field syncthing \
                reads is written out (a field syncthing finds missing becomes zero: maxConflicts 0 \
                would delete conflicting files). If --path does not exist it is created together \
                with its .stfolder marker; an existing directory is left as it is.

                --type receiveencrypted makes this device the untrusted one for the folder (a \
                rented server, a friend's NAS): it stores and relays only the ciphertext the \
                trusted devices send, as syncthing's untrusted device lays it out, and never \
                needs the password. Share it plainly with those devices; they share it with this \
                one untrusted, with the folder password. It takes everything (no selection).

                Examples:
                  kaiten folder add photos --path ~/Photos --label Photos --share PEER-ID
                  kaiten folder add photos --path /srv/photos --type receiveencrypted --share laptop --share phone
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID, as on the other devices.")
        var folderID: String

        @Option(help: "Where the folder lives on this machine.")
        var path: String

        @Option(help: "A human label. When omitted: the folder ID.")
        var label: String?

        @Option(help: "sendreceive, sendonly, receiveonly or receiveencrypted. When omitted: sendreceive, as in syncthing.")
        var type: String = "sendreceive"

        @Option(
            name: .customLong("share"),
            help: ArgumentHelp("A configured peer to share the folder with, by device ID or name; repeatable.", valueName: "peer"))
        var shares: [String] = []

        func validate() throws {
            guard !folderID.isEmpty, !folderID.contains("/"), folderID.trimmingCharacters(in: .whitespaces) == folderID
            else {
                throw ValidationError("the folder ID must be non-empty, without '/' or surrounding spaces")
            }
        }

        func run() async throws {
            try await reportingErrors {
                try say(global.app.addFolder(folderID, path: path, label: label, type: type, shares: shares), folderID)
            }
        }
    }

    struct Share: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Share a folder with a configured peer.",
            discussion: """
                The peer is named by device ID or by its name in config.xml (when only one peer has it).

                With --untrusted the peer gets the folder encrypted, as syncthing shares with an \
                untrusted device: names, contents and metadata are sealed with a key derived from \
                the password, and the peer (a syncthing with the folder as "receive encrypted", \
                e.g. a rented server) stores and relays ciphertext it cannot read. Every device \
                sharing the folder with it must use the same password. The password is read from \
                a file or stdin (-), never from the command line, and kept in config.xml only, as \
                syncthing keeps it. `kaiten decrypt` reads what the peer stores.

                Examples:
                  kaiten folder share photos nas
                  kaiten folder share photos vps --untrusted --password-file ~/.photos-pass
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folderID: String

        @Argument(help: "The peer: device ID or name; add it first with `kaiten peer add`.")
        var peer: String

        @Flag(help: "Share it encrypted: the peer is untrusted and gets ciphertext only (needs --password-file).")
        var untrusted = false

        @Option(help: ArgumentHelp("With --untrusted: a file holding the folder password (- for stdin).", valueName: "file"))
        var passwordFile: String?

        func validate() throws {
            if untrusted && passwordFile == nil { throw ValidationError("--untrusted needs --password-file FILE (or - for stdin)") }
            if !untrusted && passwordFile != nil { throw ValidationError("--password-file goes with --untrusted") }
        }

        func run() async throws {
            try await reportingErrors {
                let password = try passwordFile.map { try PasswordFile.read($0) }
                try say(global.app.shareFolder(folderID, with: peer, password: password), folderID)
            }
        }
    }

    struct Unshare: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop sharing a folder with a peer.",
            discussion: """
                The peer's index of the folder is dropped from the index log, so what it announced \
                no longer counts (nor does it hold any file for a deselect). Local files are not touched.

                Example:
                  kaiten folder unshare photos old-laptop
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folderID: String

        @Argument(help: "The peer: device ID or name.")
        var peer: String

        func run() async throws {
            try await reportingErrors { try say(global.app.unshareFolder(folderID, from: peer), folderID) }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rm",
            abstract: "Remove a folder from config.xml and drop Kaiten's records of it.",
            discussion: """
                The folder's files on disk are not touched, and neither is its selection file \
                (yours, perhaps in git). Kaiten's index log, scan cache and synced record of the \
                folder are deleted; adding the folder again starts with a fresh index sync.

                Example:
                  kaiten folder rm photos
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folderID: String

        func run() async throws {
            try await reportingErrors { try say(global.app.removeFolder(folderID), folderID) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls",
            abstract: "List the configured folders.",
            discussion: """
                Examples:
                  kaiten folder ls
                  kaiten folder ls --json | jq -r '.[].path'
                """)

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Print a JSON array of folders instead of a table.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let (rows, names, me) = try global.app.folderList()
                if json {
                    try Terminal.json(rows)
                } else {
                    Terminal.print(FolderView.table(rows, peerNames: names, me: me))
                }
            }
        }
    }
}

/// What a folder verb did, said on stderr (stdout stays for results).
private func say(_ change: FolderChange, _ folder: String) { Terminal.note(FolderView.line(change, folder)) }
