import Foundation
import KaitenConfig
import KaitenDiscovery
import KaitenIndex
import KaitenPeer
import KaitenProtocol
import Logging
import Synchronization

// MARK: - What callers see

extension PeerSessions {
    /// The open connections, by peer.
    public func connections() -> [DeviceID: PeerConnection] {
        state.withLock { $0.connections.filter { $0.value.isOpen } }
    }

    /// The peers whose index of `folder` is current: exchanged on a connection still open,
    /// every update since taken in. A peer known only from the log holds nothing as far as a
    /// deletion is concerned.
    public func current(folder: String) -> Set<DeviceID> {
        state.withLock { state in (state.current[folder] ?? []).filter { state.connections[$0]?.isOpen == true } }
    }

    /// Every index batch taken in from now on (after it is in the log), until the stream is
    /// dropped or the sessions close.
    public func updates() -> AsyncStream<IndexUpdate> {
        subscribe(\.subscribers, buffering: .unbounded)
    }

    /// A ``PeerSession`` over the open connections, for an apply run by this process.
    /// - Parameter announcer: how an apply on it announces what it changed; nil: this device's
    ///   whole local index is brought in line and sent (``announce(folders:warn:)``).
    public func session(folders: [String], announcer: (@Sendable ([String]) async -> Void)? = nil) -> PeerSession {
        let (connections, current, announced) = state.withLock { state in
            (state.connections.filter { $0.value.isOpen }, state.current, state.announced)
        }
        var refreshed: [String: Set<DeviceID>] = [:]
        for folder in folders { refreshed[folder] = (current[folder] ?? []).filter { connections[$0] != nil } }
        return PeerSession(
            connections: connections, refreshed: refreshed, announced: announced, updates: { self.updates() },
            announcer: announcer ?? { folders in await self.announce(folders: folders, warn: { self.logger.warning("\($0)") }) },
            lent: true)
    }

    /// Brings this device's local index in line with the logs and sends each open connection
    /// what it lacks of it. Failures only cost the announcement: the next one sends it again.
    public func announce(folders requested: [String] = [], warn: @escaping @Sendable (String) -> Void) async {
        await exchanges.run {
            let folders = requested.isEmpty ? self.home.config.folders.map(\.id) : requested
            do {
                let announcer = try LocalAnnouncer(home: self.home, folders: folders, warn: warn)
                defer { announcer.close() }
                for folder in folders {
                    let log = try PeerGenerations.openLog(home: self.home, folder: folder, readOnly: true)
                    defer { log.close() }
                    try announcer.refresh(folder: folder, log: log, warn: warn)
                }
                try await self.sendHoldingQueue(from: announcer, folders: folders)
            } catch {
                warn("could not announce this device's index: \(error)")
            }
        }
    }

    /// Sends each open connection what it lacks of the local index `announcer` keeps, brought
    /// up to date by the caller (a service's round, which knows the paths it changed and
    /// refreshed only those). In turn with the exchanges, so that a peer gets its updates in
    /// sequence order whoever sends them.
    public func send(from announcer: LocalAnnouncer, folders: [String], warn: @escaping @Sendable (String) -> Void) async {
        // The caller waits for this call and uses the announcer for nothing else meanwhile.
        nonisolated(unsafe) let announcer = announcer
        await exchanges.run {
            do {
                try await self.sendHoldingQueue(from: announcer, folders: folders)
            } catch {
                warn("could not announce this device's index: \(error)")
            }
        }
    }

    func sendHoldingQueue(from announcer: LocalAnnouncer, folders: [String]) async throws {
        let (connections, announced) = state.withLock { ($0.connections, $0.announced) }
        for (device, connection) in connections where connection.isOpen {
            let shared = folders.filter { home.config.folder(id: $0)?.isShared(with: device) == true }
            let theirs = announced[device] ?? [:]
            try await announcer.send(to: connection, folders: shared.filter { theirs[$0] != nil }, theirView: theirs)
            let now = announcer.state
            state.withLock { state in
                for folder in shared where theirs[folder] != nil { state.announced[device]?[folder] = now[folder] }
            }
        }
    }

    public func close(reason: String = "done") async {
        let (connections, intakes, subscribers, watchers) = state.withLock { state in
            state.closed = true
            defer {
                state.connections = [:]
                state.intakes = []
                state.subscribers = [:]
                state.watchers = [:]
            }
            return (Array(state.connections.values), state.intakes, Array(state.subscribers.values), Array(state.watchers.values))
        }
        for watcher in watchers { watcher.finish() }
        for task in intakes { task.cancel() }
        await connections.closeAll(reason: reason)
        for continuation in subscribers { continuation.finish() }
        intake.closeAll()
    }
}
