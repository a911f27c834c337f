import ArgumentParser
import KaitenConfig
import KaitenProtocol

extension Kaiten {
    struct Peer: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add, remove and list the peers this device talks to.",
            subcommands: [Add.self, Remove.self, List.self])
    }
}

extension Kaiten.Peer {
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a peer device to config.xml.",
            discussion: """
                The peer must also add this device (see `kaiten id`) before the two can connect.

                Example:
                  kaiten peer add MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD \\
                    --name nas --address tcp://192.168.1.10:22000
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The peer's device ID (dashes or spaces optional, any case).")
        var deviceID: String

        @Option(help: "A name for the peer. When omitted: empty, and syncthing's name is shown once connected.")
        var name: String = ""

        @Option(
            name: .customLong("address"),
            help: ArgumentHelp(
                "Where to reach the peer; repeatable. When omitted: dynamic (Kaiten does not use discovery, so it will only accept incoming connections from the peer).",
                valueName: "tcp://host:port"))
        var addresses: [String] = []

        @Option(help: "What the peer compresses for us: metadata (default), never or always.")
        var compression: String = "metadata"

        func run() async throws {
            try await reportingErrors {
                let opened = try KaitenHome.open(global.resolvedHome)
                let id = try DeviceID(deviceID)
                guard id != opened.identity.deviceID else {
                    throw ConfigError(.invalidValue, file: opened.config.path, "\(id) is this device itself")
                }
                guard let compressionValue = Compression(configValue: compression) else {
                    throw ValidationError("--compression must be metadata, never or always")
                }
                for address in addresses where address != "dynamic" {
                    try KaitenHome.validateListenAddress(address, file: opened.config.path)
                }
                try opened.config.addDevice(
                    DeviceConfiguration(
                        id: id, name: name, addresses: addresses.isEmpty ? ["dynamic"] : addresses,
                        compression: compressionValue))
                try opened.config.write()
                Terminal.note("added peer \(id)\(name.isEmpty ? "" : " (\(name))")")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rm",
            abstract: "Remove a peer from config.xml and from every folder shared with it.",
            discussion: "Local files are not touched.")

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The peer's device ID.")
        var deviceID: String

        func run() async throws {
            try await reportingErrors {
                let opened = try KaitenHome.open(global.resolvedHome)
                let id = try DeviceID(deviceID)
                guard id != opened.identity.deviceID else {
                    throw ConfigError(.invalidValue, file: opened.config.path, "\(id) is this device itself; it cannot be removed")
                }
                try opened.config.removeDevice(id)
                try opened.config.write()
                Terminal.note("removed peer \(id)")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls",
            abstract: "List the configured peers.",
            discussion: "This device itself is listed too, marked as `self`.")

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Print a JSON array of peers instead of a table.")
        var json = false

        struct Row: Encodable {
            let device_id: String
            let name: String
            let addresses: [String]
            let compression: String
            let introducer: Bool
            let paused: Bool
            let is_self: Bool
            let folders: [String]
        }

        func run() async throws {
            try await reportingErrors {
                let opened = try KaitenHome.open(global.resolvedHome)
                let folders = opened.config.folders
                let rows = opened.config.devices.map { device in
                    Row(
                        device_id: device.id.description, name: device.name, addresses: device.addresses,
                        compression: device.compression.rawValue, introducer: device.isIntroducer,
                        paused: device.isPaused, is_self: device.id == opened.identity.deviceID,
                        folders: folders.filter { $0.devices.contains(device.id) }.map(\.id))
                }
                if json {
                    try Terminal.json(rows)
                } else {
                    Terminal.table(
                        ["DEVICE ID", "NAME", "ADDRESSES", "FOLDERS"],
                        rows.map {
                            [
                                $0.device_id, $0.name + ($0.is_self ? " (self)" : "") + ($0.paused ? " (paused)" : ""),
                                $0.addresses.joined(separator: ","), $0.folders.joined(separator: ","),
                            ]
                        })
                }
            }
        }
    }
}
