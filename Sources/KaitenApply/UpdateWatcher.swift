import KaitenIndex
import KaitenPeer
import KaitenSync
import KaitenProtocol
import Synchronization

/// Listens, during an apply, to the index updates peers keep sending on the open connections,
/// so that a file whose global version moves while it is being pulled is redone with the new
/// version rather than renamed into place stale.
final class UpdateWatcher: Sendable {
    private let tasks: [Task<Void, Never>]

    init(updates: AsyncStream<IndexUpdate>) {
        let store = Store()
        tasks = [
            Task {
                for await update in updates { store.record(folder: update.folder, device: update.device, files: update.files) }
            }
        ]
        self.store = store
    }

    private let store: Store

    final class Store: Sendable {
        let latest = Mutex<[String: [String: [DeviceID: BEPFileInfo]]]>([:])

        func record(folder: String, device: DeviceID, files: [BEPFileInfo]) {
            latest.withLock { all in
                for file in files { all[folder, default: [:]][file.name, default: [:]][device] = file }
            }
        }
    }

    func stop() {
        for task in tasks { task.cancel() }
    }

    /// What peers announced for `name` since the apply began, if anything.
    func announcements(folder: String, name: String) -> [DeviceID: BEPFileInfo] {
        store.latest.withLock { $0[folder]?[name] ?? [:] }
    }

    /// The version to write instead of `entry`, when a peer announced a newer (or concurrent and
    /// winning) one during the apply; nil when `entry` is still the global version.
    func newer(than entry: FileEntry, holders: [DeviceID], folder: String, rule: ConflictRule) -> GlobalEntry? {
        let fresh = announcements(folder: folder, name: entry.name)
        guard !fresh.isEmpty else { return nil }
        var all: [DeviceID: FileEntry] = [:]
        for device in holders { all[device] = entry }
        for (device, file) in fresh { all[device] = FileEntry(announced: file) }
        guard let winner = GlobalIndex.winner(entry.name, all, rule: rule), winner.file.version != entry.version else { return nil }
        return winner
    }
}
