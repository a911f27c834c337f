import KaitenTestThreads
import NIOCore
import KaitenTestSupport
import Testing

@testable import KaitenProtocol

@Suite(.ownThread, .timeLimit(.minutes(5)))
struct FrameDecoderTests {
    /// Decodes a whole stream, fed in pieces of `chunk` bytes.
    static func decodeAll(_ bytes: [UInt8], chunk: Int = .max, expectHello: Bool = true) throws -> [BEPFrame] {
        var decoder = FrameDecoder(expectHello: expectHello)
        var buffer = ByteBuffer()
        var frames: [BEPFrame] = []
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + chunk)
            buffer.writeBytes(bytes[offset..<end])
            offset = end
            while let frame = try decoder.decode(buffer: &buffer) { frames.append(frame) }
        }
        if let last = try decoder.decodeLast(buffer: &buffer, seenEOF: true) { frames.append(last) }
        return frames
    }

    static func encode(_ items: [BEPOutbound], compress: Bool = false) throws -> [UInt8] {
        var out = ByteBuffer()
        let encoder = FrameEncoder(compressMetadata: compress)
        for item in items { try encoder.encode(data: item, out: &out) }
        return out.readBytes(length: out.readableBytes) ?? []
    }

    static func sampleIndex(files: Int) -> BEPIndex {
        var index = BEPIndex()
        index.folder = "photos"
        for i in 0..<files {
            var file = BEPFileInfo()
            file.name = "dir/file-\(i).jpg"
            file.size = Int64(i * 1000)
            file.sequence = Int64(i + 1)
            var block = BEPBlockInfo()
            block.size = Int32(i * 1000)
            block.hash = .init(repeating: UInt8(i & 0xFF), count: 32)
            file.blocks = [block]
            index.files.append(file)
        }
        return index
    }

    @Test func helloBytesMatchTheBrief() throws {
        var hello = BEPHello()
        hello.deviceName = "dev"
        hello.clientName = "syncthing"
        hello.clientVersion = "v1.19.2"
        let bytes = try Self.encode([.hello(hello)])
        let want: [UInt8] = [
            0x2e, 0xa7, 0xd9, 0x0b, 0x00, 0x19, 0x0a, 0x03, 0x64, 0x65, 0x76, 0x12, 0x09, 0x73, 0x79, 0x6e, 0x63, 0x74,
            0x68, 0x69, 0x6e, 0x67, 0x1a, 0x07, 0x76, 0x31, 0x2e, 0x31, 0x39, 0x2e, 0x32,
        ]
        #expect(bytes == want)
    }

    @Test func pingAndClusterConfigHeadersMatchTheBrief() throws {
        #expect(try Self.encode([.message(.ping)]) == [0x00, 0x02, 0x08, 0x06, 0x00, 0x00, 0x00, 0x00])
        // A ClusterConfig has type 0 and no compression: its header encodes to zero bytes.
        let cc = try Self.encode([.message(.clusterConfig(BEPClusterConfig()))])
        #expect(cc == [0x00, 0x00, 0x00, 0x00, 0x00, 0x00])
    }

    @Test(arguments: [1, 2, 3, 7, 64, 4096, Int.max])
    func decodesTheSameWhateverTheChunking(chunk: Int) throws {
        var hello = BEPHello()
        hello.clientName = "syncthing"
        var close = BEPClose()
        close.reason = "bye"
        let stream = try Self.encode([
            .hello(hello), .message(.clusterConfig(BEPClusterConfig())), .message(.index(Self.sampleIndex(files: 50))),
            .message(.ping), .message(.close(close)),
        ])
        let frames = try Self.decodeAll(stream, chunk: chunk)
        #expect(frames.count == 5)
        guard case .hello(let h) = frames[0] else { Issue.record("no hello"); return }
        #expect(h.clientName == "syncthing")
        guard case .message(.index(let index), _) = frames[2] else { Issue.record("no index"); return }
        #expect(index.files.count == 50)
        guard case .message(.close(let c), _) = frames[4] else { Issue.record("no close"); return }
        #expect(c.reason == "bye")
    }

    @Test func lz4BodiesDecode() throws {
        let index = Self.sampleIndex(files: 200)
        let stream = try Self.encode([.message(.index(index))], compress: true)
        // Header says LZ4: 00 04 08 01 10 01.
        #expect(Array(stream.prefix(6)) == [0x00, 0x04, 0x08, 0x01, 0x10, 0x01])
        let frames = try Self.decodeAll(stream, chunk: 100, expectHello: false)
        guard case .message(.index(let decoded), let compressed) = frames.first else {
            Issue.record("no index")
            return
        }
        #expect(compressed)
        #expect(decoded == index)
    }

    @Test func unknownMessageTypesAreSkipped() throws {
        // type 9, empty body, then a ping.
        let stream: [UInt8] = [0x00, 0x02, 0x08, 0x09, 0x00, 0x00, 0x00, 0x00] + [0x00, 0x02, 0x08, 0x06, 0, 0, 0, 0]
        let frames = try Self.decodeAll(stream, expectHello: false)
        guard case .unknown(type: 9) = frames[0], case .message(.ping, _) = frames[1] else {
            Issue.record("got \(frames)")
            return
        }
    }

    struct Hostile: CustomTestStringConvertible, Sendable {
        let label: String
        let bytes: [UInt8]
        let hello: Bool
        let error: FrameError
        var testDescription: String { label }
    }

    @Test(arguments: [
        Hostile(label: "old magic", bytes: [0x9F, 0x79, 0xBC, 0x40, 0, 0], hello: true, error: .oldHelloMagic(0x9F79_BC40)),
        Hostile(label: "unknown magic", bytes: [1, 2, 3, 4, 0, 0], hello: true, error: .unknownHelloMagic(0x0102_0304)),
        Hostile(label: "hello too long", bytes: [0x2e, 0xa7, 0xd9, 0x0b, 0xFF, 0xFF], hello: true, error: .helloTooLong(65535)),
        Hostile(label: "negative header", bytes: [0xFF, 0xFF, 0, 0, 0, 0], hello: false, error: .negativeHeaderLength(-1)),
        Hostile(
            label: "message over 500 MB", bytes: [0x00, 0x00, 0x1D, 0xCD, 0x65, 0x01], hello: false,
            error: .messageTooLong(500_000_001)),
        Hostile(label: "negative message", bytes: [0x00, 0x00, 0x80, 0, 0, 0], hello: false, error: .negativeMessageLength(Int(Int32.min))),
        Hostile(
            label: "LZ4 claims 4 GiB", bytes: [0x00, 0x02, 0x10, 0x01, 0, 0, 0, 5, 0xFF, 0xFF, 0xFF, 0xFF, 0], hello: false,
            error: .decompressedTooLong(Int(UInt32.max))),
        Hostile(
            label: "LZ4 body too short", bytes: [0x00, 0x02, 0x10, 0x01, 0, 0, 0, 2, 0, 1], hello: false,
            error: .compressedBodyTooShort),
        Hostile(
            label: "corrupt LZ4", bytes: [0x00, 0x02, 0x10, 0x01, 0, 0, 0, 7, 0, 0, 0, 10, 0xF0, 0xFF, 0xFF], hello: false,
            error: .badLZ4(.corruptInput)),
        Hostile(label: "truncated", bytes: [0x00, 0x02, 0x08, 0x06, 0, 0, 0, 9, 1, 2], hello: false, error: .truncated(bytesLeft: 10)),
        Hostile(label: "garbage header", bytes: [0x00, 0x02, 0xFF, 0xFF, 0, 0, 0, 0], hello: false, error: .malformedHeader),
    ])
    func hostileInputIsANamedError(_ hostile: Hostile) {
        #expect(throws: hostile.error) { try Self.decodeAll(hostile.bytes, chunk: 1, expectHello: hostile.hello) }
    }

    @Test func badProtobufIsAnError() {
        // An Index whose field 2 (files) claims 100 bytes but has 1.
        let body: [UInt8] = [0x12, 0x64, 0x01]
        let stream: [UInt8] = [0x00, 0x02, 0x08, 0x01, 0, 0, 0, UInt8(body.count)] + body
        let error = #expect(throws: FrameError.self) { try Self.decodeAll(stream, expectHello: false) }
        guard case .malformedMessage(type: 1, _) = error else {
            Issue.record("got \(String(describing: error))")
            return
        }
    }

    /// Random and truncated streams, bad LZ4 and bad protobuf: errors or frames, never a crash
    /// or an endless loop.
    @Test func fuzzedStreamsNeverCrash() throws {
        var generator = SplitMix64(seed: 0x4B41_4954_454E)
        var hello = BEPHello()
        hello.deviceName = "fuzz"
        let valid = try Self.encode(
            [.hello(hello), .message(.index(Self.sampleIndex(files: 30))), .message(.ping)], compress: true)
        var outcomes = (frames: 0, errors: 0)
        for round in 0..<3000 {
            var bytes: [UInt8]
            switch round % 3 {
            case 0:
                bytes = (0..<Int(generator.next() % 300)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
                if round % 2 == 0 { bytes = [0x2e, 0xa7, 0xd9, 0x0b] + bytes }
            case 1:
                bytes = Array(valid.prefix(Int(generator.next() % UInt64(valid.count))))
            default:
                bytes = valid
                for _ in 0..<(1 + generator.next() % 4) {
                    let at = Int(generator.next() % UInt64(bytes.count))
                    bytes[at] = UInt8(truncatingIfNeeded: generator.next())
                }
            }
            do {
                outcomes.frames += try Self.decodeAll(bytes, chunk: 1 + Int(generator.next() % 50)).count
            } catch is FrameError {
                outcomes.errors += 1
            }
        }
        #expect(outcomes.errors > 1000)
        #expect(outcomes.frames > 0)
    }
}


@Suite(.ownThread, .timeLimit(.minutes(5)))
struct LZ4Tests {
    @Test(arguments: [0, 1, 100, 65536, 300_000])
    func roundTrips(size: Int) throws {
        var generator = SplitMix64(seed: UInt64(size))
        let input = (0..<size).map { i in i % 7 == 0 ? UInt8(truncatingIfNeeded: generator.next()) : UInt8(i % 13) }
        let compressed = LZ4.compress(input)
        #expect(try LZ4.decompress(compressed, expectedSize: size) == input)
    }

    @Test func wrongSizeIsAnError() {
        let compressed = LZ4.compress(Array(repeating: 1, count: 1000))
        #expect(throws: LZ4Error.self) { try LZ4.decompress(compressed, expectedSize: 999) }
        #expect(throws: LZ4Error.self) { try LZ4.decompress(compressed, expectedSize: 1001) }
    }
}

@Suite(.ownThread, .timeLimit(.minutes(5)))
struct WireNameTests {
    @Test(arguments: ["a", "a/b", "café.txt", "[x] *!#.txt", "dir/sub/file name", ".hidden", "a..b"])
    func accepts(_ name: String) throws {
        try WireName.validate(name)
        #expect(WireName.staysInsideFolder(name))
    }

    @Test(arguments: ["", ".", "..", "/etc/passwd", "../x", "a/../../x", "a/..", "a//b", "a/", "./a", "a/./b", "a\0b"])
    func theFastCheckRefusesEveryEscape(_ name: String) {
        #expect(!WireName.staysInsideFolder(name))
    }

    @Test(arguments: ["", ".", "..", "/etc/passwd", "../x", "a/../../x", "a//b", "a/", "./a", "a/./b", "cafe\u{301}.txt"])
    func refuses(_ name: String) {
        #expect(throws: WireNameError.self) { try WireName.validate(name) }
    }

    /// A combining mark after "/" makes one grapheme cluster of the two: a check over
    /// Characters would not see that slash, the file system does.
    @Test(arguments: [
        ("../\u{301}x", true), ("a/../\u{301}x", true), ("/\u{301}etc", true),
        ("dir/", false), ("a//\u{301}b", false), ("./\u{301}a", false), ("a/\u{301}/", false),
    ])
    func aCombiningMarkDoesNotHideASlash(name: String, escapes: Bool) {
        #expect(!WireName.staysInsideFolder(name))
        #expect(throws: escapes ? WireNameError.escapesFolder(name) : WireNameError.notCanonical(name)) { try WireName.validate(name) }
    }

    @Test func inconsistentEntriesAreRefused() {
        var deleted = BEPFileInfo()
        deleted.name = "x"
        deleted.deleted = true
        deleted.blocks = [BEPBlockInfo()]
        #expect(throws: WireNameError.self) { try deleted.validate() }
        var empty = BEPFileInfo()
        empty.name = "y"
        #expect(throws: WireNameError.self) { try empty.validate() }
    }
}

@Suite(.ownThread, .timeLimit(.minutes(5)))
struct VectorTests {
    static func v(_ pairs: [(UInt64, UInt64)]) -> BEPVector {
        var vector = BEPVector()
        vector.counters = pairs.map { var c = BEPCounter(); c.id = $0.0; c.value = $0.1; return c }
        return vector
    }

    /// Cases from syncthing's lib/protocol/vector_test.go (TestCompare), by meaning.
    @Test(arguments: [
        ([], [], VectorOrdering.equal),
        ([(1, 1)], [(1, 1)], .equal),
        ([(1, 2)], [(1, 1)], .greater),
        ([(1, 1)], [(1, 2)], .lesser),
        ([(1, 1)], [], .greater),
        ([], [(1, 1)], .lesser),
        ([(1, 1), (2, 1)], [(1, 1)], .greater),
        ([(1, 1)], [(1, 1), (2, 1)], .lesser),
        ([(1, 2), (2, 1)], [(1, 1), (2, 2)], .concurrentGreater),
        ([(1, 1), (2, 2)], [(1, 2), (2, 1)], .concurrentLesser),
        ([(1, 1)], [(2, 1)], .concurrentGreater),
        ([(2, 1)], [(1, 1)], .concurrentLesser),
        ([(1, 0)], [], .equal),
    ] as [([(UInt64, UInt64)], [(UInt64, UInt64)], VectorOrdering)])
    func compare(a: [(UInt64, UInt64)], b: [(UInt64, UInt64)], want: VectorOrdering) {
        #expect(Self.v(a).compare(Self.v(b)) == want)
    }
}
