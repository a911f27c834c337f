import KaitenConfig
import KaitenService

/// Where a verb that needs the peers runs: syncthing keeps one connection per device, so while
/// a service (`kaiten run` or `serve`) holds them, a second process dialling would take them
/// away mid-transfer. Decided here, for every verb, by what the verb does with the peers.
public enum Route: Sendable {
    /// No service runs: this process does the work (and dials the peers, if it needs them).
    case here
    /// A service answers on its control socket: the verb goes through it.
    case service(ControlClient)
}

/// What a verb does with the peers, which decides its route.
public enum PeerUse: String, Sendable {
    /// Dials them for what the service can do on its own connections (apply, cat, get, thumb):
    /// through the service; refused beside a service that does not answer.
    case dialsThroughService
    /// Reads what the service knows when one answers (plan, conflicts), else works from the logs.
    case readsFromService
}

extension App {
    /// The route of `verb` in `opened`'s home.
    public func route(_ verb: String, _ use: PeerUse, in opened: KaitenHome) throws -> Route {
        if let service = ownService ?? ControlClient.running(opened.home) { return .service(service) }
        if use == .dialsThroughService { try Self.refuseBesideService(verb, home: opened) }
        return .here
    }

    /// The verbs that dial the peers themselves stand back while a service holds the
    /// connections. Said plainly, exit 1, nothing done.
    public static func refuseBesideService(_ verb: String, home: KaitenHome) throws {
        guard let service = ServiceRecord.running(home.home) else { return }
        var remedy = "stop it (e.g. `systemctl --user stop kaiten-run`), run `kaiten \(verb)`, and start it again"
        if verb == "apply" { remedy = "it applies what its --apply \(service.applyMode) admits by itself; for the rest, " + remedy }
        if verb == "cat" || verb == "get", let url = service.serveURL {
            remedy = "it serves on demand at \(url): `kaiten url FOLDER PATH` gives a link for curl or a player; or " + remedy
        }
        throw ServiceError("kaiten run (pid \(service.pid)) holds the peers' connections (syncthing takes one per device); \(remedy)")
    }
}
