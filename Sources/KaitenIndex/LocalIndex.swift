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
        let count = try update(each: { body in for file in desired { try body(file) } }, blocks: blocks, keeping: .max, warn: { _ in })
        return count == 0 ? [] : recent.withLock { $0 }
    }

    /// The same over entries produced one at a time (`each` calls its argument with every
    /// desired entry); returns how many were recorded.
    ///
    /// A fresh home's first update records an entry per path of the folder: while the entries
    /// come in name order (a global view read from its snapshot) they are recorded in batches
    /// of ``batchSize`` and the log gets its snapshots as it grows (``IndexLog/maintain(eager:warn:)``),
    /// so that neither the entries nor the log's view of them are all in memory at once; an
    /// update of more than ``recentLimit`` entries keeps none for sending (``entries(after:)``
    /// reads them from the log).
    /// - Parameter warn: told about a snapshot that could not be written (the log stays whole).
    public func update(
        each: ((BEPFileInfo) throws -> Void) throws -> Void, blocks: (String) throws -> [BEPBlockInfo],
        warn: (String) -> Void = { _ in }
    ) throws -> Int {
        try update(each: each, blocks: blocks, keeping: Self.recentLimit, warn: warn)
    }

    private func update(
        each: ((BEPFileInfo) throws -> Void) throws -> Void, blocks: (String) throws -> [BEPBlockInfo], keeping limit: Int,
        warn: (String) -> Void
    ) throws -> Int {
        // Under the lock, so that what is compared and the next sequence number include what
        // another process (a one-shot `apply` beside `kaiten run`) recorded a moment ago.
        try log.exclusively {
            let (count, kept) = try updateHoldingLock(each: each, blocks: blocks, keeping: limit, warn: warn)
            // Nothing recorded: what was kept for sending still ends at the checkpoint.
            if count > 0 { recent.withLock { $0 = kept ?? [] } }
            return count
        }
    }

    /// How many changed entries one batch of an update records, and how many an update keeps
    /// for sending at most (tests lower them).
    @TaskLocal static var batchSize = 1 << 14
    @TaskLocal static var recentLimit = 1 << 17

    /// Records the changed entries of `each` in batches, each one durable. Returns how many were
    /// recorded, and all of them as the log gives them back (ascending sequence) unless they
    /// were more than `limit`.
    private func updateHoldingLock(
        each: ((BEPFileInfo) throws -> Void) throws -> Void, blocks: (String) throws -> [BEPBlockInfo], keeping limit: Int,
        warn: (String) -> Void
    ) throws -> (count: Int, recorded: [BEPFileInfo]?) {
        var pending: [BEPFileInfo] = []
        var count = 0
        var kept: [BEPFileInfo]? = []
        var blocksOfChanged: ((String) throws -> [BEPBlockInfo])?
        var warnOfMaintenance: ((String) -> Void)?
        var batches = 0
        // Whether every name so far came after the one before: only then may a batch be
        // recorded before the rest is known (sequence numbers follow name order).
        var inOrder = true
        var lastName: String?
        func record() throws {
            // Sorted by the names taken out once: a FileInfo's name is behind its storage, and a
            // full index's 50,000 "not held" entries cost a million comparisons.
            let names = pending.map(\.name)
            if !zip(names, names.dropFirst()).allSatisfy({ $0.utf8Precedes($1) }) {
                pending = ByteOrder.order(of: names).map { pending[$0] }
            }
            var next = maxSequence
            for i in pending.indices {
                next += 1
                pending[i].sequence = next
                let file = pending[i]
                if file.type == .file && !file.deleted && !file.invalid && file.blocks.isEmpty { pending[i].blocks = try blocksOfChanged!(file.name) }
            }
            try log.apply(device: me, indexID: indexID, files: pending, isFullIndex: false)
            count += pending.count
            if let sofar = kept?.count, sofar + pending.count <= limit {
                // As the log gives them back: blocks_hash is the content hash of the blocks.
                kept!.append(
                    contentsOf: pending.lazy.map { file in
                        var file = file
                        if !file.blocks.isEmpty { file.blocksHash = Data(BEPFileInfo.blocksHash(of: file.blocks).bytes) }
                        return file
                    })
            } else {
                kept = nil
            }
            pending.removeAll(keepingCapacity: true)
            batches += 1
            log.maintain(warn: warnOfMaintenance!)
        }
        try withoutActuallyEscaping(blocks) { blocks in try withoutActuallyEscaping(warn) { warn in
            // (`record` reads the block lists and warns through these while `each` runs.)
            blocksOfChanged = blocks
            warnOfMaintenance = warn
            defer {
                blocksOfChanged = nil
                warnOfMaintenance = nil
            }
            try each { file in
                guard !Self.sameAnnouncement(file, announced(file.name)) else { return }
                if inOrder, let lastName { inOrder = lastName.utf8Precedes(file.name) }
                lastName = file.name
                pending.append(file)
                if inOrder && pending.count >= Self.batchSize { try record() }
            }
            if !pending.isEmpty { try record() }
            // An update recorded in several batches (a fresh home's entry per path) ends with a
            // snapshot once 4 MiB were recorded since the last one: the geometric rule may leave
            // up to a fifth of the entries after it, which every later open (`plan`, `kaiten
            // run`) would replay into memory. Only after such an update: after one batch (a
            // service round, a selection edit) of a few megabytes at ten million paths, the
            // whole snapshot written again took `kaiten run` 8 s to be ready.
            if batches > 1 { log.maintain(eager: true, warn: warn) }
        } }
        return (count, kept)
    }

    /// Drops what the last update kept for sending (a long-running service between rounds).
    public func forgetRecent() { recent.withLock { $0 = [] } }

    /// Every announced entry with a sequence above `after`, ascending, with its blocks: what a
    /// peer that holds this index up to `after` is missing (all of it for `after` 0).
    public func entries(after: Int64) throws -> [BEPFileInfo] {
        var pending = self.pending(after: after)
        var all: [BEPFileInfo] = []
        while let batch = try pending.next(maxCount: .max, maxBytes: .max) { all += batch }
        return all
    }

    /// The same, to be read a batch at a time (``PendingEntries/next(maxCount:maxBytes:)``):
    /// a fresh home's index of a million paths is sent without holding a million entries.
    public func pending(after: Int64) -> PendingEntries {
        // Everything above `after` was recorded by the last update, and nothing since (it ends
        // at the checkpoint): those are the entries, as recorded.
        let maxSequence = self.maxSequence
        let recorded = recent.withLock { recent -> ArraySlice<BEPFileInfo>? in
            guard let first = recent.first, let last = recent.last, after >= first.sequence - 1, last.sequence == maxSequence else { return nil }
            return recent.drop { $0.sequence <= after }
        }
        if let recorded { return PendingEntries(log: log, recorded: recorded, stored: []) }
        // Else where each one is in the log (24 bytes an entry), read when its batch is.
        var stored: [PendingEntries.Stored] = []
        log.index.forEachEntry(from: me) { entry in
            if entry.sequence > after { stored.append(.init(sequence: entry.sequence, offset: entry.recordOffset, length: entry.recordLength)) }
        }
        stored.sort { $0.sequence < $1.sequence }
        return PendingEntries(log: log, recorded: [], stored: stored)
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

/// Entries of a local index still to be sent, in ascending sequence, handed out a batch at a
/// time: those the last update kept, or those read from the log as their batch is made.
public struct PendingEntries {
    struct Stored {
        var sequence: Int64
        var offset: Int64
        var length: Int32
    }
    let log: IndexLog
    var recorded: ArraySlice<BEPFileInfo>
    var stored: [Stored]
    private var next = 0

    init(log: IndexLog, recorded: ArraySlice<BEPFileInfo>, stored: [Stored]) {
        self.log = log
        self.recorded = recorded
        self.stored = stored
    }

    /// Whether there is nothing to send.
    public var isEmpty: Bool { recorded.isEmpty && stored.isEmpty }

    /// The next entries: at most `maxCount`, and no more once they reach about `maxBytes`
    /// (200 bytes an entry and 48 a block, as a batch of syncthing's own is counted); nil at
    /// the end.
    public mutating func next(maxCount: Int, maxBytes: Int) throws(IndexLogError) -> [BEPFileInfo]? {
        var batch: [BEPFileInfo] = []
        var bytes = 0
        while batch.count < maxCount && bytes < maxBytes {
            let entry: BEPFileInfo
            if let first = recorded.first {
                entry = first
                recorded = recorded.dropFirst()
            } else if next < stored.count {
                entry = try log.fileInfo(recordAt: stored[next].offset, length: stored[next].length)
                next += 1
            } else {
                break
            }
            bytes += 200 + entry.blocks.count * 48
            batch.append(entry)
        }
        return batch.isEmpty ? nil : batch
    }
}
