import ArgumentParser
import Foundation
import KaitenApp

extension Kaiten {
    struct UI: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ui",
            abstract: "Print (or open) a link to the web page of the running `kaiten run`.",
            discussion: """
                The page is served by `kaiten run` on config.xml's <gui> address, beside the REST \
                API: browse a folder's global tree, tick what this device keeps (each tick is a \
                line of the selection file), see the plan that makes, and apply it. The link \
                carries a one-time token: opened once within two minutes, it becomes the \
                browser's session cookie (HttpOnly, SameSite=Strict); run `kaiten ui` again for \
                another browser. Loopback addresses only, unless <gui> says otherwise.

                Exit codes: 0 the link printed, 1 no service answers (start `kaiten run`) or its \
                REST API is off.

                Examples:
                  kaiten ui
                  kaiten ui --open
                """)

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Open the link with xdg-open too.")
        var open = false

        func run() async throws {
            try await reportingErrors {
                let link = try global.app.webPageLink()
                print(link)
                if open {
                    let opener = Process()
                    opener.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                    opener.arguments = ["xdg-open", link]
                    try opener.run()
                }
            }
        }
    }
}
