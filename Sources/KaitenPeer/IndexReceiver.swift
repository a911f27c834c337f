import KaitenProtocol

/// Receives a peer's index for some folders until it is complete, without waiting for an
/// Index that will never come.
///
/// Syncthing sends no "end of index" marker, and sends nothing at all for an empty folder or
/// when we are already up to date (bep-brief §4.3). What it does send is its own highest
/// sequence per folder, in its ClusterConfig; the index is complete once a batch with that
/// sequence has arrived — or at once, when what we hold already reaches it.
public struct IndexReceiver {
    /// Where one folder stands.
    public struct FolderProgress: Sendable, Equatable {
        /// The peer's index ID for the folder (from its ClusterConfig).
        public var indexID: UInt64
        /// The peer's highest sequence, as its latest ClusterConfig announced it.
        public var target: Int64
        /// The highest sequence held so far.
        public var received: Int64
        /// Whether the peer has the folder paused (or not started); it sends nothing until not.
        public var isPaused: Bool
        public var isComplete: Bool { !isPaused && received >= target }
    }

    public private(set) var folders: [String: FolderProgress] = [:]
    private let wanted: Set<String>
    private let me: DeviceID
    private let peer: DeviceID
    private let since: [String: RemoteIndexState]

    /// - Parameters:
    ///   - wanted: the folders we share with the peer and want indexes of.
    ///   - since: what we already hold (index ID and highest sequence per folder).
    public init(wanted: Set<String>, me: DeviceID, peer: DeviceID, since: [String: RemoteIndexState]) {
        self.wanted = wanted
        self.me = me
        self.peer = peer
        self.since = since
    }

    /// Folders we want that the peer's ClusterConfig does not share with us.
    public private(set) var notSharedByPeer: Set<String> = []

    /// Takes in a ClusterConfig from the peer.
    public mutating func apply(_ clusterConfig: BEPClusterConfig) {
        // A secondary connection's ClusterConfig lists no folders and means nothing about them.
        guard !clusterConfig.secondary else { return }
        notSharedByPeer = wanted
        for folder in clusterConfig.folders where wanted.contains(folder.id) {
            guard let theirs = clusterConfig.device(peer, in: folder.id), clusterConfig.device(me, in: folder.id) != nil
            else { continue }
            notSharedByPeer.remove(folder.id)
            var progress = folders[folder.id]
            if progress == nil || progress?.indexID != theirs.indexID {
                var held: Int64 = 0
                if let state = since[folder.id], state.indexID == theirs.indexID { held = state.maxSequence }
                // syncthing resends from zero when we claim more than it has (bep-brief §4.3).
                if held > theirs.maxSequence { held = 0 }
                progress = FolderProgress(indexID: theirs.indexID, target: theirs.maxSequence, received: held, isPaused: folder.paused)
            }
            progress?.target = theirs.maxSequence
            progress?.isPaused = folder.paused
            folders[folder.id] = progress
        }
    }

    /// Takes in an index batch.
    public mutating func apply(folder: String, files: [BEPFileInfo], isFullIndex: Bool) {
        guard var progress = folders[folder] else { return }
        if isFullIndex { progress.received = 0 }
        for file in files where file.sequence > progress.received { progress.received = file.sequence }
        folders[folder] = progress
    }

    /// Whether every wanted folder the peer shares (and has not paused) is complete.
    public var isComplete: Bool {
        folders.values.allSatisfy { $0.isComplete || $0.isPaused }
    }

    /// What to send in the next ClusterConfig to get only deltas.
    public var state: [String: RemoteIndexState] {
        folders.mapValues { RemoteIndexState(indexID: $0.indexID, maxSequence: $0.received) }
    }
}

extension PeerConnection {
    /// Reads events until the peer's ClusterConfig has arrived and the index of every wanted
    /// folder is complete, handing each batch to `onBatch` in order.
    /// - Throws: ``PeerError`` if the connection ends first or `timeout` seconds pass.
    public func receiveIndexes(
        wanted: Set<String>, me: DeviceID, since: [String: RemoteIndexState] = [:], timeout: Double = 120,
        onClusterConfig: (BEPClusterConfig) async throws -> Void = { _ in },
        onBatch: (String, [BEPFileInfo], Bool) async throws -> Void
    ) async throws -> IndexReceiver {
        var receiver = IndexReceiver(wanted: wanted, me: me, peer: deviceID, since: since)
        var sawClusterConfig = false
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        let label = self.label
        let timer = Task { [weak self] in
            try await Task.sleep(until: deadline, clock: .continuous)
            await self?.close(reason: "timed out waiting for the index")
        }
        setIndexBackpressure(true)
        defer {
            timer.cancel()
            setIndexBackpressure(false)
        }
        for await event in events {
            switch event {
            case .clusterConfig(let clusterConfig):
                // A secondary connection's ClusterConfig (1.25+) carries no folders: it says
                // nothing about what the peer shares, so it is neither "shares nothing" nor the
                // ClusterConfig being waited for. As the first one on the connection a session
                // starts on, it means the peer still holds an earlier connection of this device
                // as its primary (one of a process that has just ended, not yet seen closed) and
                // would send the indexes there: this one is closed, to be dialled again.
                if clusterConfig.secondary {
                    guard !sawClusterConfig else { continue }
                    await close(reason: "the peer treats this connection as a secondary one")
                    throw PeerError(
                        .closedBeforeClusterConfig, peer: label,
                        "treats this connection as a secondary one: it still holds an earlier connection of this device")
                }
                sawClusterConfig = true
                if let refusal = EncryptedSharing.refusal(clusterConfig, me: me, peer: deviceID, folders: wanted, sealed: sealed.all, held: sealed.held) {
                    await close(reason: "encryption mismatch: \(refusal)")
                    throw PeerError(.encryptedFolder, peer: label, refusal)
                }
                receiver.apply(clusterConfig)
                try await onClusterConfig(clusterConfig)
            case .index(let folder, let files, let isFullIndex):
                receiver.apply(folder: folder, files: files, isFullIndex: isFullIndex)
                try await onBatch(folder, files, isFullIndex)
            case .closed(let reason):
                if ContinuousClock.now >= deadline {
                    throw PeerError(.timeout, peer: label, "the index did not arrive within \(Int(timeout)) s")
                }
                if !sawClusterConfig && "\(reason)".contains("encrypt") {
                    throw PeerError(
                        .encryptedFolder, peer: label,
                        "\(reason): the peer and this device disagree on which folders are encrypted or with which "
                            + "password (on this device: `kaiten folder share FOLDER PEER --untrusted --password-file FILE` "
                            + "shares one with an untrusted device; `kaiten folder add FOLDER --path DIR --type receiveencrypted` "
                            + "holds one as the untrusted device)")
                }
                if !sawClusterConfig {
                    throw PeerError(
                        .closedBeforeClusterConfig, peer: label,
                        "\(reason) before sending its ClusterConfig; does the peer know this device? (add our device ID there)"
                    )
                }
                throw PeerError(.closed, peer: label, "\(reason) before the index was complete")
            }
            if sawClusterConfig && receiver.isComplete { return receiver }
        }
        throw PeerError(.closed, peer: label, "connection ended")
    }
}
