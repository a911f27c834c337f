import Foundation
import KaitenConfig
import KaitenHTTPAPI
import KaitenPeer
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

    public let files: RemoteFiles
    /// The HTTP server's address, once it listens.
    public let baseURL: String?
    let control: ControlServer
    private let controlTask: Task<Void, Never>
    private let http: Task<Void, Error>?
    private let stopHTTP: HTTPStop
    private let closeThumbnails: (@Sendable () async -> Void)?

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
        controlFailed: @escaping @Sendable (String) -> Void, loginToken: (@Sendable () -> String?)? = nil
    ) async throws -> LocalEndpoints {
        let control = ControlServer(
            home: home, sessions: files.sessions, files: files, folders: folders, role: role, stop: stop, log: controlLog, events: events,
            loginToken: loginToken)
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

    /// Stops the HTTP server, then the control socket (whose clients get its grace to finish).
    public func close() async {
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
