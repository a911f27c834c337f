import ArgumentParser
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Peer: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add, remove and list the peers this device talks to.",
            subcommands: [Add.self, Edit.self, Remove.self, List.self, Check.self])

        /// `--address` values: each `tcp://HOST:PORT`, a relay URI or `dynamic`. An argument,
        /// not config.xml, is wrong: it says which, and exits 64.
    }
}

extension Kaiten.Peer {
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a peer device to config.xml.",
            discussion: """
                The peer must also add this device (see `kaiten id`) before the two can connect.

                An address is tcp://HOST:PORT, a relay the peer is joined to \
                (relay://HOST:22067/?id=RELAY-ID, used with relaysEnabled), or dynamic: found \
                by discovery when config.xml turns it on (`kaiten init --discovery on`), else \
                only accepted when the peer dials in. Several are tried in turn, direct ones \
                first.

                Examples:
                  kaiten peer add MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD \\
                    --name nas --address tcp://192.168.1.10:22000
                  kaiten peer add P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2 --name laptop
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The peer's device ID (dashes or spaces optional, any case).")
        var deviceID: String

        @Option(help: "A name for the peer. When omitted: empty, and syncthing's name is shown once connected.")
        var name: String = ""

        @Option(
            name: .customLong("address"),
            help: ArgumentHelp(
                "Where to reach the peer; repeatable: tcp://HOST:PORT, relay://HOST:PORT/?id=RELAY-ID or dynamic. When omitted: dynamic (found by discovery when it is on; otherwise the peer must dial this device).",
                valueName: "address"))
        var addresses: [String] = []

        @Option(help: "What the peer compresses for us: metadata (default), never or always.")
        var compression: String = "metadata"

        func run() async throws {
            try await reportingErrors {
                let id = try global.app.addPeer(deviceID, name: name, addresses: addresses, compression: compression)
                Terminal.note("added peer \(id)\(name.isEmpty ? "" : " (\(name))")")
            }
        }
    }

    struct Edit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change a peer's name, addresses or compression.",
            discussion: """
                Only what is given changes. --address replaces the whole list (repeat it for several; \
                `dynamic` alone to clear). The peer is named by device ID or by its current name.

                Examples:
                  kaiten peer edit nas --address tcp://192.168.1.20:22000
                  kaiten peer edit MFZWI3D --name nas --compression always
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The peer: device ID or name.")
        var peer: String

        @Option(help: "The new name.")
        var name: String?

        @Option(
            name: .customLong("address"),
            help: ArgumentHelp("Where to reach the peer (tcp://HOST:PORT, relay://HOST:PORT/?id=RELAY-ID or dynamic); repeatable; replaces every address.", valueName: "address"))
        var addresses: [String] = []

        @Option(help: "What the peer compresses for us: metadata, never or always.")
        var compression: String?

        func validate() throws {
            guard name != nil || !addresses.isEmpty || compression != nil else {
                throw ValidationError("nothing to change: give --name, --address or --compression")
            }
        }

        func run() async throws {
            try await reportingErrors {
                let label = try global.app.editPeer(peer, name: name, addresses: addresses.isEmpty ? nil : addresses, compression: compression)
                Terminal.note("changed peer \(label)")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rm",
            abstract: "Remove a peer from config.xml and from every folder shared with it.",
            discussion: """
                What it announced is dropped from the index logs, so it no longer counts as holding \
                anything. Local files are not touched.

                Example:
                  kaiten peer rm old-laptop
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The peer: device ID or name.")
        var peer: String

        func run() async throws {
            try await reportingErrors {
                Terminal.note("removed peer \(try global.app.removePeer(peer))")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls",
            abstract: "List the configured peers.",
            discussion: """
                This device itself is listed too, marked as `self`.

                Examples:
                  kaiten peer ls
                  kaiten peer ls --json | jq -r '.[] | select(.is_self | not) | .name'
                """)

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Print a JSON array of peers instead of a table.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let (rows, live) = try global.app.peers()
                if json {
                    try Terminal.json(rows)
                } else {
                    Terminal.print(PeerView.table(rows, live: live))
                }
            }
        }
    }
}

extension Kaiten.Peer {
    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Connect to peers, complete the handshake and report what each side shares.",
            discussion: """
                Dials each configured peer (or only DEVICE-ID) at its tcp:// addresses, checks \
                that the device answering is the one configured (TLS 1.3, device ID from its \
                certificate), exchanges Hello and ClusterConfig, prints the peer's name, client \
                and version and which folders each side shares, then disconnects.

                Exits 1 if any peer is unreachable, refuses TLS, does not know this device, or \
                does not share a folder this device shares with it.

                Example:
                  kaiten peer check
                  kaiten peer check MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD --json
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Check only this peer. When omitted: every configured peer.")
        var deviceID: String?

        @Option(help: "Seconds to wait for each step (connect, Hello, ClusterConfig). When omitted: 10.")
        var timeout: Double = 10

        @Flag(help: "Print a JSON array of results instead of text.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let results = try await global.app.checkPeers(only: deviceID, timeout: timeout)
                if json {
                    try Terminal.json(results)
                } else {
                    for result in results { Terminal.print(PeerView.lines(result)) }
                    if results.isEmpty { Terminal.note("no peers configured; add one with `kaiten peer add`") }
                }
                if results.contains(where: { !$0.ok }) { throw VerbEnded(.failure) }
            }
        }
    }
}
