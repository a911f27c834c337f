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
            guard let bytes = Sidecar.read(path(of: snapshotPath), size: size), Array(bytes[0..<8]) == magic else { return nil }
            return bytes.withUnsafeBytes { raw in CheckStamp(identity: FileIdentity(raw, at: 8), checksum: raw.u32(64)) }
        }

        /// Writes the stamp beside `snapshotPath`. Failing is silent: it only saves work.
        func write(of snapshotPath: String) {
            var bytes: [UInt8] = Self.magic
            identity.append(to: &bytes)
            bytes.appendLE(checksum)
            Sidecar.write(bytes, to: Self.path(of: snapshotPath))
        }
    }

    /// A small file beside a snapshot that says something about it (``CheckStamp``, ``Tally``),
    /// with a CRC of its own. Written to a temporary file and renamed, not fsynced: one lost in
    /// a crash costs only the work it saved.
    enum Sidecar {
        /// Writes `bytes` and their CRC to `path`. Failing is silent.
        static func write(_ bytes: [UInt8], to path: String) {
            var bytes = bytes
            bytes.appendLE(bytes.withUnsafeBytes { CRC32.checksum($0) })
            let temp = path + ".tmp"
            let fd = Glibc.open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return }
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            Glibc.close(fd)
            guard written == bytes.count, rename(temp, path) == 0 else {
                unlink(temp)
                return
            }
        }

        /// The bytes of the file at `path` without its CRC, when it has exactly `size` bytes
        /// (the CRC included) and the CRC matches; nil otherwise.
        static func read(_ path: String, size: Int) -> [UInt8]? {
            let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { Glibc.close(fd) }
            var bytes = [UInt8](repeating: 0, count: size + 1)
            let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
            guard n == size else { return nil }
            let body = Array(bytes[0..<(size - 4)])
            let crc = bytes.withUnsafeBytes { $0.u32(size - 4) }
            return crc == body.withUnsafeBytes({ CRC32.checksum($0) }) ? body : nil
        }
    }
}

extension IndexSnapshot.FileIdentity {
    /// Its 56 bytes in a sidecar: device, inode, size, modification and change times.
    func append(to bytes: inout [UInt8]) {
        bytes.appendLE(device)
        bytes.appendLE(inode)
        bytes.appendLE(UInt64(bitPattern: size))
        for value in [modifiedS, modifiedNs, changedS, changedNs] {
            bytes.appendLE(UInt64(bitPattern: Int64(value)))
        }
    }

    init(_ raw: UnsafeRawBufferPointer, at offset: Int) {
        func int(_ at: Int) -> Int { Int(Int64(bitPattern: raw.u64(offset + at))) }
        self.init(
            device: raw.u64(offset), inode: raw.u64(offset + 8), size: Int64(bitPattern: raw.u64(offset + 16)), modifiedS: int(24),
            modifiedNs: int(32), changedS: int(40), changedNs: int(48))
    }
}
