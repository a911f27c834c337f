import Foundation
import KaitenProtocol
import Testing

@testable import KaitenIndex

/// The folder's figures kept with a snapshot and brought up to date by the log's tail are the
/// figures a walk of every global version and announcement counts, in every state the log can
/// be in; the file they are kept in is used only for the snapshot and rule it was counted for.
extension IndexSnapshotTests {
    /// The figures counted the slow way: every global version decoded, every announcement visited.
    static func walkedFigures(_ index: GlobalIndex, devices: [DeviceID]) -> String {
        var global = IndexTally.Totals()
        var figures = [DeviceID: IndexTally.DeviceFigures]()
        for device in devices { figures[device] = IndexTally.DeviceFigures() }
        index.forEachGlobal { e in
            guard !e.file.isInvalid else { return }
            if e.file.isDeleted {
                for (device, entry) in e.versions where !entry.isDeleted && !entry.isInvalid { figures[device]?.liveOnDeleted += 1 }
                return
            }
            global.add(e.file.type, size: e.file.size, 1)
            for holder in e.holders { figures[holder]?.holds.add(e.file.type, size: e.file.size, 1) }
        }
        index.forEachEntry { _, owner, entry in
            if entry.isInvalid {
                figures[owner]?.notHeld += 1
            } else if entry.isDeleted {
                figures[owner]?.deleted += 1
            } else {
                figures[owner]?.live += 1
            }
        }
        return describe(global, devices.map { figures[$0]! })
    }

    static func keptFigures(_ index: GlobalIndex, devices: [DeviceID]) -> String {
        let tally = index.tally()
        return describe(tally.global, devices.map { tally.figures(of: $0) })
    }

    static func deleteOnA(_ log: IndexLog, _ names: [String], sequence: Int64) throws {
        let files = names.enumerated().map { n, name in
            IndexLogTests.file(name, size: 0, sequence: sequence + Int64(n), version: [(1, 10_000), (2, 3)], deleted: true, mtime: 5000)
        }
        try log.apply(device: peerA, indexID: 11, files: files, isFullIndex: false)
    }

    static func describe(_ global: IndexTally.Totals, _ devices: [IndexTally.DeviceFigures]) -> String {
        "\(global) " + devices.map { "\($0)" }.joined(separator: " ")
    }

    @Test func theKeptFiguresAreAWalksInEveryState() throws {
        try withLog { path in
            let peers = [Self.peerA, Self.peerB]
            let log = try IndexLog.open(path: path, folderID: "photos")
            try Self.fill(log, from: 0, count: 300, full: true)
            try Self.fill(log, from: 0, count: 100, peer: Self.peerB, indexID: 22, full: true)
            // Deleted by one peer, still live on the other: a deletion the other has to carry out.
            try Self.deleteOnA(log, ["dir3/f3.bin", "dir4/f4.bin"], sequence: 900)
            try log.writeSnapshot()
            let snapshot = log.snapshotPath
            #expect(FileManager.default.fileExists(atPath: IndexSnapshot.Tally.path(of: snapshot)), "the writer keeps the figures")
            #expect(Self.keptFigures(log.index, devices: peers) == Self.walkedFigures(log.index, devices: peers))

            // A tail that changes paths of the snapshot (one peer's newer versions, deletions,
            // "not held") and adds paths it does not have.
            try Self.fill(log, from: 250, count: 100)
            try Self.fill(log, from: 60, count: 30, peer: Self.peerB, indexID: 22)
            try Self.deleteOnA(log, ["dir1/f1.bin", "dir2/f2.bin", "dir0/f95.bin"], sequence: 1000)
            #expect(log.index.pathsOutsideSnapshot > 50)
            let expected = Self.walkedFigures(log.index, devices: peers)
            #expect(log.index.tally().figures(of: Self.peerB).liveOnDeleted == 5)
            #expect(Self.keptFigures(log.index, devices: peers) == expected)
            log.close()

            // A later process reads them from the file beside the snapshot.
            IndexSnapshot.forgetChecked(path: snapshot)
            let later = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            #expect(later.index.hasSnapshot)
            #expect(Self.keptFigures(later.index, devices: peers) == expected)
            later.close()

            // What the file says is what a later process takes (so it must name the snapshot
            // and rule it was counted for): figures written for this file are read...
            let reader = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            defer { reader.close() }
            let opened = try #require(reader.index.base)
            let identity = try #require(opened.identity)
            var forged = IndexTally(devices: opened.devices)
            forged.global.files = 123_456
            IndexSnapshot.Tally.write(forged, of: snapshot, identity: identity, checksum: opened.checksum, rule: .syncthing1)
            #expect(IndexSnapshot.Tally.read(of: snapshot, identity: identity, checksum: opened.checksum, rule: .syncthing1, devices: opened.devices)?.global.files == 123_456)
            IndexSnapshot.forgetChecked(path: snapshot)
            let taking = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            #expect(Self.keptFigures(taking.index, devices: peers) != expected, "the kept figures were counted again, not read")
            taking.close()
            // ...but not for another rule or another file, nor once damaged.
            #expect(IndexSnapshot.Tally.read(of: snapshot, identity: identity, checksum: opened.checksum, rule: .syncthing2, devices: opened.devices) == nil)
            #expect(IndexSnapshot.Tally.read(of: snapshot, identity: identity, checksum: opened.checksum &+ 1, rule: .syncthing1, devices: opened.devices) == nil)
            let tallyPath = IndexSnapshot.Tally.path(of: snapshot)
            var bytes = try Data(contentsOf: URL(fileURLWithPath: tallyPath))
            bytes[bytes.count - 9] ^= 0x01
            try bytes.write(to: URL(fileURLWithPath: tallyPath))
            #expect(IndexSnapshot.Tally.read(of: snapshot, identity: identity, checksum: opened.checksum, rule: .syncthing1, devices: opened.devices) == nil)
            IndexSnapshot.forgetChecked(path: snapshot)
            let afterDamage = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
            #expect(Self.keptFigures(afterDamage.index, devices: peers) == expected, "a damaged file is counted again")
            afterDamage.close()

            // A full index from a peer voids its snapshot announcements: counted by a walk.
            IndexSnapshot.forgetChecked(path: snapshot)
            let writer = try IndexLog.open(path: path, folderID: "photos")
            try Self.fill(writer, from: 40, count: 10, peer: Self.peerB, indexID: 23, full: true)
            #expect(Self.keptFigures(writer.index, devices: peers) == Self.walkedFigures(writer.index, devices: peers))
            writer.close()
        }
    }

    /// A device's entries above a sequence are the filtered walk's, whether the snapshot holds
    /// some of them (a walk) or none (the tail alone is read).
    @Test func entriesAboveASequenceAreTheWalksWithTheSnapshotOrWithout() throws {
        try withLog { path in
            let log = try IndexLog.open(path: path, folderID: "photos")
            defer { log.close() }
            try Self.fill(log, from: 0, count: 300, full: true)
            try Self.fill(log, from: 0, count: 100, peer: Self.peerB, indexID: 22, full: true)
            try log.writeSnapshot()
            try Self.fill(log, from: 250, count: 100)
            try Self.fill(log, from: 400, count: 20, peer: Self.peerB, indexID: 22)
            let covered = try #require(log.index.base?.checkpoints.first { $0.device == Self.peerA }?.checkpoint.maxSequence)
            for peer in [Self.peerA, Self.peerB] {
                for after in [Int64(0), 150, covered - 1, covered, covered + 10, 10_000] {
                    var walked: [String] = []
                    log.index.forEachEntry(from: peer) { if $0.sequence > after { walked.append("\($0.name) \($0.sequence)") } }
                    var read: [String] = []
                    log.index.forEachEntry(from: peer, after: after) { read.append("\($0.name) \($0.sequence)") }
                    #expect(read.sorted() == walked.sorted(), "after \(after)")
                    if after == covered && peer == Self.peerA { #expect(walked.count >= 50) }
                }
            }
        }
    }
}
