import Foundation
import KaitenProtocol
import Testing

@testable import KaitenIndex

/// The fast reader of a record's meta half says what SwiftProtobuf says, or gives up.
@Suite(.timeLimit(.minutes(5)))
struct FileMetaDecoderTests {
    static func randomFile(_ generator: inout some RandomNumberGenerator) -> BEPFileInfo {
        var file = BEPFileInfo()
        // ASCII of every length around the 8-byte steps of the ASCII check, and UTF-8 after them.
        let names = ["a.jpg", "dir/é/ü.txt", "x/y/z", "日本/写真.heic", String(repeating: "long", count: 40), "photos/2024/été.jpg", "abcdefgh", "abcdefghé"]
        file.name = names[Int.random(in: 0..<names.count, using: &generator)]
        file.type = [.file, .directory, .symlink, .symlinkFile, .symlinkDirectory, .UNRECOGNIZED(9)][Int.random(in: 0..<6, using: &generator)]
        file.size = Int64.random(in: -5...Int64.max, using: &generator)
        file.permissions = UInt32.random(in: 0...UInt32.max, using: &generator)
        file.modifiedS = Int64.random(in: Int64.min...Int64.max, using: &generator)
        file.modifiedNs = Int32.random(in: Int32.min...Int32.max, using: &generator)
        file.modifiedBy = UInt64.random(in: 0...UInt64.max, using: &generator)
        file.deleted = Bool.random(using: &generator)
        file.invalid = Bool.random(using: &generator)
        file.noPermissions = Bool.random(using: &generator)
        file.sequence = Int64.random(in: Int64.min...Int64.max, using: &generator)
        file.blockSize = Int32.random(in: Int32.min...Int32.max, using: &generator)
        for _ in 0..<Int.random(in: 0...4, using: &generator) {
            var counter = BEPCounter()
            counter.id = UInt64.random(in: 0...UInt64.max, using: &generator)
            counter.value = UInt64.random(in: 0...UInt64.max, using: &generator)
            file.version.counters.append(counter)
        }
        if Bool.random(using: &generator) { file.symlinkTarget = "../target/é" }
        if Bool.random(using: &generator) { file.blocksHash = Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }) }
        if Bool.random(using: &generator) { file.encrypted = Data([1, 2, 3]) }
        return file
    }

    @Test func agreesWithSwiftProtobufOnEveryField() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let file = Self.randomFile(&generator)
            let bytes: [UInt8] = try file.serializedBytes()
            let fast = try bytes.withUnsafeBytes { try FileMetaDecoder.decode($0, recordOffset: 7, recordLength: 9) }
            let slow = FileEntry(try BEPFileInfo(serializedBytes: bytes), recordOffset: 7, recordLength: 9)
            #expect(fast == slow, "\(file)")
        }
    }

    @Test func unknownTopLevelFieldsAreSkippedAsProtobufDropsThem() throws {
        var file = BEPFileInfo()
        file.name = "a.bin"
        file.size = 3
        var bytes: [UInt8] = try file.serializedBytes()
        // Field 1000 (varint), field 1001 (bytes): what a newer syncthing might add.
        bytes += [0xC0, 0x3E, 0x05, 0xCA, 0x3E, 0x02, 0xAA, 0xBB]
        let fast = try bytes.withUnsafeBytes { try FileMetaDecoder.decode($0, recordOffset: 0, recordLength: 0) }
        #expect(fast == FileEntry(try BEPFileInfo(serializedBytes: bytes), recordOffset: 0, recordLength: 0))
    }

    @Test func givesUpWhereSwiftProtobufMustDecide() throws {
        var withBlocks = BEPFileInfo()
        withBlocks.name = "a"
        withBlocks.blocks = [BEPBlockInfo()]
        var notUTF8 = try BEPFileInfo(serializedBytes: [0x0A, 0x01, 0x61] as [UInt8]).serializedBytes() as [UInt8]
        notUTF8[2] = 0xFF
        // Invalid UTF-8 after the first eight bytes (which the ASCII check takes whole).
        var lateNotUTF8 = try { var f = BEPFileInfo(); f.name = "photos/2024/a.jpg"; return try f.serializedBytes() as [UInt8] }()
        lateNotUTF8[2 + 12] = 0xC3
        let cases: [[UInt8]] = [
            try withBlocks.serializedBytes(),
            notUTF8,
            lateNotUTF8,
            [0x0A, 0x05, 0x61],  // a name longer than the message
            [0x18],  // a varint cut short
            [0x00, 0x01],  // field 0
            [0x4A, 0x04, 0x0A, 0x02, 0x18, 0x01],  // a counter with an unknown field 3
        ]
        for bytes in cases {
            #expect(throws: FileMetaDecoder.GiveUp.self) {
                _ = try bytes.withUnsafeBytes { try FileMetaDecoder.decode($0, recordOffset: 0, recordLength: 0) }
            }
        }
    }
}
