import Foundation
import Synchronization
import KaitenProtocol

/// What this device announces to its peers for one folder: its own index.
///
/// Kept as an append-only log in the global index's format and with its recovery
/// (`index/<folder>.local`), this device its only announcer. Each entry carries this
/// device's sequence number, strictly increasing and never reused: the highest one is the
/// log's checkpoint, made durable before any of it is sent. A fresh log (first use, or after
/// the old one was lost) comes with a fresh index ID, so that no peer ever pairs a reused
/// sequence number with what it remembers (bep-brief §4.2; syncthing 2.x keeps remote
/// sequences under a UNIQUE constraint).
public final class LocalIndex {
    public let log: IndexLog
    public let me: DeviceID
    /// The index ID peers know this device's index of the folder by.
    public let indexID: UInt64

    /// What the last update recorded, as it recorded it (ascending sequence): a peer that holds
    /// everything before it is sent these without decoding them back from the log (after a
    /// fresh home's first refresh, every entry of the folder). Dropped by ``forgetRecent()``.
    private let recent = Mutex<[BEPFileInfo]>([])

    private init(log: IndexLog, me: DeviceID, indexID: UInt64) {
        self.log = log
        self.me = me
        self.indexID = indexID
    }

    /// Opens (or creates) the local index at `path`.
    /// - Parameters:
    ///   - indexID: the folder's stored local index ID.
    ///   - renewIndexID: makes, stores and returns a new index ID; called when the log is new
    ///     or was made under another ID.
    public static func open(
        path: String, folderID: String, me: DeviceID, indexID: UInt64, renewIndexID: () throws -> UInt64,
        warn: (String) -> Void = { _ in }
    ) throws -> LocalIndex {
        let log = try IndexLog.open(path: path, folderID: folderID, warn: warn)
        var id = indexID
        // Under the lock: two processes opening a new log must not both start it.
        try log.exclusively {
            if let checkpoint = log.checkpoints[me] {
                if checkpoint.indexID != indexID { id = checkpoint.indexID }
            } else if !log.index.hasEntries(from: me) {
                // Nothing announced under this log yet: whatever peers may remember under the stored
                // ID (a log deleted since) must not meet sequence numbers that start again at 1.
                id = try renewIndexID()
                try log.apply(device: me, indexID: id, files: [], isFullIndex: true)
            }
        }
        return LocalIndex(log: log, me: me, indexID: id)
    }

    public func close() { log.close() }

    /// The highest sequence number announced so far (0 when nothing was).
    public var maxSequence: Int64 { log.checkpoints[me]?.maxSequence ?? 0 }

    /// What is announced for `path` now.
    public func announced(_ path: String) -> FileEntry? { log.index.entry(path, from: me) }

    /// Records each entry of `desired` that differs from what is announced for its name, with
    /// the next sequence numbers, durably; returns the recorded entries (ascending sequence).
    /// Names not in `desired` keep their announcement.
    /// - Parameter blocks: the block list of a valid file that changed (`desired` carries only
    ///   its content hash).
    public func update(_ desired: [BEPFileInfo], blocks: (String) throws -> [BEPBlockInfo]) throws -> [BEPFileInfo] {
        try update(each: { body in for file in desired { try body(file) } }, blocks: blocks)
    }

    /// The same over entries produced one at a time (`each` calls its argument with every
    /// desired entry): only the changed ones are kept, in name order.
    public func update(
        each: ((BEPFileInfo) throws -> Void) throws -> Void, blocks: (String) throws -> [BEPBlockInfo]
    ) throws -> [BEPFileInfo] {
        // Under the lock, so that what is compared and the next sequence number include what
        // another process (a one-shot `apply` beside `kaiten run`) recorded a moment ago.
        try log.exclusively { try updateHoldingLock(each: each, blocks: blocks) }
    }

    private func updateHoldingLock(
        each: ((BEPFileInfo) throws -> Void) throws -> Void, blocks: (String) throws -> [BEPBlockInfo]
    ) throws -> [BEPFileInfo] {
        var changed: [BEPFileInfo] = []
        try each { file in
            if !Self.sameAnnouncement(file, announced(file.name)) { changed.append(file) }
        }
        guard !changed.isEmpty else { return [] }
        // Sorted by the names taken out once: a FileInfo's name is behind its storage, and a
        // full index's 50,000 "not held" entries cost a million comparisons.
        let names = changed.map(\.name)
        if !zip(names, names.dropFirst()).allSatisfy({ $0.utf8Precedes($1) }) {
            changed = ByteOrder.order(of: names).map { changed[$0] }
        }
        var next = maxSequence
        for i in changed.indices {
            next += 1
            changed[i].sequence = next
            let file = changed[i]
            if file.type == .file && !file.deleted && !file.invalid && file.blocks.isEmpty { changed[i].blocks = try blocks(file.name) }
        }
        try log.apply(device: me, indexID: indexID, files: changed, isFullIndex: false)
        // As the log gives them back: blocks_hash is the content hash of the blocks.
        recent.withLock {
            $0 = changed.map { file in
                var file = file
                if !file.blocks.isEmpty { file.blocksHash = Data(BEPFileInfo.blocksHash(of: file.blocks).bytes) }
                return file
            }
        }
        return changed
    }

    /// Drops what the last update kept for sending (a long-running service between rounds).
    public func forgetRecent() { recent.withLock { $0 = [] } }

    /// Every announced entry with a sequence above `after`, ascending, with its blocks: what a
    /// peer that holds this index up to `after` is missing (all of it for `after` 0).
    public func entries(after: Int64) throws -> [BEPFileInfo] {
        // Everything above `after` was recorded by the last update, and nothing since (it ends
        // at the checkpoint): those are the entries, as recorded.
        let maxSequence = self.maxSequence
        let recorded = recent.withLock { recent -> [BEPFileInfo]? in
            guard let first = recent.first, let last = recent.last, after >= first.sequence - 1, last.sequence == maxSequence else { return nil }
            return Array(recent.drop { $0.sequence <= after })
        }
        if let recorded { return recorded }
        var entries: [FileEntry] = []
        log.index.forEachEntry { _, owner, entry in
            if owner == me && entry.sequence > after { entries.append(entry) }
        }
        entries.sort { $0.sequence < $1.sequence }
        return try entries.map { try log.fileInfo(of: $0) }
    }

    /// Equal for everything a peer reads (the sequence and where it is stored aside).
    static func sameAnnouncement(_ file: BEPFileInfo, _ entry: FileEntry?) -> Bool {
        guard let entry else { return false }
        let wanted = FileEntry(announced: file)
        return wanted.type == entry.type && wanted.isDeleted == entry.isDeleted && wanted.isInvalid == entry.isInvalid
            && wanted.version == entry.version && wanted.size == entry.size && wanted.permissions == entry.permissions
            && wanted.noPermissions == entry.noPermissions && wanted.modifiedS == entry.modifiedS
            && wanted.modifiedNs == entry.modifiedNs && wanted.modifiedBy == entry.modifiedBy
            && wanted.blockSize == entry.blockSize && wanted.symlinkTarget == entry.symlinkTarget
            && wanted.contentHash == entry.contentHash
    }
}
