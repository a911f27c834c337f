import Foundation
import KaitenTestSupport
import SwiftProtobuf
import Testing

@testable import KaitenProtocol

/// The hand-written FileInfo encoding writes exactly what protobuf's own encoding writes, for
/// every field at zero, small, large and negative values, unknown fields included.
@Suite(.timeLimit(.minutes(5)))
struct WireEncodingTests {
    /// A FileInfo of seeded random fields, some left at their zero value.
    static func randomFile(_ generator: inout some RandomNumberGenerator) -> BEPFileInfo {
        func maybe<T>(_ value: @autoclosure () -> T, _ zero: T) -> T { Bool.random(using: &generator) ? value() : zero }
        func bytes(_ count: Int) -> Data { Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }) }
        func wide() -> Int64 {
            [0, 1, 127, 128, 16_383, 16_384, -1, Int64.min, Int64.max, Int64.random(in: .min ... .max, using: &generator)]
                .randomElement(using: &generator)!
        }
        func narrow() -> Int32 { [0, 1, -1, 127, 128, Int32.min, Int32.max, Int32.random(in: .min ... .max, using: &generator)].randomElement(using: &generator)! }
        var file = BEPFileInfo()
        file.name = maybe(["a", "dir/ü/名前.txt", String(repeating: "x", count: 200), "e\u{301}"].randomElement(using: &generator)!, "")
        file.type = maybe([.file, .directory, .symlink, .symlinkFile, .UNRECOGNIZED(9), .UNRECOGNIZED(-3)].randomElement(using: &generator)!, .file)
        file.size = maybe(wide(), 0)
        file.permissions = maybe(UInt32.random(in: 0...UInt32.max, using: &generator), 0)
        file.modifiedS = maybe(wide(), 0)
        file.deleted = Bool.random(using: &generator)
        file.invalid = Bool.random(using: &generator)
        file.noPermissions = Bool.random(using: &generator)
        if Bool.random(using: &generator) {
            var version = BEPVector()
            for _ in 0..<Int.random(in: 0...3, using: &generator) {
                var counter = BEPCounter()
                counter.id = maybe(UInt64.random(in: 0...UInt64.max, using: &generator), 0)
                counter.value = maybe(UInt64.random(in: 0...1000, using: &generator), 0)
                version.counters.append(counter)
            }
            file.version = version
        }
        file.sequence = maybe(wide(), 0)
        file.modifiedNs = maybe(narrow(), 0)
        file.modifiedBy = maybe(UInt64.random(in: 0...UInt64.max, using: &generator), 0)
        file.blockSize = maybe(narrow(), 0)
        for _ in 0..<Int.random(in: 0...4, using: &generator) {
            var block = BEPBlockInfo()
            block.offset = maybe(wide(), 0)
            block.size = maybe(narrow(), 0)
            block.hash = maybe(bytes(32), Data())
            block.weakHash = maybe(UInt32.random(in: 0...UInt32.max, using: &generator), 0)
            file.blocks.append(block)
        }
        file.symlinkTarget = maybe("../target/ö", "")
        file.blocksHash = maybe(bytes(32), Data())
        file.encrypted = maybe(bytes(Int.random(in: 1...300, using: &generator)), Data())
        return file
    }

    @Test func aFileInfoIsWrittenAsProtobufWritesIt() throws {
        var generator = SplitMix64(seed: 43)
        for _ in 0..<2000 {
            let file = Self.randomFile(&generator)
            var written: [UInt8] = []
            file.appendWire(to: &written)
            let expected: [UInt8] = try file.serializedBytes()
            #expect(written == expected, "\(file)")
        }
    }

    @Test func unknownFieldsOfEveryMessageAreKeptInPlace() throws {
        // A peer's newer fields, as decoding keeps them: 99 (varint) on the FileInfo, 7 on a
        // block, 5 on the version and on a counter.
        var file = BEPFileInfo()
        file.name = "n"
        file.sequence = 4
        var block = BEPBlockInfo()
        block.size = 10
        block.hash = Data(repeating: 1, count: 32)
        try block.merge(serializedBytes: [7 << 3, 42] as [UInt8])
        file.blocks = [block]
        var counter = BEPCounter()
        counter.id = 5
        try counter.merge(serializedBytes: [5 << 3, 1] as [UInt8])
        var version = BEPVector()
        version.counters = [counter]
        try version.merge(serializedBytes: [5 << 3, 2] as [UInt8])
        file.version = version
        try file.merge(serializedBytes: [0x98, 0x06, 3] as [UInt8])  // field 99, varint 3
        #expect(!file.unknownFields.data.isEmpty)
        var written: [UInt8] = []
        file.appendWire(to: &written)
        #expect(written == (try file.serializedBytes() as [UInt8]))
        #expect(try BEPFileInfo(serializedBytes: written) == file)
    }

    @Test func theBlocksHashCanBeReplacedAndTheBlocksLeftOut() throws {
        var generator = SplitMix64(seed: 7)
        for _ in 0..<300 {
            let file = Self.randomFile(&generator)
            let hash = Data(repeating: 0xAB, count: 32)
            var written: [UInt8] = []
            file.appendWire(to: &written, blocksHash: hash, withBlocks: false)
            var meta = file
            meta.blocks = []
            meta.blocksHash = hash
            #expect(written == (try meta.serializedBytes() as [UInt8]))
            var blocksOnly: [UInt8] = []
            BEPFileInfo.appendWire(blocks: file.blocks, to: &blocksOnly)
            var holder = BEPFileInfo()
            holder.blocks = file.blocks
            #expect(blocksOnly == (try holder.serializedBytes() as [UInt8]))
        }
    }

    @Test func anIndexAndAnUpdateAreWrittenAsProtobufWritesThem() throws {
        var generator = SplitMix64(seed: 11)
        for count in [0, 1, 5, 200] {
            var index = BEPIndex()
            index.folder = count == 5 ? "" : "folder-ü"
            index.files = (0..<count).map { _ in Self.randomFile(&generator) }
            #expect(index.wireBytes() == (try index.serializedBytes() as [UInt8]))
            var update = BEPIndexUpdate()
            update.folder = index.folder
            update.files = index.files
            try update.merge(serializedBytes: [0xA0, 0x06, 1] as [UInt8])  // field 100, varint 1
            #expect(update.wireBytes() == (try update.serializedBytes() as [UInt8]))
        }
    }
}
