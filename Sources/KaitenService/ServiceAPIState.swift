import Foundation
import KaitenConfig
import KaitenHTTPAPI
import KaitenPeer
import KaitenProtocol
import KaitenSync
import Synchronization

/// What the REST API reads of a running service: the configuration it runs on, the peers'
/// connections as they are now, and what it said.
final class ServiceAPIState: APIState, @unchecked Sendable {  // KaitenHome is read-only after load
    let home: KaitenHome
    let sessions: PeerSessions
    let said: ServiceMessages
    let events: EventLog
    let addresses: [String]
    let startTime: Date
    private let bound = Mutex("")

    init(home: KaitenHome, sessions: PeerSessions, said: ServiceMessages, events: EventLog, addresses: [String], startTime: Date) {
        self.events = events
        self.home = home
        self.sessions = sessions
        self.said = said
        self.addresses = addresses
        self.startTime = startTime
    }

    /// The address the listener is bound to (with port 0, the one the system chose).
    var guiAddressUsed: String {
        get { bound.withLock { $0 } }
        set { bound.withLock { $0 = newValue } }
    }

    var myID: DeviceID { home.identity.deviceID }

    func configJSON() -> [String: Any] { home.config.syncthingJSON() }

    func listeners() -> [APIListener] { addresses.map { APIListener(address: $0) } }

    func connections() -> [APIConnection] {
        let open = sessions.connections()
        return home.config.devices.filter { $0.id != myID }.map { device in
            guard let connection = open[device.id] else { return APIConnection(deviceID: device.id, connected: false, paused: device.isPaused) }
            let hello = connection.hello
            let relayed = connection.isRelayed
            let incoming = connection.reachedVia == "incoming"
            return APIConnection(
                deviceID: device.id, connected: true, paused: device.isPaused, address: connection.remoteAddress,
                clientVersion: hello.clientName == "syncthing" ? hello.clientVersion : "\(hello.clientName) \(hello.clientVersion)",
                type: (relayed ? "relay" : "tcp") + (incoming ? "-server" : "-client"), crypto: "TLS1.3", startedAt: connection.openedAt)
        }
    }

    func messages() -> [APIMessage] { said.all() }
}

/// The warnings and errors a service said, the latest ``limit`` of them, for `/rest/system/error`.
final class ServiceMessages: Sendable {
    static let limit = 200
    private let kept = Mutex<[APIMessage]>([])

    func record(_ event: ServiceEvent) {
        let level: APIMessage.Level
        switch event.kind {
        case "warning": level = .warning
        case "error", "failed": level = .error
        default: return
        }
        let text = event.folder.map { "folder \($0): \(event.message)" } ?? event.message
        kept.withLock {
            $0.append(APIMessage(when: event.time, level: level, message: text))
            if $0.count > Self.limit { $0.removeFirst($0.count - Self.limit) }
        }
    }

    func all() -> [APIMessage] { kept.withLock { $0 } }
}
