import Foundation
import KaitenProtocol
import KaitenTestSupport
import KaitenTestThreads
import Testing

@testable import KaitenIndex

/// Seeded fuzzing of index-log records whose checksum was sealed again after the damage (issue
/// 42, item 7): what the CRC cannot catch (a bug, a tool, a person editing the log) is opened
/// into a view that holds only names inside the folder, or refused naming the file and the
/// record's offset; never a trap, never unbounded memory. A failure prints its seed
/// (KAITEN_TEST_SEED replays it).
@Suite(.ownThread, .timeLimit(.minutes(3))) struct IndexLogFuzzTests {
    /// Where each record starts, and its length, after the header.
    static func records(_ bytes: [UInt8], from start: Int) -> [(offset: Int, length: Int)] {
        var result: [(Int, Int)] = []
        var at = start
        while at + 9 <= bytes.count {
            let length = Int(bytes.readBE32(at: at))
            guard at + 9 + length <= bytes.count else { break }
            result.append((at, 9 + length))
            at += 9 + length
        }
        return result
    }

    /// "KAITENIX", format, generation, folder-ID length and ID, CRC (Docs/index-log.md).
    static func headerLength(_ bytes: [UInt8]) -> Int {
        8 + 4 + 8 + 2 + (Int(bytes[20]) << 8 | Int(bytes[21])) + 4
    }

    static func seal(_ bytes: inout [UInt8], record offset: Int) {
        let length = Int(bytes.readBE32(at: offset))
        let checksum = CRC32.checksum(Array(bytes[(offset + 8)..<(offset + 9 + length)]))
        for i in 0..<4 { bytes[offset + 4 + i] = UInt8(truncatingIfNeeded: checksum >> (24 - 8 * i)) }
    }

    @Test func resealedDamageIsReadSafelyOrRefusedAtItsOffset() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-log-fuzz")
        defer { dir.remove() }
        let path = dir.file("photos.log")
        let log = try IndexLog.open(path: path, folderID: "photos")
        for batch in 0..<4 {
            let files = (0..<5).map { i in
                IndexLogTests.file("d\(i % 2)/f\(batch)-\(i)", sequence: Int64(batch * 5 + i + 1), version: [(1, UInt64(batch * 5 + i + 1))], deleted: i == 4 && batch > 0)
            }
            try log.apply(device: batch % 2 == 0 ? IndexLogTests.peerA : IndexLogTests.peerB, indexID: 1, files: files, isFullIndex: batch < 2)
        }
                log.close()
        let whole = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        let records = Self.records(whole, from: Self.headerLength(whole))
        #expect(records.count > 20)

        var random = SplitMix64.forTest("resealedDamageIsReadSafelyOrRefusedAtItsOffset")
        var outcomes = (opened: 0, refused: 0)
        for round in 0..<3_000 {
            var bytes = whole
            let record = records[Int(random.next() % UInt64(records.count))]
            let payload = (record.offset + 8)..<(record.offset + record.length)  // kind + payload
            switch round % 3 {
            case 0:
                for _ in 0..<(1 + random.next() % 3) {
                    bytes[payload.lowerBound + Int(random.next() % UInt64(payload.count))] = UInt8(truncatingIfNeeded: random.next())
                }
            case 1:
                // A 4- or 8-byte field inside set to an extreme (lengths, sequences, index IDs).
                let width = random.next() % 2 == 0 ? 4 : 8
                guard payload.count > width else { continue }
                let at = payload.lowerBound + Int(random.next() % UInt64(payload.count - width))
                for i in 0..<width { bytes[at + i] = i == 0 ? (random.next() % 2 == 0 ? 0x7F : 0xFF) : 0xFF }
            default:
                // A varint of the protobuf halves made huge.
                let at = payload.lowerBound + 1 + Int(random.next() % UInt64(max(1, payload.count - 1)))
                if at < payload.upperBound { bytes[at] = 0xFF }
            }
            Self.seal(&bytes, record: record.offset)
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            switch Result(catching: { () throws(IndexLogError) -> [String] in
                let opened = try IndexLog.open(path: path, folderID: "photos", readOnly: true)
                defer { opened.close() }
                return opened.index.allPaths
            }) {
            case .success(let names):
                outcomes.opened += 1
                for name in names { #expect((try? WireName.validate(name)) != nil, "round \(round): \(name)") }
            case .failure(let error):
                outcomes.refused += 1
                let offset = error.offset ?? -1
                let low = Int64(record.offset)
                let high = Int64(record.offset + record.length)
                #expect(offset >= low && offset <= high, "round \(round): \(error) at record \(low)")
                #expect(error.description.contains(path) || error.description.contains("photos"), "\(error)")
            }
        }
        #expect(outcomes.opened > 100 && outcomes.refused > 100, "\(outcomes)")
    }
}
