import Foundation

/// One request to the REST API, as the router sees it: no socket, so every decision about it
/// can be tested with values.
public struct APIRequest: Sendable {
    public var method: String
    /// The path without the query: `/rest/system/status`.
    public var path: String
    public var query: [String: String]
    /// Header values by lowercased name (the first of each).
    public var headers: [String: String]
    public var body: [UInt8]

    /// The request target as sent, query included.
    public var uri: String

    public init(method: String, uri: String, headers: [String: String] = [:], body: [UInt8] = []) {
        self.method = method
        self.uri = uri
        let components = URLComponents(string: uri)
        self.path = components?.percentEncodedPath.removingPercentEncoding ?? uri
        var query: [String: String] = [:]
        for item in components?.queryItems ?? [] where query[item.name] == nil { query[item.name] = item.value ?? "" }
        self.query = query
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        self.body = body
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// The answer: a status, a content type and a body.
public struct APIResponse: Sendable, Equatable {
    public var status: Int
    public var contentType: String
    public var body: [UInt8]
    /// Headers beyond the ones every answer has: Set-Cookie, WWW-Authenticate, Location.
    public var headers: [Header] = []
    /// Answered by the loopback server on this port at this path (and query) instead: its
    /// answer is passed on as it comes (the page's media through `/ondemand/`).
    public var forward: Forward?
    /// What the service does once this answer is written: a restart or a shutdown ends the
    /// listener the answer goes out on, so it waits for the answer.
    public var afterwards: Afterwards?

    public enum Afterwards: Sendable, Equatable {
        case restart, shutdown
    }

    public struct Forward: Sendable, Equatable {
        public var port: Int
        public var uri: String
    }

    public struct Header: Sendable, Equatable {
        public var name: String
        public var value: String

        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    public init(status: Int, contentType: String, body: [UInt8], headers: [Header] = []) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.headers = headers
    }

    /// This answer with `headers` added.
    public func adding(_ more: [Header]) -> APIResponse {
        var copy = self
        copy.headers += more
        return copy
    }

    /// JSON indented as syncthing indents it.
    public static func json(_ object: Any, status: Int = 200) -> APIResponse {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return APIResponse(status: status, contentType: "application/json; charset=utf-8", body: Array(data) + [0x0A])
    }

    /// A plain-text answer, as syncthing's http.Error writes it.
    public static func text(_ message: String, status: Int) -> APIResponse {
        APIResponse(status: status, contentType: "text/plain; charset=utf-8", body: Array((message + "\n").utf8))
    }

    /// 200 with no body: how syncthing answers a write that worked.
    public static let empty = APIResponse(status: 200, contentType: "text/plain; charset=utf-8", body: [])

    public static func notFound(_ message: String = "404 page not found") -> APIResponse { .text(message, status: 404) }
}

/// Times as syncthing writes them (RFC 3339, with the fraction of a second when there is one).
enum APITime {
    static func string(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }

    /// A file's time, to the nanosecond as syncthing writes it (`2026-11-27T03:44:18.824736889Z`).
    static func string(nanoseconds: Int64) -> String {
        var seconds = nanoseconds / 1_000_000_000
        var fraction = nanoseconds % 1_000_000_000
        if fraction < 0 {
            seconds -= 1
            fraction += 1_000_000_000
        }
        let date = Date(timeIntervalSince1970: TimeInterval(seconds))
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        let whole = formatter.string(from: date)
        guard fraction > 0 else { return whole }
        var digits = String(format: "%09lld", fraction)
        while digits.hasSuffix("0") { digits.removeLast() }
        return whole.dropLast() + "." + digits + "Z"
    }

    /// Go's zero time, which syncthing shows for "never".
    static let never = "0001-01-01T00:00:00Z"
}
