import Foundation
import Synchronization
import KaitenFiles
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
        for line in TextLines.nonEmpty(text) {
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

/// What each peer said it holds when an index sync began (its ClusterConfig's index ID and max
/// sequence), kept in `state/index-expected/<folder>`: a log whose checkpoint is behind it holds
/// a partial index (the sync was interrupted), and `status`, `ls` and `plan` say so.
public enum IndexCompleteness {
    static func path(_ home: Home, folder: String) -> String {
        let name = folder.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? folder
        return (home.stateDirectory as NSString).appendingPathComponent("index-expected/\(name)")
    }

    /// The exchanges under way in this process: a peer whose index is still coming in is not
    /// partial, not yet (a service's round may look while a peer's exchange runs).
    private static let exchanging = Mutex<Set<String>>([])

    private static func key(_ home: Home, _ folder: String, _ device: DeviceID) -> String {
        "\(home.path)\u{0}\(folder)\u{0}\(device)"
    }

    /// Records the target of a sync before the first batch arrives; the sync is under way until
    /// `exchangeEnded`.
    public static func expect(_ home: Home, folder: String, device: DeviceID, indexID: UInt64, maxSequence: Int64) {
        _ = exchanging.withLock { $0.insert(key(home, folder, device)) }
        var all = load(home, folder: folder)
        guard all[device]?.indexID != indexID || all[device]?.maxSequence != maxSequence else { return }
        all[device] = (indexID, maxSequence)
        let file = path(home, folder: folder)
        try? FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let text = all.keys.sorted().map { "\($0) \(String(all[$0]!.indexID, radix: 16)) \(all[$0]!.maxSequence)\n" }.joined()
        try? AtomicFile.write(Array(text.utf8), to: file, mode: 0o600)
    }

    static func load(_ home: Home, folder: String) -> [DeviceID: (indexID: UInt64, maxSequence: Int64)] {
        guard let text = try? String(contentsOfFile: path(home, folder: folder), encoding: .utf8) else { return [:] }
        var all: [DeviceID: (indexID: UInt64, maxSequence: Int64)] = [:]
        for line in TextLines.nonEmpty(text) {
            let parts = line.split(separator: " ")
            guard parts.count == 3, let device = try? DeviceID(String(parts[0])), let id = UInt64(parts[1], radix: 16),
                let sequence = Int64(parts[2])
            else { continue }
            all[device] = (id, sequence)
        }
        return all
    }

    /// The exchange with `device` ended (complete or not): from now on its log is judged.
    public static func exchangeEnded(_ home: Home, folders: [String], device: DeviceID) {
        exchanging.withLock { keys in
            for folder in folders { keys.remove(key(home, folder, device)) }
        }
    }

    /// Peers whose index in the log is behind what they announced when a sync began, and whose
    /// exchange in this process has ended.
    public static func partial(_ home: Home, folder: String, log: IndexLog) -> [(device: DeviceID, have: Int64, expected: Int64)] {
        let underWay = exchanging.withLock { $0 }
        return load(home, folder: folder).compactMap { device, target in
            guard !underWay.contains(key(home, folder, device)) else { return nil }
            let have = log.checkpoints[device]
            guard have?.indexID != target.indexID || (have?.maxSequence ?? 0) < target.maxSequence else { return nil }
            // A new index ID with nothing of it yet is partial too (zero of the target).
            let held = have?.indexID == target.indexID ? have?.maxSequence ?? 0 : 0
            guard held < target.maxSequence else { return nil }
            return (device, held, target.maxSequence)
        }.sorted { $0.device < $1.device }
    }

    /// One sentence per partial peer, for warnings.
    public static func warnings(_ home: KaitenHome, folder: String, log: IndexLog) -> [String] {
        partial(home.home, folder: folder, log: log).map { entry in
            let who = DeviceID.label(entry.device.description, name: home.config.device(id: entry.device)?.name)
            return "\(folder): the index from \(who) is partial (sequence \(entry.have) of \(entry.expected)): an index sync "
                + "was interrupted; run `kaiten index sync \(folder)` to complete it"
        }
    }
}
