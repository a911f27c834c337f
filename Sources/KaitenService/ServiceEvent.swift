import Foundation

/// One thing the service did or saw, for its log (a line, or an NDJSON event).
public struct ServiceEvent: Sendable, Encodable {
    /// The version of the event schema (Docs/events.md), on every JSON event of every verb.
    public static let schemaVersion = 1

    public var time: Date
    /// `started`, `peer`, `plan`, `conflict`, `done`, `failed`, `kept`, `applied`, `config`,
    /// `control`, `error`, `stopped`… (Docs/events.md). `type` in JSON.
    public var kind: String
    public var folder: String?
    public var path: String?
    public var action: String?
    public var message: String

    enum CodingKeys: String, CodingKey {
        case version = "v", time, kind = "type", folder, path, action, message
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(Self.schemaVersion, forKey: .version)
        try container.encode(time, forKey: .time)
        try container.encode(kind, forKey: .kind)
        try container.encodeIfPresent(folder, forKey: .folder)
        try container.encodeIfPresent(path, forKey: .path)
        try container.encodeIfPresent(action, forKey: .action)
        try container.encode(message, forKey: .message)
    }

    public init(_ kind: String, folder: String? = nil, path: String? = nil, action: String? = nil, _ message: String) {
        time = Date()
        self.kind = kind
        self.folder = folder
        self.path = path
        self.action = action
        self.message = message
    }
}
