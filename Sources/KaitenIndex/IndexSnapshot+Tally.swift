import Foundation
import KaitenProtocol

#if canImport(Glibc)
import Glibc
#endif

extension IndexSnapshot {
    /// The figures of a snapshot's paths (``IndexTally``), counted once and kept in memory and
    /// in a file beside it, or counted by `compute` (a walk of every path) when neither holds
    /// them for this file and conflict rule.
    func tally(rule: ConflictRule, compute: () -> IndexTally) -> IndexTally {
        keptTally.withLock { kept in
            if let kept, kept.rule == rule { return kept.tally }
            if let identity, let stored = Tally.read(of: path, identity: identity, checksum: checksum, rule: rule, devices: devices) {
                kept = (rule, stored)
                return stored
            }
            let counted = compute()
            if let identity { Tally.write(counted, of: path, identity: identity, checksum: checksum, rule: rule) }
            kept = (rule, counted)
            return counted
        }
    }

    /// The file beside a snapshot (`<snapshot>.tally`) that holds its figures, and which file and
    /// rule they were counted for (the snapshot's device, inode, size, times and header CRC, as a
    /// ``CheckStamp`` names it; the conflict rule chooses global versions).
    ///
    /// Trust: the figures decide nothing (they are shown: counts, completion); a file that does
    /// not parse, fails its CRC, names another snapshot or rule, or counts other devices is
    /// ignored and counted again. A ``Sidecar``: one lost in a crash costs a walk.
    enum Tally {
        static let magic: [UInt8] = Array("KAITENTL".utf8)
        static let headerSize = 8 + 7 * 8 + 4 + 4 + 4 + 4
        static let totalsSize = 4 * 8
        static let deviceSize = 32 + totalsSize + 4 * 8

        static func path(of snapshotPath: String) -> String { snapshotPath + ".tally" }

        static func write(_ tally: IndexTally, of snapshotPath: String, identity: FileIdentity, checksum: UInt32, rule: ConflictRule) {
            var bytes: [UInt8] = magic
            identity.append(to: &bytes)
            bytes.appendLE(checksum)
            bytes.appendLE(UInt32(rule == .syncthing1 ? 1 : 2))
            bytes.appendLE(UInt32(tally.deviceIDs.count))
            bytes.appendLE(UInt32(0))
            func append(_ totals: IndexTally.Totals) {
                for value in [Int64(totals.files), Int64(totals.directories), Int64(totals.symlinks), totals.bytes] {
                    bytes.appendLE(UInt64(bitPattern: value))
                }
            }
            append(tally.global)
            for (device, figures) in zip(tally.deviceIDs, tally.byNumber) {
                bytes += device.bytes
                append(figures.holds)
                for value in [figures.liveOnDeleted, figures.live, figures.notHeld, figures.deleted] {
                    bytes.appendLE(UInt64(bitPattern: Int64(value)))
                }
            }
            Sidecar.write(bytes, to: path(of: snapshotPath))
        }

        /// The figures kept beside `snapshotPath` for that file and rule; nil otherwise.
        static func read(
            of snapshotPath: String, identity: FileIdentity, checksum: UInt32, rule: ConflictRule, devices: [DeviceID]
        ) -> IndexTally? {
            guard devices.count <= Int(UInt16.max) + 1,
                let bytes = Sidecar.read(path(of: snapshotPath), size: headerSize + totalsSize + deviceSize * devices.count + 4)
            else { return nil }
            return bytes.withUnsafeBytes { raw -> IndexTally? in
                guard Array(raw[0..<8]) == magic, FileIdentity(raw, at: 8) == identity, raw.u32(64) == checksum,
                    raw.u32(68) == (rule == .syncthing1 ? 1 : 2), Int(raw.u32(72)) == devices.count
                else { return nil }
                func int(_ at: Int) -> Int { Int(Int64(bitPattern: raw.u64(at))) }
                func totals(_ at: Int) -> IndexTally.Totals {
                    var totals = IndexTally.Totals()
                    totals.files = int(at)
                    totals.directories = int(at + 8)
                    totals.symlinks = int(at + 16)
                    totals.bytes = Int64(int(at + 24))
                    return totals
                }
                var tally = IndexTally(devices: devices)
                tally.global = totals(headerSize)
                var at = headerSize + totalsSize
                for (n, device) in devices.enumerated() {
                    guard Array(raw[at..<(at + 32)]) == device.bytes else { return nil }
                    var figures = IndexTally.DeviceFigures()
                    figures.holds = totals(at + 32)
                    let counts = at + 32 + totalsSize
                    figures.liveOnDeleted = int(counts)
                    figures.live = int(counts + 8)
                    figures.notHeld = int(counts + 16)
                    figures.deleted = int(counts + 24)
                    tally.byNumber[n] = figures
                    at += deviceSize
                }
                return tally
            }
        }
    }
}
