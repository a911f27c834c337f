import Foundation
import KaitenConfig
import KaitenProtocol
import Logging
import NIOHTTP1
import Synchronization

/// Global discovery (the HTTPS announce/lookup protocol, v2 paths): announces this device's
/// addresses to the servers that take announcements, and looks peers up on the servers that
/// answer lookups, with syncthing's timing (`lib/discover/global.go`): re-announce when the
/// server says (`Reannounce-After`) or after 30 min, after `Retry-After` or 5 min on an error;
/// a found device is remembered 5 min, a missing one for the server's `Retry-After` or 1 min.
public final class GlobalDiscovery: Sendable {
    public static let reannounceInterval: Duration = .seconds(30 * 60)
    public static let errorRetryInterval: Duration = .seconds(5 * 60)
    public static let positiveCacheTime: Duration = .seconds(5 * 60)
    public static let negativeCacheTime: Duration = .seconds(60)
    /// At most this many addresses are taken from one lookup answer; at most this long each.
    static let maximumAddresses = 64
    static let maximumAddressLength = 2048

    public let servers: [DiscoveryServer]
    private let identity: Identity
    private let logger: Logger
    private let warn: @Sendable (String) -> Void

    private struct CacheEntry {
        var addresses: [String]
        var until: ContinuousClock.Instant
    }

    private struct State {
        var cache: [DeviceID: CacheEntry] = [:]
        var announcers: [Task<Void, Never>] = []
        /// Per server, the last problem said (each said once until it changes).
        var said: [String: String] = [:]
        var lastAnnounce: [String: Result<Date, AnnounceFailure>] = [:]
    }

    public struct AnnounceFailure: Error, Sendable {
        public var reason: String
    }

    private let state = Mutex(State())

    public init(servers: [DiscoveryServer], identity: Identity, logger: Logger, warn: @escaping @Sendable (String) -> Void) {
        self.servers = servers
        self.identity = identity
        self.logger = logger
        self.warn = warn
    }

    // MARK: - Lookup

    /// The addresses the lookup servers know for `device` (the union, in server order), from
    /// the cache when it is fresh. A server that fails costs only its own answer.
    public func lookup(_ device: DeviceID) async -> [String] {
        let now = ContinuousClock.now
        if let cached = state.withLock({ $0.cache[device] }), cached.until > now { return cached.addresses }
        var found: [String] = []
        var cacheFor = Self.positiveCacheTime
        var missing = false
        for server in servers where server.looksUp {
            do {
                let addresses = try await lookup(device, on: server)
                for address in addresses where !found.contains(address) { found.append(address) }
            } catch let failure as LookupFailure {
                missing = true
                cacheFor = min(cacheFor, failure.retryAfter ?? Self.negativeCacheTime)
                if !failure.isNotFound { say(server, key: "lookup", "lookup of \(device.shortDescription) failed: \(failure.reason)") }
            } catch {
                missing = true
                cacheFor = min(cacheFor, Self.negativeCacheTime)
                say(server, key: "lookup", "lookup of \(device.shortDescription) failed: \(error)")
            }
        }
        if found.isEmpty && !missing { return [] }
        let until = ContinuousClock.now + (found.isEmpty ? cacheFor : Self.positiveCacheTime)
        state.withLock { $0.cache[device] = CacheEntry(addresses: found, until: until) }
        return found
    }

    struct LookupFailure: Error {
        var reason: String
        var retryAfter: Duration?
        var isNotFound = false
    }

    /// One server's answer: `{"seen": …, "addresses": [...]}`. Anything else is a failure
    /// named after the server, never a crash; addresses that are not strings are skipped.
    func lookup(_ device: DeviceID, on server: DiscoveryServer) async throws -> [String] {
        let response = try await DiscoveryHTTP.request(
            server, method: .GET, query: "device=\(device.description)", identity: nil, timeout: .seconds(10))
        let retry = response.seconds("Retry-After").map { Duration.seconds($0) }
        guard response.status == 200 else {
            throw LookupFailure(
                reason: response.status == 404 ? "not known to the server" : "HTTP \(response.status)", retryAfter: retry,
                isNotFound: response.status == 404)
        }
        return try Self.addresses(inLookupAnswer: response.body)
    }

    /// The addresses of a lookup answer, checked: a JSON object whose `addresses` is a list.
    static func addresses(inLookupAnswer body: [UInt8]) throws -> [String] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            throw LookupFailure(reason: "the answer is not a JSON object (\(body.count) bytes)")
        }
        guard let list = object["addresses"] as? [Any] else {
            throw LookupFailure(reason: "the answer has no \"addresses\" list")
        }
        let addresses = list.compactMap { $0 as? String }.filter { $0.utf8.count <= maximumAddressLength && AddressText($0) != nil }
        return Array(addresses.prefix(maximumAddresses))
    }

    // MARK: - Announcing

    /// Announces `addresses()` to every server that takes announcements, now and then again on
    /// syncthing's schedule, until ``close()``. An empty list is not announced (nothing to
    /// dial); the next attempt comes after the error interval.
    public func startAnnouncing(addresses: @escaping @Sendable () -> [String]) {
        let tasks = servers.filter(\.announces).map { server in
            Task { [weak self] in
                while !Task.isCancelled {
                    guard let self else { return }
                    let wait = await self.announceOnce(to: server, addresses: addresses())
                    try? await Task.sleep(for: wait)
                }
            }
        }
        state.withLock { $0.announcers += tasks }
    }

    /// One announcement; how long until the next one.
    func announceOnce(to server: DiscoveryServer, addresses: [String]) async -> Duration {
        let announced = Self.announceable(addresses)
        guard !announced.isEmpty else {
            record(server, .failure(AnnounceFailure(reason: "no address worth announcing (only loopback listeners)")))
            return Self.errorRetryInterval
        }
        let body = Array(((try? JSONSerialization.data(withJSONObject: ["addresses": announced])) ?? Data()))
        do {
            let response = try await DiscoveryHTTP.request(server, method: .POST, json: body, identity: identity, timeout: .seconds(10))
            if (200..<300).contains(response.status) {
                record(server, .success(Date()))
                return response.seconds("Reannounce-After").map { .seconds($0) } ?? Self.reannounceInterval
            }
            let why = String(decoding: response.body.prefix(200), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            record(server, .failure(AnnounceFailure(reason: "HTTP \(response.status)\(why.isEmpty ? "" : ": \(why)")")))
            return response.seconds("Retry-After").map { .seconds($0) } ?? Self.errorRetryInterval
        } catch {
            record(server, .failure(AnnounceFailure(reason: "\(error)")))
            return Self.errorRetryInterval
        }
    }

    /// What is worth announcing: no loopback, no port 0 (the server fills in an unspecified
    /// host with the address it sees the announcement come from).
    static func announceable(_ addresses: [String]) -> [String] {
        addresses.filter { text in
            guard let address = AddressText(text) else { return false }
            return !address.isLoopback && address.port != 0
        }
    }

    private func record(_ server: DiscoveryServer, _ result: Result<Date, AnnounceFailure>) {
        state.withLock { $0.lastAnnounce[server.url] = result }
        switch result {
        case .success:
            let was = state.withLock { $0.said.removeValue(forKey: server.url + " announce") }
            if was != nil { warn("global discovery: announced to \(server.url) again") }
        case .failure(let failure):
            say(server, key: "announce", "could not announce: \(failure.reason); trying again later")
        }
    }

    /// Each server's last announcement: when it succeeded, or why it failed.
    public func announcements() -> [String: Result<Date, AnnounceFailure>] {
        state.withLock { $0.lastAnnounce }
    }

    private func say(_ server: DiscoveryServer, key: String, _ text: String) {
        let isNew = state.withLock { state -> Bool in
            guard state.said[server.url + " " + key] != text else { return false }
            state.said[server.url + " " + key] = text
            return true
        }
        if isNew { warn("global discovery (\(server.url)): \(text)") } else { logger.debug("global discovery (\(server.url)): \(text)") }
    }

    public func close() {
        for task in state.withLock({ $0.announcers }) { task.cancel() }
    }
}
