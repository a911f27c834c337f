import Foundation
import KaitenHTTPAPI
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

    func state(of folder: String) -> (state: String, since: Date)? { states.withLock { $0[folder] } }

    func starting(home: String, myID: DeviceID) {
        log.append("Starting", ["home": home, "myID": myID.description])
    }

    func startupComplete(myID: DeviceID) {
        log.append("StartupComplete", ["myID": myID.description])
    }

    func connected(_ connection: PeerConnection) {
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
        let item: [String: Any] = ["folder": folder, "item": path, "type": type, "action": action]
        // The executor says an item when it ends; its start is said with it, in order.
        log.append("ItemStarted", item, at: event.time)
        log.append("ItemFinished", item.merging(["error": event.kind == "failed" ? event.message as Any : NSNull()]) { a, _ in a }, at: event.time)
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
