import Crypto
import Foundation
import KaitenProtocol
import KaitenTestSupport
import Synchronization
import Testing

@testable import KaitenStream

@Suite(.timeLimit(.minutes(5)))
struct DiskBlockCacheTests {
    static func block(_ seed: UInt8, size: Int = 1000) -> (ContentHash, Data) {
        let data = Data((0..<size).map { UInt8(truncatingIfNeeded: Int($0) &* 31 &+ Int(seed)) })
        return (ContentHash(SHA256.hash(data: data)), data)
    }

    @Test func keepsBlocksWithinTheBudgetLeastRecentlyUsedFirstOut() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        let cache = try DiskBlockCache(directory: dir.file("blocks"), budget: 3000)
        let (a, da) = Self.block(1)
        let (b, db) = Self.block(2)
        let (c, dc) = Self.block(3)
        let (d, dd) = Self.block(4)
        cache.put(a, da)
        cache.put(b, db)
        cache.put(c, dc)
        #expect(cache.get(a) == da)  // a is now newer than b
        cache.put(d, dd)
        #expect(cache.contains(a) && !cache.contains(b) && cache.contains(c) && cache.contains(d))
        #expect(!FileManager.default.fileExists(atPath: cache.path(of: b)))
        let figures = cache.figures
        #expect(figures.bytes == 3000 && figures.blocks == 3 && figures.evictions == 1 && figures.hits == 1)
    }

    /// A full disk is said once per spell: a file's short last block that fits in what is left
    /// does not end the spell (the next full block is refused again, and said again, in CI's
    /// mount test), nor does a full block that fits in what a refused one's removal freed; a
    /// block as big as the refused ones that fits with room to spare does.
    @Test func aFullDiskIsSaidOnceUntilABlockAsBigAsTheRefusedOnesFits() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        let blocks = dir.file("blocks")
        try FileManager.default.createDirectory(atPath: blocks, withIntermediateDirectories: true)
        guard getuid() == 0, mount("kaiten-test-full", blocks, "tmpfs", 0, "size=1536k,mode=0700") == 0 else {
            try Test.cancel("a full disk is a small tmpfs, which only root may mount (CI runs as root)")
        }
        defer { umount2(blocks, Int32(MNT_DETACH)) }
        let said = Mutex<[String]>([])
        let cache = try DiskBlockCache(directory: blocks, budget: 1 << 30, log: { line in said.withLock { $0.append(line) } })
        // A filler leaves room for about two full blocks.
        let filler = blocks + "/filler"
        FileManager.default.createFile(atPath: filler, contents: Data(count: 1280 << 10))
        for seed in UInt8(1)...4 {
            let (hash, data) = Self.block(seed, size: 100 << 10)
            cache.put(hash, data)
        }
        let (tail, tailData) = Self.block(9, size: 2000)
        cache.put(tail, tailData)
        #expect(cache.contains(tail), "a short block still fits")
        let (next, nextData) = Self.block(5, size: 100 << 10)
        cache.put(next, nextData)
        #expect(!cache.contains(next))
        var lines = said.withLock { $0 }
        #expect(lines.count == 1 && lines[0].contains("cannot keep blocks"), "\(lines)")
        // Some room comes back (as when a refused block's partial file is removed): a full
        // block fits in it, with less than another to spare. The spell goes on, and the next
        // refusal is not said again.
        try #require(truncate(filler, off_t(1160 << 10)) == 0)
        let (edge, edgeData) = Self.block(7, size: 100 << 10)
        cache.put(edge, edgeData)
        #expect(cache.contains(edge))
        let (after, afterData) = Self.block(8, size: 100 << 10)
        cache.put(after, afterData)
        #expect(!cache.contains(after))
        lines = said.withLock { $0 }
        #expect(lines.count == 1, "\(lines)")
        try FileManager.default.removeItem(atPath: filler)
        let (room, roomData) = Self.block(6, size: 100 << 10)
        cache.put(room, roomData)
        #expect(cache.contains(room))
        lines = said.withLock { $0 }
        #expect(lines.count == 2 && lines[1].contains("again"), "\(lines)")
        #expect(cache.figures.unkept >= 2)
    }

    @Test func theBlocksOfAnOpenFileAreNeverEvictedUnderIt() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        let cache = try DiskBlockCache(directory: dir.file("blocks"), budget: 2000)
        let (a, da) = Self.block(1)
        let (b, db) = Self.block(2)
        let (c, dc) = Self.block(3)
        cache.hold([a])
        cache.put(a, da)
        cache.put(b, db)
        cache.put(c, dc)
        #expect(cache.contains(a) && !cache.contains(b) && cache.contains(c), "a was the oldest but held: b went")
        cache.release([a])
        #expect(cache.contains(a) && cache.figures.bytes == 2000)
        let (d, dd) = Self.block(4)
        cache.put(d, dd)
        #expect(!cache.contains(a) && cache.contains(c) && cache.contains(d), "released, a is the oldest")
        cache.hold([c])
        #expect(cache.drop([c]) == 0, "a held block is not dropped")
        cache.release([c])
        #expect(cache.drop([c, d]) == 2000 && cache.figures.blocks == 0)
    }

    @Test func aDamagedBlockIsDroppedNeverServed() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        let cache = try DiskBlockCache(directory: dir.file("blocks"), budget: 1 << 20)
        let (a, da) = Self.block(1)
        let (b, db) = Self.block(2)
        cache.put(a, da)
        cache.put(b, db)
        var damaged = da
        damaged[500] ^= 0x01
        try damaged.write(to: URL(fileURLWithPath: cache.path(of: a)))
        try db.prefix(10).write(to: URL(fileURLWithPath: cache.path(of: b)))
        #expect(cache.get(a) == nil && cache.get(b) == nil)
        #expect(!FileManager.default.fileExists(atPath: cache.path(of: a)) && !FileManager.default.fileExists(atPath: cache.path(of: b)))
        #expect(cache.figures.dropped == 2 && cache.figures.blocks == 0 && cache.figures.bytes == 0)
    }

    @Test func survivesARestartInItsOrderAndDropsLeftovers() throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-cache")
        defer { dir.remove() }
        let (a, da) = Self.block(1)
        let (b, db) = Self.block(2)
        do {
            let cache = try DiskBlockCache(directory: dir.file("blocks"), budget: 1 << 20)
            cache.put(a, da)
            cache.put(b, db)
            // a used last: the file's time says so across the restart.
            var old = [timespec(tv_sec: 1_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000, tv_nsec: 0)]
            utimensat(AT_FDCWD, cache.path(of: b), &old, 0)
            old = [timespec(tv_sec: 2_000_000, tv_nsec: 0), timespec(tv_sec: 2_000_000, tv_nsec: 0)]
            utimensat(AT_FDCWD, cache.path(of: a), &old, 0)
            let shard = (cache.path(of: a) as NSString).deletingLastPathComponent
            try Data("half".utf8).write(to: URL(fileURLWithPath: shard + "/.tmp-0123456789abcdef-1"))
        }
        let cache = try DiskBlockCache(directory: dir.file("blocks"), budget: 1000)
        #expect(cache.contains(a) && !cache.contains(b), "the least recently used went to fit the smaller budget")
        #expect(cache.get(a) == da)
        let shard = (cache.path(of: a) as NSString).deletingLastPathComponent
        #expect(try FileManager.default.contentsOfDirectory(atPath: shard) == [a.hex])
    }

    @Test func budgetsAsUsersWriteThem() throws {
        #expect(DiskBlockCache.budget("500M", for: "/") == 500 << 20)
        #expect(DiskBlockCache.budget("2G", for: "/") == 2 << 30)
        #expect(DiskBlockCache.budget("1.5GiB", for: "/") == 3 << 29)
        #expect(DiskBlockCache.budget("10MB", for: "/") == 10_000_000)
        #expect(DiskBlockCache.budget("4096", for: "/") == 4096)
        #expect(DiskBlockCache.budget("0%", for: "/") == nil)
        #expect(DiskBlockCache.budget("lots", for: "/") == nil)
        #expect(DiskBlockCache.budget("-1G", for: "/") == nil)
        let tenth = try #require(DiskBlockCache.budget("10%", for: "/"))
        #expect(tenth > 0)
        #expect(DiskBlockCache.defaultBudget(for: "/") == min(tenth, 20 << 30))
    }
}

@Suite(.timeLimit(.minutes(1)))
struct PlaceholderStateTests {
    @Test func saysWhatThisDeviceHolds() {
        func state(_ name: String = "a.jpg", global: Bool = true, local: PlaceholderState.LocalCopy = .absent, selected: Bool = false, cached: Int = 0, of blocks: Int = 4) -> PlaceholderState {
            PlaceholderState.of(name: name, inGlobalIndex: global, local: local, selected: selected, cachedBlocks: cached, blocks: blocks)
        }
        #expect(state() == .onlineOnly)
        #expect(state(cached: 1) == .partial)
        #expect(state(cached: 4) == .cached)
        #expect(state(cached: 0, of: 0) == .cached, "an empty file needs nothing fetched")
        #expect(state(selected: true) == .pinned)
        #expect(state(local: .same, selected: true) == .pinned)
        #expect(state(local: .differs, selected: true) == .pinned, "a kept file being edited is still kept")
        #expect(state(local: .same) == .cached, "a copy the next apply frees")
        #expect(state(local: .differs) == .conflict)
        #expect(state(global: false, local: .same) == .localOnly)
        #expect(state("a.sync-conflict-20250101-000000-ABCDEFG.jpg", local: .same, selected: true) == .conflict)
    }
}
