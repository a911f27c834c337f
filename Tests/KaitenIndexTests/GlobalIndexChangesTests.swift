import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenIndex

/// The paths changed since a snapshot are held encoded (``GlobalIndex/Changes``): what is read
/// back is every field as it was put, each device's announcement replaced where it stands, and
/// one device's taken out without touching the others'.
@Suite(.ownThread)
struct GlobalIndexChangesTests {
    static let peerC = try! DeviceID(bytes: Array(repeating: 0xC0, count: 32))

    /// An announcement with every field set to something other than its default.
    static func announcement(_ name: String, sequence: Int64, counters: [(UInt64, UInt64)], symlink: String = "") -> BEPFileInfo {
        var file = IndexLogTests.file(name, size: 4097, sequence: sequence, version: counters, mtime: 1_700_000_000 + sequence)
        file.permissions = 0o640
        file.modifiedNs = 123_456_789
        file.modifiedBy = 0xDEAD_BEEF_0000_0001
        file.noPermissions = sequence % 2 == 0
        file.blockSize = 131_072
        if !symlink.isEmpty {
            file.type = .symlink
            file.symlinkTarget = symlink
            file.blocks = []
            file.size = 0
        }
        return file
    }

    static func entry(_ file: BEPFileInfo, offset: Int64) -> FileEntry {
        FileEntry(file, recordOffset: offset, recordLength: Int32(100 + offset))
    }

    @Test func aChangedPathReadsBackAsPutReplacedInPlaceAndTakenOutByDevice() {
        var index = GlobalIndex()
        let name = "photos/2024/été/IMG_0001.HEIC"
        let a1 = Self.entry(Self.announcement(name, sequence: 1, counters: [(1, 5)]), offset: 10)
        let b1 = Self.entry(Self.announcement(name, sequence: 2, counters: [(1, 5), (2, 9), (3, 1)], symlink: "../elsewhere/ü"), offset: 20)
        let c1 = Self.entry(Self.announcement(name, sequence: 3, counters: []), offset: 30)
        #expect(index.set(a1, for: IndexLogTests.peerA) == nil)
        #expect(index.set(b1, for: IndexLogTests.peerB) == nil)
        #expect(index.set(c1, for: Self.peerC) == nil)
        let devices = [IndexLogTests.peerA, IndexLogTests.peerB, Self.peerC]
        func read() -> [String] {
            index.list(name)?.map { "\(index.devices[Int($0.device)].shortDescription) \($0.entry)" } ?? []
        }
        #expect(read() == zip(devices, [a1, b1, c1]).map { "\($0.shortDescription) \($1)" })

        // B's announcement replaced: its old record length comes back, the order stays.
        let b2 = Self.entry(Self.announcement(name, sequence: 7, counters: [(2, 10)]), offset: 70)
        #expect(index.set(b2, for: IndexLogTests.peerB) == b1.recordLength)
        #expect(read() == zip(devices, [a1, b2, c1]).map { "\($0.shortDescription) \($1)" })
        #expect(index.entry(name, from: IndexLogTests.peerB) == b2)

        // A forgotten: its bytes come back, B's and C's stay whole.
        #expect(index.removeAll(from: IndexLogTests.peerA) == Int64(a1.recordLength))
        #expect(read() == zip(devices.dropFirst(), [b2, c1]).map { "\($0.shortDescription) \($1)" })
        var sequences: [Int64] = []
        index.forEachEntry(from: Self.peerC, after: 2) { sequences.append($0.sequence) }
        #expect(sequences == [3])
        index.forEachEntry(from: Self.peerC, after: 3) { sequences.append($0.sequence) }
        #expect(sequences == [3])

        // The last two forgotten: the path is gone.
        _ = index.removeAll(from: IndexLogTests.peerB)
        _ = index.removeAll(from: Self.peerC)
        #expect(index.list(name) == nil)
        #expect(index.pathCount == 0)
    }
}
