import Foundation
import KaitenConfig
import KaitenHTTPAPI
import KaitenPeer
import NIOSSL
import Synchronization

/// The REST API's listener, kept across reloads: a configuration whose `<gui>` is unchanged
/// goes on answering on the same socket with the next configuration's state swapped in, so a
/// tool's connection and its waiting polls are not cut by a change it may have made itself
/// (`syncthing cli config … set`). A changed `<gui>` (address, TLS, key, user) gets a new
/// listener, on the port it had when the configuration says port 0.
final class RESTListener: Sendable {
    /// What one configuration gives the REST API.
    struct Configuration: Sendable {
        var gui: GUIConfiguration
        var state: ServiceAPIState
        var sessions: APISessions
        /// Where https-cert.pem and https-key.pem are (made on first use).
        var home: Home
        var log: @Sendable (String) -> Void
        /// Where the listener's start (or why it did not start) is said: a kind and a line.
        var said: @Sendable (String, String) -> Void
        /// What this listener is, for those lines: `<gui>`'s API, or the page's own (`--ui`).
        var role = Role.api
    }

    enum Role: Sendable {
        case api, page

        /// The event kind that says where it listens.
        var kind: String { self == .api ? "api" : "ui" }
        /// Where it listens, said with its URL.
        var serving: String { self == .api ? "syncthing's REST API on" : "the web page on" }
        /// Why it does not listen, said before the reason.
        var off: String { self == .api ? "the REST API is off" : "the web page's own listener is off" }
        /// The address it was given.
        var address: String { self == .api ? "config.xml's GUI address" : "the --ui address" }
        /// What asked for HTTPS.
        var tls: String { self == .api ? "config.xml asks for TLS" : "--allow-remote asks for TLS" }
    }

    private struct Open {
        var gui: GUIConfiguration
        var server: APIServer
        var task: Task<Void, Never>
        var port: Int
        var url: String
    }
    private let open = Mutex<Open?>(nil)

    /// Serves `configuration` from now on; returns the base URL, or nil when the API is off
    /// (disabled, or it cannot listen: said, and the service goes on without it).
    func serve(_ configuration: Configuration) async -> String? {
        let router = APIRouter(state: configuration.state, version: APIVersion(version: KaitenVersion.current))
        let previous = open.withLock { $0 }
        if let previous, previous.gui == configuration.gui {
            configuration.state.guiAddressUsed = String(previous.url.split(separator: "/").last ?? "")
            previous.server.answer(with: router)
            return previous.url
        }
        if let previous {
            previous.server.close()
            await previous.task.value
            open.withLock { $0 = nil }
        }
        return await start(configuration, router: router, previousPort: previous?.port)
    }

    private func start(_ api: Configuration, router: APIRouter, previousPort: Int?) async -> String? {
        guard api.gui.isEnabled else { return nil }
        guard var (host, port) = GUIConfiguration.hostAndPort(api.gui.address) else {
            api.said("warning", "\(api.role.off): \(api.role.address) \"\(api.gui.address)\" is not HOST:PORT")
            return nil
        }
        var tls: NIOSSLContext?
        if api.gui.useTLS {
            do {
                let (certificate, key) = try HTTPSCertificate.loadOrCreate(api.home)
                tls = try APIServer.tlsContext(certificatePEM: certificate, keyPEM: key)
            } catch {
                // Never plain HTTP where HTTPS was asked for.
                api.said("warning", "\(api.role.off): \(api.role.tls) on \(api.gui.address), and its certificate cannot be used: \(error)")
                return nil
            }
        }
        let access = APIAccess(
            gui: api.gui, listensOnLoopback: Self.isLoopback(host), deviceShortID: api.state.myID.shortDescription, secure: tls != nil)
        let server = APIServer(access: access, sessions: api.sessions, tls: tls, log: api.log)
        let bound: Int
        do {
            // Port 0: the port the system chose before, when there was one and it is free.
            if port == 0, let previousPort, let again = try? await server.bind(host: host, port: previousPort) {
                bound = again
            } else {
                bound = try await server.bind(host: host, port: port)
            }
        } catch {
            api.said("warning", "\(api.role.off): cannot listen on \(api.gui.address): \(error)")
            return nil
        }
        port = bound
        if host.contains(":") { host = "[\(host)]" }
        let address = "\(host):\(bound)"
        api.state.guiAddressUsed = address
        server.answer(with: router)
        let task = Task { await server.run() }
        let url = (tls == nil ? "http://" : "https://") + address
        open.withLock { $0 = Open(gui: api.gui, server: server, task: task, port: bound, url: url) }
        api.said(api.role.kind, "\(api.role.serving) \(url)")
        return url
    }

    var isServing: Bool { open.withLock { $0 != nil } }

    /// Stops listening: waiting polls answer what they have, connections close.
    func close() async {
        guard let previous = open.withLock({ state -> Open? in
            defer { state = nil }
            return state
        }) else { return }
        previous.server.close()
        await previous.task.value
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}
