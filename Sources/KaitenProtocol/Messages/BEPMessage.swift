import SwiftProtobuf

/// One BEP message after the Hello, decoded.
public enum BEPMessage: Sendable {
    case clusterConfig(BEPClusterConfig)
    case index(BEPIndex)
    case indexUpdate(BEPIndexUpdate)
    case request(BEPRequest)
    case response(BEPResponse)
    case downloadProgress(BEPDownloadProgress)
    case ping
    case close(BEPClose)

    /// The header type that announces this message.
    public var type: BEPMessageType {
        switch self {
        case .clusterConfig: return .clusterConfig
        case .index: return .index
        case .indexUpdate: return .indexUpdate
        case .request: return .request
        case .response: return .response
        case .downloadProgress: return .downloadProgress
        case .ping: return .ping
        case .close: return .close
        }
    }

    /// The protobuf body.
    public func serializedBody() throws -> [UInt8] {
        switch self {
        case .clusterConfig(let m): return try m.serializedBytes()
        case .index(let m): return m.wireBytes()
        case .indexUpdate(let m): return m.wireBytes()
        case .request(let m): return try m.serializedBytes()
        case .response(let m): return try m.serializedBytes()
        case .downloadProgress(let m): return try m.serializedBytes()
        case .ping: return []
        case .close(let m): return try m.serializedBytes()
        }
    }

    /// Decodes a body of a known type; `nil` for a type this version does not know.
    static func decode(type: BEPMessageType, body: some SwiftProtobufContiguousBytes) throws -> BEPMessage? {
        switch type {
        case .clusterConfig: return .clusterConfig(try BEPClusterConfig(serializedBytes: body))
        case .index: return .index(try BEPIndex(serializedBytes: body))
        case .indexUpdate: return .indexUpdate(try BEPIndexUpdate(serializedBytes: body))
        case .request: return .request(try BEPRequest(serializedBytes: body))
        case .response: return .response(try BEPResponse(serializedBytes: body))
        case .downloadProgress: return .downloadProgress(try BEPDownloadProgress(serializedBytes: body))
        case .ping: return .ping
        case .close: return .close(try BEPClose(serializedBytes: body))
        case .UNRECOGNIZED: return nil
        }
    }
}

/// What the frame decoder produces.
public enum BEPFrame: Sendable {
    /// The peer's Hello, the first thing on every connection.
    case hello(BEPHello)
    /// A message; `wasCompressed` says whether its body came LZ4-compressed.
    case message(BEPMessage, wasCompressed: Bool)
    /// A message type this version does not know; skipped, as syncthing skips them.
    case unknown(type: Int)
}
