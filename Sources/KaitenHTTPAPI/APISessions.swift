import Foundation
import Synchronization

/// The browser's credentials the server hands out and remembers: CSRF tokens (one per page
/// load, as syncthing issues them, the newest few kept) and login sessions. In memory, for the
/// life of the service: a reload keeps them, a restart logs browsers out.
public final class APISessions: Sendable {
    /// syncthing keeps the 25 newest CSRF tokens.
    static let csrfTokensKept = 25
    /// Sessions beyond this many push out the oldest.
    static let sessionsKept = 1000

    /// A login link is good for this long, once.
    static let loginTokenLifetime: TimeInterval = 120

    private struct State {
        var csrf: [String] = []
        var sessions: [String: Date] = [:]
        var loginTokens: [String: Date] = [:]
    }
    private let state = Mutex(State())

    public init() {}

    /// A new CSRF token, remembered.
    func issueCSRFToken() -> String {
        let token = Self.randomToken()
        state.withLock { state in
            state.csrf.insert(token, at: 0)
            if state.csrf.count > Self.csrfTokensKept { state.csrf.removeLast(state.csrf.count - Self.csrfTokensKept) }
        }
        return token
    }

    func isCSRFToken(_ token: String) -> Bool {
        state.withLock { state in state.csrf.contains { APIAccess.equal($0, token) } }
    }

    /// A one-time token for `kaiten ui`'s link.
    public func issueLoginToken(now: Date = Date()) -> String {
        let token = Self.randomToken()
        state.withLock { state in
            state.loginTokens = state.loginTokens.filter { $0.value > now }
            state.loginTokens[token] = now.addingTimeInterval(Self.loginTokenLifetime)
        }
        return token
    }

    /// Whether `token` is a login token not used yet and not expired; it is used up either way.
    func redeemLoginToken(_ token: String, now: Date = Date()) -> Bool {
        state.withLock { state in
            guard let key = state.loginTokens.keys.first(where: { APIAccess.equal($0, token) }) else { return false }
            let expiry = state.loginTokens.removeValue(forKey: key)!
            return expiry > now
        }
    }

    /// A new session, valid until `expiry`.
    func startSession(until expiry: Date) -> String {
        let token = Self.randomToken()
        state.withLock { state in
            let now = Date()
            state.sessions = state.sessions.filter { $0.value > now }
            if state.sessions.count >= Self.sessionsKept, let oldest = state.sessions.min(by: { $0.value < $1.value }) {
                state.sessions[oldest.key] = nil
            }
            state.sessions[token] = expiry
        }
        return token
    }

    func isSession(_ token: String, at now: Date = Date()) -> Bool {
        state.withLock { state in
            guard let expiry = state.sessions.first(where: { APIAccess.equal($0.key, token) })?.value else { return false }
            return expiry > now
        }
    }

    func endSession(_ token: String) {
        _ = state.withLock { $0.sessions.removeValue(forKey: token) }
    }

    /// 32 random bytes as 64 letters and digits.
    static func randomToken() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<64).map { _ in alphabet[Int(generator.next(upperBound: UInt64(alphabet.count)))] })
    }
}
