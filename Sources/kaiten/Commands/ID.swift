import ArgumentParser
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct ID: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "id",
            abstract: "Print this device's ID.",
            discussion: """
                The device ID is derived from cert.pem, exactly as `syncthing serve --device-id` \
                derives it; give it to peers so they can add this device.

                Examples:
                  kaiten id
                  kaiten id --json | jq -r .device_id
                """)

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Print the result as JSON.")
        var json = false

        func run() async throws {
            try await reportingErrors {
                let id = try global.app.deviceID()
                if json {
                    try Terminal.json(["device_id": id.description])
                } else {
                    print(id.description)
                }
            }
        }
    }
}
