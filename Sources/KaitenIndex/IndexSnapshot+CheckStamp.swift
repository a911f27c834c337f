import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension IndexSnapshot {
    /// A note beside a snapshot (`<snapshot>.checked`) that its every byte and record were
    /// checked, and which file that was: its device, inode, size, modification and change times,
    /// and the checksum in its header. A later process that finds the file unchanged takes the
    /// snapshot with the header and tables checked only, instead of reading it all again: at
    /// ten million paths a snapshot is 1.7 GB, and every `kaiten` command read it whole (40 s
    /// from a cold disk) before answering.
    ///
    /// Trust: the same as a process that keeps a checked snapshot mapped for weeks (its pages
    /// are read from the disk again whenever the kernel dropped them): the file is Kaiten's own,
    /// written to a temporary file, fsynced and renamed, never edited in place, and any write,
    /// truncation or rename over it changes its change time, which no program can set. A stamp
    /// that does not match, does not parse or is missing means a full check, which writes a
    /// new one; one that cannot be written (a read-only home) costs only that check next time.
    struct CheckStamp: Equatable {
        static let magic: [UInt8] = Array("KAITENCK".utf8)
        static let size = 8 + 7 * 8 + 4 + 4

        let identity: FileIdentity
        /// The CRC in the snapshot's header.
        let checksum: UInt32

        static func path(of snapshotPath: String) -> String { snapshotPath + ".checked" }

        /// The stamp beside `snapshotPath`; nil when there is none or it does not parse.
        static func read(of snapshotPath: String) -> CheckStamp? {
            let fd = Glibc.open(path(of: snapshotPath), O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { Glibc.close(fd) }
            var bytes = [UInt8](repeating: 0, count: size + 1)
            let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
            guard n == size else { return nil }
            return bytes.withUnsafeBytes { raw -> CheckStamp? in
                guard Array(raw[0..<8]) == magic,
                    raw.u32(size - 4) == CRC32.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<(size - 4)]))
                else { return nil }
                func int(_ at: Int) -> Int { Int(Int64(bitPattern: raw.u64(at))) }
                let identity = FileIdentity(
                    device: raw.u64(8), inode: raw.u64(16), size: Int64(bitPattern: raw.u64(24)), modifiedS: int(32),
                    modifiedNs: int(40), changedS: int(48), changedNs: int(56))
                return CheckStamp(identity: identity, checksum: raw.u32(64))
            }
        }

        /// Writes the stamp beside `snapshotPath` (temporary file, rename; no fsync: a stamp
        /// lost in a crash costs one check). Failing is silent: it only saves work.
        func write(of snapshotPath: String) {
            var bytes: [UInt8] = Self.magic
            bytes.appendLE(identity.device)
            bytes.appendLE(identity.inode)
            bytes.appendLE(UInt64(bitPattern: identity.size))
            for value in [identity.modifiedS, identity.modifiedNs, identity.changedS, identity.changedNs] {
                bytes.appendLE(UInt64(bitPattern: Int64(value)))
            }
            bytes.appendLE(checksum)
            bytes.appendLE(bytes.withUnsafeBytes { CRC32.checksum($0) })
            let target = Self.path(of: snapshotPath)
            let temp = target + ".tmp"
            let fd = Glibc.open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return }
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            Glibc.close(fd)
            guard written == bytes.count, rename(temp, target) == 0 else {
                unlink(temp)
                return
            }
        }
    }
}
