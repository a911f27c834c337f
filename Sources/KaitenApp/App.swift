import Foundation
import KaitenConfig
import KaitenIndex
import KaitenService
import KaitenSync
import Logging

/// The one composition root every front-end calls (the command line today; the mount, the
/// HTTP API and the page next): a home, a logger, and where a verb's remarks go. Each verb is
/// one call on it that returns a value or throws; the front-end renders, and maps the outcome
/// to an exit code with `ExitStatus(for:)`.
public struct App: Sendable {
    public let home: Home
    public let logger: Logger
    public let diagnostics: Diagnostics
    /// Set when this App is the running service's own (its REST API's use cases): the verbs
    /// that go through the service reach it without asking who answers on the control socket,
    /// a blocking exchange that the service's own threads would have to answer.
    var ownService: ControlClient?

    public init(home: Home, logger: Logger, diagnostics: Diagnostics) {
        self.home = home
        self.logger = logger
        self.diagnostics = diagnostics
    }

    /// The home a user names: `--home DIR`, else $KAITEN_HOME, else
    /// ${XDG_CONFIG_HOME:-~/.config}/kaiten.
    public init(homeArgument: String?, environment: [String: String], logger: Logger, diagnostics: Diagnostics) {
        self.init(home: Home.resolve(explicit: homeArgument, environment: environment), logger: logger, diagnostics: diagnostics)
    }

    /// Opens the home, saying what config.xml asks that Kaiten refuses to do (a folder shared
    /// with an untrusted device).
    public func open() throws -> KaitenHome {
        let opened = try KaitenHome.open(home)
        for refusal in opened.config.sharingRefusals { diagnostics.warning(refusal) }
        return opened
    }

    /// For verbs that only read (`status`, `ls`, `conflicts`): while an edit of config.xml does
    /// not load and a service runs on its last good configuration, that configuration, with
    /// the error said. Verbs that write never fall back (they would write over the edit).
    public func openForReading() throws -> KaitenHome {
        do {
            return try open()
        } catch let error as ConfigError where error.file == home.configPath {
            guard let service = ServiceRecord.running(home),
                let running = try? KaitenHome.open(home, configPath: home.runningConfigPath)
            else { throw error }
            diagnostics.error("\(error)")
            diagnostics.error(
                "note: the service (pid \(service.pid)) runs on the last good configuration; shown here until config.xml loads again")
            return running
        }
    }

    /// The folders a verb names (each must be configured), or all of them.
    public static func folders(_ requested: [String], in home: KaitenHome) throws -> [String] {
        let named = try home.config.folders(named: requested)
        return requested.isEmpty ? named.map(\.id) : requested
    }

    /// A configured folder's global index log, read-only.
    public func openLog(_ folder: String, in home: KaitenHome) throws -> IndexLog {
        _ = try Self.folders([folder], in: home)
        return try PeerGenerations.openLog(home: home, folder: folder, readOnly: true, warn: diagnostics.error)
    }
}

/// Where a verb's remarks go: for the command line, stderr (`kaiten: …`); for a service, its log.
public struct Diagnostics: Sendable {
    /// A failure or a warning the user must see, prefixed by the front-end.
    public let error: @Sendable (String) -> Void
    /// Something config.xml or the state asks that Kaiten declines.
    public let warning: @Sendable (String) -> Void
    /// A remark (what the verb is doing), never a result.
    public let note: @Sendable (String) -> Void

    public init(
        error: @escaping @Sendable (String) -> Void, warning: @escaping @Sendable (String) -> Void,
        note: @escaping @Sendable (String) -> Void
    ) {
        self.error = error
        self.warning = warning
        self.note = note
    }

    /// Says nothing: for front-ends that report outcomes only.
    public static let silent = Diagnostics(error: { _ in }, warning: { _ in }, note: { _ in })
}
