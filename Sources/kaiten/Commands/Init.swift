import ArgumentParser
import KaitenConfig

extension Kaiten {
    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a home: a new device identity and a Syncthing-compatible config.xml.",
            discussion: """
                Makes an ECDSA P-384 certificate the way `syncthing generate` does, key.pem \
                (mode 0600), and config.xml (version 36) with global discovery, local discovery, \
                relays, NAT traversal and usage reporting off: Kaiten only talks to the peer \
                addresses you give it. Prints the new device ID; give it to your peers.

                Never overwrites: if config.xml, cert.pem or key.pem already exists, nothing is \
                written and the command exits 1. To reuse a Syncthing identity, copy its \
                config.xml, cert.pem and key.pem into the home instead.

                Example:
                  kaiten init --name laptop --listen tcp://0.0.0.0:22000
                """)

        @OptionGroup var global: GlobalOptions

        @Option(help: "This device's name as peers see it. When omitted: the host name.")
        var name: String?

        @Option(
            help: ArgumentHelp(
                "Where peers can reach this device. When omitted: tcp://0.0.0.0:22000.",
                valueName: "tcp://host:port"))
        var listen: String = "tcp://0.0.0.0:22000"

        @Flag(help: "Print the result as JSON.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let created = try KaitenHome.initialize(global.resolvedHome, name: name, listenAddress: listen)
                if json {
                    try Terminal.json(["device_id": created.deviceID.description, "home": created.home.path])
                } else {
                    print(created.deviceID.description)
                    Terminal.note("created \(created.home.path)")
                }
            }
        }
    }
}

extension Terminal {
    /// A human remark on stderr, so stdout stays clean for scripts.
    static func note(_ message: String) {
        FileHandle.standardError.write(Data("\(message)\n".utf8))
    }
}

import Foundation
