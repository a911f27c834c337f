import Foundation
import KaitenConfig
import KaitenHTTPAPI
import KaitenPeer
import NIOSSL
import KaitenServer
import KaitenStream
import KaitenSync
import KaitenTransfer
import Synchronization

/// What clients on this machine reach while a Kaiten holds the peers' connections: the control
/// socket (the verbs run beside it: plan, apply, cat, get) and, when asked, the on-demand HTTP
/// server (signed links, ranges, thumbnails), both over files read on the live sessions.
/// `kaiten serve` and each configuration of `kaiten run` start them here, the same way.
public final class LocalEndpoints: Sendable {
    /// The on-demand HTTP server to run.
    public struct HTTP: Sendable {
        public var host: String
        public var port: Int
        /// Makes `/thumb`'s thumbnails over these files (and is closed after); nil: none.
        public var thumbnails: (@Sendable (RemoteFiles) async -> (make: StreamServer.ThumbnailMaker, close: @Sendable () async -> Void)?)?
        public var log: @Sendable (String) -> Void

        public init(
            host: String, port: Int,
            thumbnails: (@Sendable (RemoteFiles) async -> (make: StreamServer.ThumbnailMaker, close: @Sendable () async -> Void)?)?,
            log: @escaping @Sendable (String) -> Void
        ) {
            self.host = host
            self.port = port
            self.thumbnails = thumbnails
            self.log = log
        }
    }

    /// syncthing's REST API, served on config.xml's `<gui>` address.
    struct API: Sendable {
        var gui: GUIConfiguration
        var state: ServiceAPIState
        var sessions: APISessions
        /// Where https-cert.pem and https-key.pem are (made on first use).
        var home: Home
        var log: @Sendable (String) -> Void
        /// Where the listener's start (or why it did not start) is said: a kind and a line.
        var said: @Sendable (String, String) -> Void
    }

    public let files: RemoteFiles
    /// The HTTP server's address, once it listens.
    public let baseURL: String?
    let control: ControlServer
    private let controlTask: Task<Void, Never>
    private let http: Task<Void, Error>?
    private let stopHTTP: HTTPStop
    private let closeThumbnails: (@Sendable () async -> Void)?
    private let api = Mutex<(server: APIServer, task: Task<Void, Never>)?>(nil)

    private init(
        files: RemoteFiles, baseURL: String?, control: ControlServer, controlTask: Task<Void, Never>, http: Task<Void, Error>?,
        stopHTTP: HTTPStop, closeThumbnails: (@Sendable () async -> Void)?
    ) {
        self.files = files
        self.baseURL = baseURL
        self.control = control
        self.controlTask = controlTask
        self.http = http
        self.stopHTTP = stopHTTP
        self.closeThumbnails = closeThumbnails
    }

    /// Opens the control socket (a failure is said through `controlFailed`: the process goes on
    /// without it) and, with `http`, binds the HTTP server: a bind that fails is thrown.
    /// - Parameters:
    ///   - peerAddresses: where peers reach this device, for the server's record (`kaiten url`).
    ///   - events: where a client's apply is logged as the service's rounds are (nil: `controlLog`).
    public static func start(
        home: KaitenHome, files: RemoteFiles, peerAddresses: [String], folders: [String], role: String, stop: StopSignal,
        http: HTTP?, controlLog: @escaping @Sendable (String) -> Void, events: (@Sendable (ServiceEvent) -> Void)? = nil,
        controlFailed: @escaping @Sendable (String) -> Void
    ) async throws -> LocalEndpoints {
        let control = ControlServer(
            home: home, sessions: files.sessions, files: files, folders: folders, role: role, stop: stop, log: controlLog, events: events)
        let controlTask = Task {
            do { try await control.run() } catch { controlFailed("no control socket, so apply, cat and get cannot work beside this \(role == "run" ? "service" : "server"): \(error)") }
        }
        let stopHTTP = HTTPStop()
        guard let http else {
            return LocalEndpoints(
                files: files, baseURL: nil, control: control, controlTask: controlTask, http: nil, stopHTTP: stopHTTP, closeThumbnails: nil)
        }
        // What is open is closed again when the HTTP server cannot start.
        func abandon(_ error: any Error, thumbnails: (@Sendable () async -> Void)? = nil) async -> any Error {
            await thumbnails?()
            control.close()
            _ = await controlTask.result
            return error
        }
        let signer: URLSigner
        do {
            signer = try URLSigner.load(home: home.home)
        } catch {
            throw await abandon(error)
        }
        let thumbnails = await http.thumbnails?(files)
        let server = StreamServer(files: files, signer: signer, peerAddresses: peerAddresses, thumbnails: thumbnails?.make, log: http.log)
        // Listening, or why not: the server's task says which first.
        let (ready, readiness) = AsyncStream<Result<String, Error>>.makeStream()
        let task = Task {
            do {
                try await server.run(host: http.host, port: http.port, ready: { readiness.yield(.success($0)) }) { stop in
                    stopHTTP.set(stop)
                }
                readiness.finish()
            } catch {
                readiness.yield(.failure(error))
                readiness.finish()
                throw error
            }
        }
        var first = ready.makeAsyncIterator()
        switch await first.next() {
        case .success(let base)?:
            return LocalEndpoints(
                files: files, baseURL: base, control: control, controlTask: controlTask, http: task, stopHTTP: stopHTTP,
                closeThumbnails: thumbnails?.close)
        case .failure(let error)?:
            throw await abandon(error, thumbnails: thumbnails?.close)
        case nil:
            throw await abandon(
                ServiceError("the HTTP server at \(http.host):\(http.port) ended before it listened"), thumbnails: thumbnails?.close)
        }
    }

    /// Until the HTTP server stops (at once without one).
    public func httpEnded() async throws {
        try await http?.value
    }

    /// Starts the REST API on `api.gui`'s address. One that cannot (disabled, TLS asked, the
    /// address taken) is said and the service goes on without it: the peers and the folders
    /// do not depend on it.
    /// - Returns: its base URL, once it listens.
    func startAPI(_ api: API) async -> String? {
        guard api.gui.isEnabled else { return nil }
        guard let (host, port) = GUIConfiguration.hostAndPort(api.gui.address) else {
            api.said("warning", "the REST API is off: config.xml's GUI address \"\(api.gui.address)\" is not HOST:PORT")
            return nil
        }
        var tls: NIOSSLContext?
        if api.gui.useTLS {
            do {
                let (certificate, key) = try HTTPSCertificate.loadOrCreate(api.home)
                tls = try APIServer.tlsContext(certificatePEM: certificate, keyPEM: key)
            } catch {
                // Never plain HTTP where HTTPS was asked for.
                api.said("warning", "the REST API is off: config.xml asks for TLS on \(api.gui.address), and its certificate cannot be used: \(error)")
                return nil
            }
        }
        let access = APIAccess(
            gui: api.gui, listensOnLoopback: Self.isLoopback(host), deviceShortID: api.state.myID.shortDescription, secure: tls != nil)
        let server = APIServer(access: access, sessions: api.sessions, tls: tls, log: api.log)
        var address = api.gui.address
        do {
            let bound = try await server.bind(host: host, port: port)
            // The state says the address bound (port 0: the one the system chose).
            address = "\(host.contains(":") ? "[\(host)]" : host):\(bound)"
            api.state.guiAddressUsed = address
            server.answer(with: APIRouter(state: api.state, version: APIVersion(version: KaitenVersion.current)))
        } catch {
            api.said("warning", "the REST API is off: cannot listen on \(api.gui.address): \(error)")
            return nil
        }
        let task = Task { await server.run() }
        self.api.withLock { $0 = (server, task) }
        let url = (tls == nil ? "http://" : "https://") + address
        api.said("api", "syncthing's REST API on \(url)")
        return url
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    /// Stops the HTTP servers, then the control socket (whose clients get its grace to finish).
    public func close() async {
        if let (server, task) = api.withLock({ $0 }) {
            server.close()
            await task.value
        }
        stopHTTP.run()
        _ = await http?.result
        await closeThumbnails?()
        control.close()
        _ = await controlTask.result
    }

    /// Stops the HTTP server only (serve's stop: the rest follows when its run ends).
    public func stopServing() {
        stopHTTP.run()
    }
}

/// How to stop the HTTP server, once it gave it.
final class HTTPStop: Sendable {
    private let stop = Mutex<(@Sendable () -> Void)?>(nil)

    func set(_ stop: @escaping @Sendable () -> Void) { self.stop.withLock { $0 = stop } }

    func run() { stop.withLock { $0 }?() }
}
