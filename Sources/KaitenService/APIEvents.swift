import Foundation
import KaitenHTTPAPI
import KaitenIndex
import KaitenPeer
import KaitenProtocol
import KaitenSync
import Synchronization

/// What the service does, as syncthing's events (`/rest/events`): each method is one
/// happening the service knows as a value, said with syncthing's event type and data keys.
final class APIEvents: Sendable {
    let log = EventLog()
    /// Each folder's state as last said, and since when.
    private let states = Mutex<[String: (state: String, since: Date)]>([:])

    /// What the stats endpoints read: when peers were seen, each folder's last scan, last file
    /// and the errors of its last round. Kept for the life of the service (not across restarts).
    private let activity = Mutex(Activity())

    struct Activity {
        var peers: [DeviceID: (lastSeen: Date, openedAt: Date?, duration: Double)] = [:]
        var lastScan: [String: Date] = [:]
        var lastFile: [String: (path: String, at: Date, deleted: Bool)] = [:]
        /// The errors of the round running (moved to `errors` when it ends).
        var roundErrors: [String: [(path: String, error: String)]] = [:]
        var errors: [String: [(path: String, error: String)]] = [:]
        /// The local index's sequence already said in LocalIndexUpdated, per folder.
        var localSequence: [String: Int64] = [:]
        /// The last FolderSummary and FolderCompletion said, per folder and device, so that
        /// only a change is said again.
        var said: [String: String] = [:]
    }

    func state(of folder: String) -> (state: String, since: Date)? { states.withLock { $0[folder] } }

    func deviceStats() -> [DeviceID: APIDeviceStats] {
        activity.withLock { activity in
            activity.peers.mapValues { peer in
                // A peer connected now was seen now, and its connection has lasted this long.
                let connected = peer.openedAt.map { Date().timeIntervalSince($0) }
                return APIDeviceStats(lastSeen: connected == nil ? peer.lastSeen : Date(), lastConnectionDuration: connected ?? peer.duration)
            }
        }
    }

    func folderStats(_ folders: [String]) -> [String: APIFolderStats] {
        activity.withLock { activity in
            Dictionary(uniqueKeysWithValues: folders.map { ($0, APIFolderStats(lastScan: activity.lastScan[$0], lastFile: activity.lastFile[$0])) })
        }
    }

    func folderErrors(_ folder: String) -> [(path: String, error: String)] { activity.withLock { $0.errors[folder] ?? [] } }

    /// A round ended for `folders`: its scan time, and its errors said as FolderErrors.
    func roundEnded(folders: [String]) {
        let now = Date()
        let errors = activity.withLock { activity -> [String: [(path: String, error: String)]] in
            for folder in folders { activity.lastScan[folder] = now }
            let errors = activity.roundErrors
            for folder in folders { activity.errors[folder] = errors[folder] ?? [] }
            activity.roundErrors = [:]
            return errors
        }
        for (folder, list) in errors.sorted(by: { $0.key < $1.key }) where !list.isEmpty {
            log.append("FolderErrors", ["folder": folder, "errors": list.map { ["path": $0.path, "error": $0.error] }])
        }
    }

    /// A folder's summary, said as FolderSummary when it changed since it was last said.
    func folderSummary(_ folder: String, _ summary: [String: Any]) {
        sayIfChanged("summary \(folder)", summary) { log.append("FolderSummary", ["folder": folder, "summary": summary]) }
    }

    /// A device's completion of a folder, said as FolderCompletion when it changed.
    func folderCompletion(_ folder: String, device: DeviceID, _ completion: [String: Any]) {
        let data = completion.merging(["folder": folder, "device": device.description]) { a, _ in a }
        sayIfChanged("completion \(folder) \(device)", data) { log.append("FolderCompletion", data) }
    }

    private func sayIfChanged(_ key: String, _ value: [String: Any], _ say: () -> Void) {
        let text = (try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys])).map { String(decoding: $0, as: UTF8.self) } ?? ""
        let changed = activity.withLock { activity -> Bool in
            guard activity.said[key] != text else { return false }
            activity.said[key] = text
            return true
        }
        if changed { say() }
    }

    /// syncthing lists at most this many names in one LocalIndexUpdated.
    static let namesPerUpdate = 50

    /// One entry of this device's index that changed: made here (not a pull), and whether it
    /// is new (only this device has written it).
    struct LocalChange {
        var entry: FileEntry
        var madeHere: Bool
        var isNew: Bool
    }

    /// How many changes there are, and the first ``APIEvents/changesPerUpdate`` of them in
    /// sequence order: what the events say, in memory bounded whatever the count (the first
    /// announcement of a folder of ten million paths is ten million changes).
    struct LocalChanges {
        private(set) var count = 0
        private var kept: [LocalChange] = []

        mutating func add(_ change: LocalChange) {
            count += 1
            kept.append(change)
            if kept.count >= 2 * APIEvents.changesPerUpdate { trim() }
        }

        /// The first changes, in sequence order.
        var earliest: [LocalChange] {
            var copy = self
            copy.trim()
            return copy.kept
        }

        private mutating func trim() {
            kept.sort { $0.entry.sequence < $1.entry.sequence }
            if kept.count > APIEvents.changesPerUpdate { kept.removeLast(kept.count - APIEvents.changesPerUpdate) }
        }
    }

    /// This device's index of a folder changed: what it announced after the sequence last said
    /// (`changes`, in sequence order); the ones made here (not pulls) are local changes detected.
    /// The first call for a folder only notes where its index is.
    func localIndex(_ folder: String, label: String, sequence: Int64, changes: (_ since: Int64) -> LocalChanges) {
        let since = activity.withLock { activity -> Int64? in
            defer { activity.localSequence[folder] = sequence }
            return activity.localSequence[folder]
        }
        guard let since, sequence > since else { return }
        let changes = changes(since)
        guard changes.count > 0 else { return }
        let changed = changes.earliest
        log.append(
            "LocalIndexUpdated",
            ["folder": folder, "items": changes.count, "filenames": changed.prefix(Self.namesPerUpdate).map(\.entry.name), "sequence": sequence, "version": sequence])
        for change in changed where change.madeHere {
            let entry = change.entry
            log.append(
                "LocalChangeDetected",
                [
                    "type": entry.type == .directory ? "dir" : entry.type == .file ? "file" : "symlink",
                    "action": entry.isDeleted ? "deleted" : change.isNew ? "added" : "modified",
                    "folder": folder, "folderID": folder, "label": label, "path": entry.name,
                    "modifiedBy": DeviceID.shortIDString(entry.modifiedBy),
                ])
        }
    }

    func starting(home: String, myID: DeviceID) {
        log.append("Starting", ["home": home, "myID": myID.description])
    }

    func startupComplete(myID: DeviceID) {
        log.append("StartupComplete", ["myID": myID.description])
    }

    func connected(_ connection: PeerConnection) {
        activity.withLock { $0.peers[connection.deviceID] = (Date(), connection.openedAt, 0) }
        let hello = connection.hello
        log.append(
            "DeviceConnected",
            [
                "id": connection.deviceID.description, "addr": connection.remoteAddress, "deviceName": hello.deviceName,
                "clientName": hello.clientName, "clientVersion": hello.clientVersion,
                "type": connection.syncthingType,
            ])
    }

    func disconnected(_ device: DeviceID) {
        activity.withLock { activity in
            let now = Date()
            let opened = activity.peers[device]?.openedAt
            activity.peers[device] = (now, nil, opened.map { now.timeIntervalSince($0) } ?? 0)
        }
        log.append("DeviceDisconnected", ["id": device.description, "error": "connection closed"])
    }

    func configSaved(_ config: [String: Any]) {
        log.append("ConfigSaved", config)
    }

    /// syncthing says at most this many RemoteChangeDetected for one index message.
    static let changesPerUpdate = 1000

    func remoteIndexUpdated(_ update: IndexUpdate, label: String) {
        log.append(
            "RemoteIndexUpdated",
            ["device": update.device.description, "folder": update.folder, "items": update.files.count, "version": 0])
        // A whole index (a peer's first exchange) is not a change seen: only updates are.
        guard !update.isFullIndex else { return }
        for file in update.files.prefix(Self.changesPerUpdate) {
            log.append(
                "RemoteChangeDetected",
                [
                    "type": file.type == .directory ? "dir" : file.type == .file ? "file" : "symlink",
                    "action": file.deleted ? "deleted" : "modified", "folder": update.folder, "folderID": update.folder, "label": label,
                    "path": file.name, "modifiedBy": update.device.shortDescription,
                ])
        }
    }

    func stateChanged(folder: String, from: String, to: String) {
        states.withLock { $0[folder] = (to, Date()) }
        log.append("StateChanged", ["folder": folder, "from": from, "to": to])
    }

    /// The service's log events that are also syncthing's: an item done or failed.
    func record(_ event: ServiceEvent) {
        guard event.kind == "done" || event.kind == "failed", let folder = event.folder, let path = event.path,
            let action = event.action.flatMap(Self.itemAction)
        else { return }
        let type = event.action == "mkdir" || event.action == "rmdir" ? "dir" : "file"
        activity.withLock { activity in
            if event.kind == "failed" {
                activity.roundErrors[folder, default: []].append((path, event.message))
            } else {
                activity.lastFile[folder] = (path, event.time, action == "delete")
            }
        }
        // The executor says an item when it ends; its start is said with it, in order.
        let (started, finished) = Self.itemJSON(
            action: action, folder: folder, item: path, type: type, error: event.kind == "failed" ? event.message : nil)
        log.append("ItemStarted", json: started, at: event.time)
        log.append("ItemFinished", json: finished, at: event.time)
    }

    /// ItemStarted's and ItemFinished's data, written directly as FlatJSON writes them (keys
    /// sorted): two events per file of a pull, whose dictionaries cost more than the writing.
    static func itemJSON(action: String, folder: String, item: String, type: String, error: String?) -> (started: [UInt8], finished: [UInt8]) {
        var head = #"{"action":"#
        FlatJSON.quote(action, into: &head)
        var tail = #","folder":"#
        FlatJSON.quote(folder, into: &tail)
        tail += #","item":"#
        FlatJSON.quote(item, into: &tail)
        tail += #","type":"#
        FlatJSON.quote(type, into: &tail)
        tail += "}"
        var finished = head + #","error":"#
        if let error { FlatJSON.quote(error, into: &finished) } else { finished += "null" }
        return (Array((head + tail).utf8), Array((finished + tail).utf8))
    }

    /// syncthing's item actions for Kaiten's: what a pull, a deletion, a mode change is.
    static func itemAction(_ action: String) -> String? {
        switch action {
        case "pull", "mkdir": "update"
        case "delete", "rmdir": "delete"
        case "chmod": "metadata"
        default: nil
        }
    }
}
