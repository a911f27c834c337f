import Foundation
import KaitenConfig
import KaitenIndex
import KaitenProtocol

/// The syncthing version each peer last said it runs (its Hello), kept in
/// `state/peer-versions`, and what follows from it: the conflict rule a folder's global index
/// is computed with.
///
/// Syncthing 2.0 changed how concurrent versions are ordered (a modification no longer beats a
/// deletion by itself; the newer change wins). Kaiten orders them as the folder's peers do: the
/// 2.x rule when every peer sharing the folder whose version is known runs 2.x, the 1.x rule
/// otherwise. In a mixed cluster the peers themselves disagree; the 1.x rule is then the one that
/// never prefers a deletion over an edit, so it is the one that cannot lose data.
public enum PeerGenerations {
    static func path(_ home: Home) -> String { (home.stateDirectory as NSString).appendingPathComponent("peer-versions") }

    /// Device → client version (`v2.1.3`), as last announced.
    public static func load(_ home: Home) -> [DeviceID: String] {
        guard let text = try? String(contentsOfFile: path(home), encoding: .utf8) else { return [:] }
        var versions: [DeviceID: String] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let device = try? DeviceID(String(parts[0])) else { continue }
            versions[device] = String(parts[1])
        }
        return versions
    }

    /// Records what peers said in their Hello (only syncthing's own versions count).
    public static func record(_ hellos: [DeviceID: BEPHello], home: Home) {
        guard !hellos.isEmpty else { return }
        var versions = load(home)
        var changed = false
        for (device, hello) in hellos {
            let version = hello.clientName == "syncthing" ? hello.clientVersion : "\(hello.clientName) \(hello.clientVersion)"
            if versions[device] != version {
                versions[device] = version
                changed = true
            }
        }
        guard changed else { return }
        try? FileManager.default.createDirectory(atPath: home.stateDirectory, withIntermediateDirectories: true)
        let text = versions.keys.sorted().map { "\($0) \(versions[$0]!)\n" }.joined()
        try? AtomicFile.write(Array(text.utf8), to: path(home), mode: 0o600)
    }

    /// The major version in `v2.1.3` (nil for another client or a version that does not parse).
    static func major(_ version: String) -> Int? {
        guard version.hasPrefix("v"), let first = version.dropFirst().split(separator: ".").first else { return nil }
        return Int(first)
    }

    /// The rule for one folder, from the versions of the peers it is shared with.
    public static func conflictRule(folder: FolderConfiguration, home: KaitenHome) -> ConflictRule {
        let versions = load(home.home)
        let me = home.identity.deviceID
        let known = folder.devices.filter { $0 != me }.compactMap { versions[$0].flatMap(major) }
        return !known.isEmpty && known.allSatisfy({ $0 >= 2 }) ? .syncthing2 : .syncthing1
    }

    /// Opens a folder's index log with the folder's conflict rule set.
    public static func openLog(home: KaitenHome, folder id: String, readOnly: Bool, warn: (String) -> Void = { _ in }) throws
        -> IndexLog
    {
        let log = try IndexLog.open(path: home.home.indexLogPath(folderID: id), folderID: id, readOnly: readOnly, warn: warn)
        if let folder = home.config.folder(id: id) { log.conflictRule = conflictRule(folder: folder, home: home) }
        return log
    }
}
