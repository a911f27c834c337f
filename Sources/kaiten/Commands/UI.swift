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

                With --site FOLDER[/DIR], the link is instead to a read-only web site made of \
                that directory of the folder's global tree, as Sushitrain's folder server: \
                each directory's index.html, every file with its content type, fetched from the \
                peers on demand and verified, nothing kept. The address is signed (good for \
                --ttl) and opens only that subtree; relative links work, links from the root \
                (/style.css) do not. Pages run in an origin of their own, without this host's \
                cookies. Needs the on-demand server of `kaiten run` (or `kaiten serve`).

                Exit codes: 0 the link printed, 1 no service answers (start `kaiten run`) or its \
                REST API is off, or the site's directory is not in the global index.

                Examples:
                  kaiten ui
                  kaiten ui --open
                  kaiten ui --site docs/www --ttl 86400
                """)

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Open the link with xdg-open too.")
        var open = false

        @Option(help: ArgumentHelp("A web site of this folder's directory instead of the page.", valueName: "folder[/dir]"))
        var site: String?

        @Option(help: ArgumentHelp("How long the site's address works, in seconds.", valueName: "seconds"))
        var ttl: Int64 = 3600

        func validate() throws {
            guard ttl > 0 else { throw ValidationError("--ttl takes a positive number of seconds") }
        }

        func run() async throws {
            try await reportingErrors {
                let link: String
                if let site {
                    let parts = site.split(separator: "/", maxSplits: 1)
                    link = try global.app.siteLink(String(parts.first ?? ""), root: parts.count > 1 ? String(parts[1]) : "", seconds: ttl)
                } else {
                    link = try global.app.webPageLink()
                }
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
