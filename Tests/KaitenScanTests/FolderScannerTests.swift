import CZlib
import Crypto
import Foundation
import KaitenProtocol
import KaitenTestSupport
import Testing

@testable import KaitenScan

@Suite(.timeLimit(.minutes(5)))
struct BlockSizeTests {
    @Test func followsSyncthingsRule() {
        #expect(BlockSize.forFileSize(0) == 128 << 10)
        #expect(BlockSize.forFileSize(262_143_999) == 128 << 10)
        #expect(BlockSize.forFileSize(262_144_000) == 256 << 10)
        #expect(BlockSize.forFileSize(524_288_000) == 512 << 10)
        #expect(BlockSize.forFileSize(Int64(16_000) << 20) == 16 << 20)
        #expect(BlockSize.forFileSize(Int64(1) << 50) == 16 << 20)
    }

    @Test func keepsAnEarlierBlockSizeWithinAFactorOfTwo() {
        #expect(BlockSize.forFileSize(262_144_000, previous: 128 << 10) == 128 << 10)
        #expect(BlockSize.forFileSize(600 << 20, previous: 128 << 10) == 512 << 10)
        #expect(BlockSize.forFileSize(100, previous: 1000) == 128 << 10)
    }
}

@Suite(.timeLimit(.minutes(5)))
struct FolderScannerTests {
    func folder(_ body: (TemporaryDirectory) throws -> Void) throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-scan")
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.file(".stfolder"), withIntermediateDirectories: true)
        try body(dir)
    }

    /// Scanning a few paths again gives, for those paths, what a whole scan gives: changes
    /// hashed, unchanged files reused, gone ones (a directory with its contents) dropped,
    /// nothing through a symlinked parent, syncthing's own and temporary names left out.
    @Test func aRescanOfSomePathsAgreesWithAWholeScan() throws {
        try folder { dir in
            let fm = FileManager.default
            try fm.createDirectory(atPath: dir.file("a/b"), withIntermediateDirectories: true)
            try Data("one".utf8).write(to: URL(fileURLWithPath: dir.file("a/one.txt")))
            try Data("two".utf8).write(to: URL(fileURLWithPath: dir.file("a/b/two.txt")))
            try Data("keep".utf8).write(to: URL(fileURLWithPath: dir.file("keep.txt")))
            let scanner = FolderScanner(root: dir.path)
            var (tree, _) = try scanner.scan(previous: LocalTree())
            #expect(scanner.isUnchanged("a/one.txt", recorded: tree["a/one.txt"]))
            #expect(scanner.isUnchanged("nothing-here", recorded: nil))

            // Changes: an edit, a new file, a directory gone with its file, a parent turned into
            // a symlink to a directory that has the same names.
            try Data("one, edited".utf8).write(to: URL(fileURLWithPath: dir.file("a/one.txt")))
            try Data("new".utf8).write(to: URL(fileURLWithPath: dir.file("new.txt")))
            try fm.removeItem(atPath: dir.file("a/b"))
            try fm.createDirectory(atPath: dir.file("outside"), withIntermediateDirectories: true)
            try Data("x".utf8).write(to: URL(fileURLWithPath: dir.file("outside/x.txt")))
            try fm.createSymbolicLink(atPath: dir.file("link"), withDestinationPath: dir.file("outside"))
            try Data("tmp".utf8).write(to: URL(fileURLWithPath: dir.file(".syncthing.new.txt.tmp")))
            #expect(!scanner.isUnchanged("a/one.txt", recorded: tree["a/one.txt"]))
            #expect(!scanner.isUnchanged("new.txt", recorded: nil))
            #expect(scanner.isUnchanged(".syncthing.new.txt.tmp", recorded: nil))

            let stats = try scanner.rescan(
                ["a/one.txt", "new.txt", "a/b", "keep.txt", "link/x.txt", "link", ".stfolder", ".syncthing.new.txt.tmp"], in: &tree)
            #expect(stats.hashedFiles == 2)  // the edit and the new file; keep.txt reused
            let (whole, _) = try scanner.scan(previous: LocalTree())
            for path in ["a/one.txt", "new.txt", "a/b", "a/b/two.txt", "keep.txt", "link", "link/x.txt", ".stfolder", ".syncthing.new.txt.tmp"] {
                #expect(tree[path]?.contentHash == whole[path]?.contentHash, "\(path)")
                #expect(tree[path]?.kind == whole[path]?.kind, "\(path)")
            }
            #expect(tree["a/b/two.txt"] == nil && tree["link/x.txt"] == nil && tree["link"]?.kind == .symlink)
        }
    }

    @Test func hashesBlocksAsSyncthingDoes() throws {
        try folder { dir in
            try Data().write(to: URL(fileURLWithPath: dir.file("empty")))
            try Data(count: 128 << 10).write(to: URL(fileURLWithPath: dir.file("zeros")))
            let big = Data((0..<(300 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            try big.write(to: URL(fileURLWithPath: dir.file("big")))
            let (tree, stats) = try FolderScanner(root: dir.path).scan(previous: LocalTree())
            #expect(stats.hashedFiles == 3)

            let empty = try #require(tree["empty"])
            #expect(empty.blocks.count == 1)
            #expect(empty.blocks[0].hash.hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
            #expect(empty.blocks[0].weakHash == 0 && empty.blocks[0].size == 0)

            #expect(tree["zeros"]?.blocks.map(\.weakHash) == [0x001e_0001])

            let file = try #require(tree["big"])
            #expect(file.blocks.map(\.size) == [131072, 131072, 45056])
            #expect(file.blockSize == 131072 && file.size == 300 << 10)
            for (i, block) in file.blocks.enumerated() {
                let slice = big[(i * 131072)..<min(big.count, (i + 1) * 131072)]
                #expect(block.hash == ContentHash(SHA256.hash(data: slice)))
            }
            // The content hash is syncthing 2.x's blocks_hash: SHA-256 over the block hashes,
            // weak hashes left out (1.x's included them; Kaiten compares its own computation).
            var concatenated: [UInt8] = []
            for block in file.blocks { concatenated += block.hash.bytes }
            #expect(file.contentHash == ContentHash(SHA256.hash(data: concatenated)))
            var infos: [BEPBlockInfo] = []
            for block in file.blocks {
                var info = BEPBlockInfo()
                info.hash = Data(block.hash.bytes)
                info.weakHash = block.weakHash
                infos.append(info)
            }
            #expect(file.contentHash == BEPFileInfo.blocksHash(of: infos))
        }
    }

    @Test func skipsSyncthingsInternalAndTemporaryNames() throws {
        try folder { dir in
            for name in [".stignore", ".stversions/old.txt", ".syncthing.a.txt.tmp", "~syncthing~b.tmp", "sub/.syncthing.c.tmp", "sub/kept.txt", "kept.txt", "café-nfc"] {
                try TestFiles.write(dir.file(name), "x")
            }
            // A name in NFD (as macOS writes it) is reported and skipped, never renamed.
            _ = FileManager.default.createFile(atPath: dir.path + "/cafe\u{301}-nfd", contents: Data("x".utf8))
            try FileManager.default.createSymbolicLink(atPath: dir.file("link"), withDestinationPath: "kept.txt")
            var warnings: [String] = []
            let (tree, stats) = try FolderScanner(root: dir.path).scan(previous: LocalTree(), warn: { warnings.append($0) })
            #expect(Set(tree.dictionary().keys.map { Array($0.utf8) }) == Set(["sub", "sub/kept.txt", "kept.txt", "link", "café-nfc"].map { Array($0.utf8) }))
            #expect(warnings.count == 1 && warnings[0].contains("not in Unicode NFC"))
            #expect(Set(stats.temporaries) == [".syncthing.a.txt.tmp", "~syncthing~b.tmp", "sub/.syncthing.c.tmp"])
            #expect(tree["link"]?.kind == .symlink && tree["link"]?.symlinkTarget == "kept.txt")
            #expect(tree["sub"]?.kind == .directory)
        }
    }

    @Test func refusesAFolderWithoutItsMarker() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-scan")
        defer { dir.remove() }
        let error = #expect(throws: ScanError.self) { try FolderScanner(root: dir.path).scan(previous: LocalTree()) }
        #expect(error?.code == .markerMissing)
        #expect(error?.description.contains(".stfolder") == true)
        let missing = #expect(throws: ScanError.self) { try FolderScanner(root: dir.file("nope")).scan(previous: LocalTree()) }
        #expect(missing?.code == .folderMissing)
    }

    @Test func unchangedFilesAreNotHashedTwiceAndChangedOnesAre() throws {
        try folder { dir in
            for i in 0..<20 { try TestFiles.write(dir.file("d/f\(i).txt"), "file \(i)") }
            let scanner = FolderScanner(root: dir.path)
            let (first, stats1) = try scanner.scan(previous: LocalTree())
            #expect(stats1.hashedFiles == 20)
            #expect(stats1.changedEntries == 21, "every file and d/ are new")
            let cache = dir.file(".stfolder/cache")  // outside what the scan sees
            try ScanCache.save(first, path: cache)
            let loaded = ScanCache.load(path: cache) { Issue.record("\($0)") }
            #expect(loaded.dictionary() == first.dictionary())
            let (second, stats2) = try scanner.scan(previous: loaded)
            #expect(stats2.hashedFiles == 0 && stats2.reusedFiles == 20)
            #expect(stats2.changedEntries == 0, "read in place, the previous scan answers every path")
            #expect(second["d/f3.txt"] == first["d/f3.txt"])
            try TestFiles.write(dir.file("d/f3.txt"), "changed, longer")
            let (third, stats3) = try scanner.scan(previous: second)
            #expect(stats3.hashedFiles == 1)
            #expect(stats3.changedEntries == 1)
            #expect(third["d/f3.txt"]?.contentHash != first["d/f3.txt"]?.contentHash)
        }
    }

    /// Equal content has an equal hash only when cut into equal blocks: hashed with the block
    /// size the peer used (the hint), the local hash equals the peer's (SHA-256 over the
    /// 256 KiB blocks' hashes); with the default 128 KiB it differs.
    @Test func aBlockSizeHintMakesEqualContentHashEqual() throws {
        try folder { dir in
            var bytes = Data(count: 300 << 10)
            for i in stride(from: 0, to: bytes.count, by: 997) { bytes[i] = UInt8(truncatingIfNeeded: i) }
            try bytes.write(to: URL(fileURLWithPath: dir.file("f")))
            var overBlocks = SHA256()
            for start in stride(from: 0, to: bytes.count, by: 256 << 10) {
                overBlocks.update(data: Data(SHA256.hash(data: bytes.subdata(in: start..<min(start + (256 << 10), bytes.count)))))
            }
            let peerHash = ContentHash(overBlocks.finalize())
            let (plain, _) = try FolderScanner(root: dir.path).scan(previous: LocalTree())
            let (hinted, _) = try FolderScanner(root: dir.path).scan(previous: plain, blockSizeHint: { _, _ in 256 << 10 })
            #expect(hinted["f"]?.blocks.count == 2)
            #expect(hinted["f"]?.contentHash == peerHash)
            #expect(plain["f"]?.contentHash != peerHash)
        }
    }
}

@Suite(.timeLimit(.minutes(5)))
struct ScanCacheTests {
    @Test func roundTripsEveryFieldIncludingTheSyncedRecord() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        var counter = BEPCounter()
        counter.id = 42
        counter.value = 1_795_318_985
        var version = BEPVector()
        version.counters = [counter]
        let hash = ContentHash(SHA256.hash(data: [1, 2, 3]))
        var tree = LocalTree()
        tree["a/café.txt"] = LocalFile(
            path: "a/café.txt", kind: .file, size: 5, modifiedNs: 1_700_000_000_123_456_789, inode: 99, permissions: 0o640,
            contentHash: hash, blockSize: 131072, blocks: [LocalBlock(hash: hash, weakHash: 7, size: 5)],
            synced: SyncedVersion(version: version, contentHash: hash))
        tree["a"] = LocalFile(path: "a", kind: .directory, permissions: 0o755)
        tree["l"] = LocalFile(path: "l", kind: .symlink, symlinkTarget: "a/café.txt")
        try ScanCache.save(tree, path: dir.file("c"))
        let loaded = ScanCache.load(path: dir.file("c"))
        #expect(loaded.dictionary() == tree.dictionary())
    }

    @Test func aDamagedCacheIsReportedAndIgnored() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        var tree = LocalTree()
        tree["x"] = LocalFile(path: "x", kind: .file, size: 1)
        try ScanCache.save(tree, path: dir.file("c"))
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.file("c"))))
        bytes[bytes.count / 2] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: dir.file("c")))
        var warnings: [String] = []
        #expect(ScanCache.load(path: dir.file("c")) { warnings.append($0) }.count == 0)
        #expect(warnings.count == 1 && warnings[0].contains("damaged"))
    }

    static func file(_ path: String, size: Int64 = 1) -> LocalFile {
        let hash = ContentHash(SHA256.hash(data: Array(path.utf8)))
        return LocalFile(
            path: path, kind: .file, size: size, modifiedNs: 7, inode: UInt64(path.utf8.count), contentHash: hash, blockSize: 131072,
            blocks: [LocalBlock(hash: hash, weakHash: 1, size: Int32(size))])
    }

    /// A saved cache loads read in place (nothing in memory), answers like the tree it was made
    /// from, takes changes on top (added before, between and after its paths, replaced, removed),
    /// and saves the combination exactly.
    @Test func aSavedCacheIsReadInPlaceAndTakesChangesOnTop() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        var tree = LocalTree()
        // Byte order differs from String order for some of these: é (C3 A9) sorts after z.
        for path in ["b", "b/x", "b/y", "d", "d/é", "d/z", "f", "f/ü/1", "h"] { tree[path] = Self.file(path) }
        let path = dir.file("c")
        let inPlace = try ScanCache.saveAndReadInPlace(tree, path: path)
        #expect(inPlace.entriesInMemory == 0 && inPlace.base != nil)
        #expect(inPlace.count == tree.count)
        #expect(inPlace.dictionary() == tree.dictionary())
        for file in tree.files { #expect(inPlace[file.path] == file) }
        #expect(inPlace["c"] == nil && inPlace["a"] == nil && inPlace["z"] == nil && inPlace[""] == nil)
        #expect(Set(inPlace.files(withPrefix: "d/").map(\.path)) == ["d/é", "d/z"])
        #expect(Set(inPlace.files(withPrefix: "").map(\.path)).count == 9)

        var changed = inPlace
        var expected = tree.dictionary()
        for (name, size) in [("a", 2), ("c", 3), ("d/zz", 4), ("z", 5), ("d/é", 6)] as [(String, Int64)] {
            changed[name] = Self.file(name, size: size)
            expected[name] = Self.file(name, size: size)
        }
        for name in ["b/x", "h", "nowhere"] {
            changed[name] = nil
            expected[name] = nil
        }
        changed["h"] = Self.file("h", size: 9)  // removed, then back
        expected["h"] = Self.file("h", size: 9)
        changed["b/y"]?.size = 8
        expected["b/y"]?.size = 8
        #expect(changed.count == expected.count)
        #expect(changed.dictionary() == expected)
        #expect(Set(changed.files(withPrefix: "d/").map(\.path)) == ["d/é", "d/z", "d/zz"])
        #expect(changed.files.count { _ in true } == expected.count)

        let again = try ScanCache.saveAndReadInPlace(changed, path: path)
        #expect(again.entriesInMemory == 0)
        #expect(again.dictionary() == expected)
        #expect(ScanCache.load(path: path, under: "d").dictionary().keys.sorted() == ["d/zz", "d/z", "d/é"].sorted())
        #expect(try ScanCache.decode([UInt8](Data(contentsOf: URL(fileURLWithPath: path)))).dictionary() == expected)
    }

    /// A cache in format 2 (no offset table) still loads, into memory; the next save is format 3.
    @Test func aFormat2CacheLoadsAndIsSavedInPlace() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        var tree = LocalTree()
        for path in ["a", "a/b", "c"] { tree[path] = Self.file(path) }
        try Data(ScanCache.encode(tree, format: 2)).write(to: URL(fileURLWithPath: dir.file("c")))
        let old = ScanCache.load(path: dir.file("c")) { Issue.record("\($0)") }
        #expect(old.base == nil && old.dictionary() == tree.dictionary())
        let saved = try ScanCache.saveAndReadInPlace(old, path: dir.file("c"))
        #expect(saved.base != nil && saved.dictionary() == tree.dictionary())
    }

    /// What a cache says is checked before it is read in place: records out of order (a
    /// bisection would miss paths) or an offset table pointing elsewhere are damage, reported.
    @Test func aCacheWhoseRecordsAreOutOfOrderOrMisplacedIsRejected() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        var tree = LocalTree()
        for path in ["a", "b"] { tree[path] = Self.file(path) }
        let good = ScanCache.encode(tree)
        func resealed(_ bytes: [UInt8]) -> [UInt8] {
            var body = Array(bytes.dropLast(4))
            let crc = body.withUnsafeBufferPointer { UInt32(crc32(0, $0.baseAddress, uInt($0.count))) }
            body.appendBigEndian(crc)
            return body
        }
        // "a" → "c": the records say a, b in the table's order but read c, b.
        var outOfOrder = good
        outOfOrder[20] = UInt8(ascii: "c")
        // The second offset one byte later.
        var misplaced = good
        misplaced[misplaced.count - 5] &+= 1
        for (name, bytes) in [("order", resealed(outOfOrder)), ("table", resealed(misplaced))] {
            try Data(bytes).write(to: URL(fileURLWithPath: dir.file(name)))
            var warnings: [String] = []
            #expect(ScanCache.load(path: dir.file(name)) { warnings.append($0) }.count == 0, "\(name)")
            #expect(warnings.count == 1, "\(name): \(warnings)")
        }
    }
}
