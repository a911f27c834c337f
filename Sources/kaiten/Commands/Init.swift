import ArgumentParser
import Foundation
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a home: a new device identity and a Syncthing-compatible config.xml.",
            discussion: """
                Makes a certificate the way `syncthing generate` does — Ed25519 as syncthing 2.x \
                does, or ECDSA P-384 as 1.x with --key-type ecdsa (both kinds of peer accept \
                either) — key.pem \
                (mode 0600), and config.xml (version 36) with NAT traversal and usage reporting \
                off. Prints the new device ID; give it to your peers.

                Discovery and relays are off unless asked for: Kaiten then talks only to the \
                peer addresses you give it (tcp://HOST:PORT), and to no outside server. With \
                --discovery on it finds peers whose address is `dynamic` as syncthing does: on \
                the LAN (UDP broadcasts on port 21027) and through the global discovery \
                servers run by the Syncthing project (discovery-lookup.syncthing.net, \
                discovery-announce-v4/-v6.syncthing.net), to which it also announces its \
                addresses. With --relays on, Kaiten dials peers through the relays their \
                relay:// addresses name, and joins a relay named among its own listen \
                addresses or from a pool named there (README, "Relays"). A \
                Syncthing home dropped in keeps its own settings (discovery and relays on, as \
                syncthing's defaults).

                Never overwrites: if config.xml, cert.pem or key.pem already exists, nothing is \
                written and the command exits 1. To reuse a Syncthing identity, copy its \
                config.xml, cert.pem and key.pem into the home instead.

                Examples:
                  kaiten init --name laptop --listen tcp://0.0.0.0:22000
                  kaiten init --home /srv/kaiten --key-type ecdsa
                  kaiten init --name laptop --discovery on
                """)

        @OptionGroup var global: GlobalOptions

        @Option(help: "This device's name as peers see it. When omitted: the host name.")
        var name: String?

        @Option(
            help: ArgumentHelp(
                "Where peers can reach this device. When omitted: tcp://0.0.0.0:22000.",
                valueName: "tcp://host:port"))
        var listen: String = "tcp://0.0.0.0:22000"

        @Option(
            help: ArgumentHelp(
                "Where `kaiten run` answers syncthing's REST API (config.xml's <gui> address), for the tools that watch syncthing. Port 0: any free port.",
                valueName: "host:port"))
        var guiAddress: String = "127.0.0.1:8384"

        @Option(help: ArgumentHelp("The device key: ed25519 (what syncthing 2.x makes) or ecdsa (P-384, as 1.x).", valueName: "type"))
        var keyType: KeyTypeArgument = .ed25519

        enum KeyTypeArgument: String, ExpressibleByArgument, CaseIterable {
            case ed25519, ecdsa
        }

        @Option(help: ArgumentHelp("Find peers on the LAN and through the global discovery servers, and announce this device.", valueName: "on|off"))
        var discovery: Switch = .off

        @Option(help: ArgumentHelp("Allow connections through relays (config.xml's relaysEnabled).", valueName: "on|off"))
        var relays: Switch = .off

        enum Switch: String, ExpressibleByArgument, CaseIterable {
            case on, off
        }

        @Flag(help: "Print the result as JSON.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let created = try global.app.initialize(
                    name: name, listenAddress: listen, keyType: KeyType(rawValue: keyType.rawValue)!, guiAddress: guiAddress,
                    discovery: discovery == .on,
                    relays: relays == .on)
                if json {
                    try Terminal.json(["device_id": created.deviceID.description, "home": created.home])
                } else {
                    print(created.deviceID.description)
                    Terminal.note("created \(created.home)")
                }
            }
        }
    }
}
