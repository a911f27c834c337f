import Foundation
import KaitenFiles
import KaitenProtocol

/// This device's index ID per folder: a random non-zero number, made once and kept.
///
/// Peers remember what they last received from us under this ID. A zero ID would make
/// syncthing drop what it knows about us on every connect, and a changed one makes it start
/// over (bep-brief §4.2), so it is stored in `state/local-index-ids` and changes only when the
/// local index itself starts over (``renew(_:)``).
public struct LocalIndexIDs {
    public let path: String

    public init(home: Home) {
        path = (home.stateDirectory as NSString).appendingPathComponent("local-index-ids")
    }

    /// The ID for each folder, creating and saving the missing ones.
    public func ids(for folders: [String]) throws(ConfigError) -> [String: UInt64] {
        var known = try load()
        var changed = false
        for folder in folders where known[folder] == nil {
            known[folder] = UInt64.random(in: 1...UInt64.max)
            changed = true
        }
        if changed { try save(known) }
        return known
    }

    /// A new ID for `folder`, saved: peers then drop what they knew of this device's index of
    /// it and take a full index.
    public func renew(_ folder: String) throws(ConfigError) -> UInt64 {
        var known = try load()
        var fresh = UInt64.random(in: 1...UInt64.max)
        while fresh == known[folder] { fresh = UInt64.random(in: 1...UInt64.max) }
        known[folder] = fresh
        try save(known)
        return fresh
    }

    private func save(_ known: [String: UInt64]) throws(ConfigError) {
        let text = known.sorted { $0.key < $1.key }.map { "\(String($0.value, radix: 16)) \($0.key)\n" }.joined()
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try ConfigError.writing { () throws(FileWriteError) in try AtomicFile.write(Array(text.utf8), to: path, mode: 0o600) }
    }

    private func load() throws(ConfigError) -> [String: UInt64] {
        guard let data = FileManager.default.contents(atPath: path) else { return [:] }
        var result: [String: UInt64] = [:]
        for (number, line) in TextLines.split(String(decoding: data, as: UTF8.self)).enumerated() {
            let parts = line.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let id = UInt64(parts[0], radix: 16), id != 0 else {
                throw ConfigError(.invalidValue, file: path, line: number + 1, "expected \"HEX-ID FOLDER-ID\"")
            }
            result[String(parts[1])] = id
        }
        return result
    }
}

extension FileManager {
    fileprivate func createDirectory(atPath path: String, withIntermediateDirectories: Bool) throws(ConfigError) {
        do {
            try createDirectory(
                atPath: path, withIntermediateDirectories: withIntermediateDirectories, attributes: nil)
        } catch {
            throw ConfigError(.writeFailed, file: path, "cannot create directory: \(error.localizedDescription)")
        }
    }
}
