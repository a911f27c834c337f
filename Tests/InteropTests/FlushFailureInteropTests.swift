import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// A flush that fails (issue 42, item 4), injected into a real `kaiten apply` by a preloaded
/// library that makes `fsync` and `syncfs` return EIO where the test says: a file whose flush
/// failed is never put under its name, never reported done, never recorded as synced (the next
/// plan pulls it again); a directory that cannot be flushed is reported and holds the folder's
/// deletions back. Against a real peer, both generations.
@Suite(.ownThread, .serialized, .timeLimit(.minutes(10)))
struct FlushFailureInteropTests {
    static let folder = ApplyInteropTests.folder

    /// `fsync`/`fdatasync` fail with EIO on a descriptor whose path contains
    /// KAITEN_TEST_FAIL_FSYNC, or is exactly KAITEN_TEST_FAIL_FSYNC_DIR; `syncfs` fails while
    /// KAITEN_TEST_FAIL_SYNCFS is set. Everything else goes to libc.
    static let shim = #"""
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <errno.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>

        static int doomed(int fd) {
            const char *part = getenv("KAITEN_TEST_FAIL_FSYNC"), *exact = getenv("KAITEN_TEST_FAIL_FSYNC_DIR");
            char link[64], target[4096];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, target, sizeof target - 1);
            if (n < 0) return 0;
            target[n] = 0;
            return (part && *part && strstr(target, part)) || (exact && *exact && strcmp(target, exact) == 0);
        }
        int fsync(int fd) {
            if (doomed(fd)) { errno = EIO; return -1; }
            return ((int (*)(int))dlsym(RTLD_NEXT, "fsync"))(fd);
        }
        int fdatasync(int fd) {
            if (doomed(fd)) { errno = EIO; return -1; }
            return ((int (*)(int))dlsym(RTLD_NEXT, "fdatasync"))(fd);
        }
        int syncfs(int fd) {
            if (getenv("KAITEN_TEST_FAIL_SYNCFS")) { errno = EIO; return -1; }
            return ((int (*)(int))dlsym(RTLD_NEXT, "syncfs"))(fd);
        }
        """#

    static func buildShim(in dir: TemporaryDirectory) throws -> String {
        try Self.shim.write(toFile: dir.file("flush-fails.c"), atomically: true, encoding: .utf8)
        guard let compiler = ProcessRunner.which("clang") ?? ProcessRunner.which("cc") else {
            throw HarnessError("no C compiler (clang comes with Swift) to build the fsync-failing library")
        }
        let built = try ProcessRunner.run(compiler, ["-shared", "-fPIC", "-O2", "-o", dir.file("flush-fails.so"), dir.file("flush-fails.c"), "-ldl"])
        guard built.status == 0 else { throw HarnessError("building the fsync-failing library: \(built.stderr)") }
        return dir.file("flush-fails.so")
    }

    static func planned(_ world: ApplyInteropTests.World) throws -> [String: String] {
        let plan = try world.kaiten("plan", "--offline", "--json")
        let object = try JSONSerialization.jsonObject(with: Data(plan.stdout.utf8)) as? [String: Any]
        let folders = object?["folders"] as? [[String: Any]] ?? []
        var actions: [String: String] = [:]
        for folder in folders {
            for action in folder["actions"] as? [[String: Any]] ?? [] {
                if let path = action["path"] as? String, let kind = action["action"] as? String { actions[path] = kind }
            }
        }
        return actions
    }

    @Test func aFailedFlushIsNeverCalledDurable() async throws {
        let dir = try TemporaryDirectory(prefix: "kaiten-flush")
        defer { dir.remove() }
        let library = try Self.buildShim(in: dir)
        let world = try ApplyInteropTests.World(dir)
        let st = try SyncthingInstance.generate(in: dir.path, name: "a")
        try TestFiles.write(world.peerData + "/fails-small.txt", "small enough to share a flush\n")
        try TestFiles.random(world.peerData + "/fails-big.bin", size: 2 << 20)
        try TestFiles.random(world.peerData + "/ok.bin", size: 2 << 20)
        try TestFiles.write(world.peerData + "/doomed.txt", "deselected later\n")
        func content(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }
        func apply(_ environment: [String: String]) throws -> ProcessResult {
            try KaitenCLI.run(["apply", "--yes", "--home", world.home], environment: environment.merging(["LD_PRELOAD": library]) { a, _ in a })
        }

        try await withSyncthing(st) { st in
            try await world.share(st, files: 4)
            #expect(try world.kaiten("select", Self.folder, "doomed.txt").status == 0)
            #expect(try world.kaiten("apply", "--yes").status == 0)
            #expect(try world.kaiten("select", Self.folder, "fails-small.txt", "fails-big.bin", "ok.bin").status == 0)

            // The file system flush fails, and so does each fails-* file's own fsync: a small file
            // shares the flush, or has its own when the system holds much else to write.
            let failed = try apply(["KAITEN_TEST_FAIL_SYNCFS": "1", "KAITEN_TEST_FAIL_FSYNC": "fails-"])
            #expect(failed.status == 5, "\(failed.stdout)\(failed.stderr)")
            let said = failed.stdout + failed.stderr
            #expect(said.contains("fails-small.txt") && said.contains("fails-big.bin") && said.contains("cannot flush it to disk"), "\(said)")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/fails-small.txt"))
            #expect(!FileManager.default.fileExists(atPath: world.local + "/fails-big.bin"))
            #expect(content(world.local + "/ok.bin") == content(world.peerData + "/ok.bin"), "a file whose own fsync worked lands")
            let temps = try FileManager.default.contentsOfDirectory(atPath: world.local).filter { $0.hasPrefix(".syncthing.") }
            #expect(temps.isEmpty, "\(temps)")
            // Not recorded as synced: the next plan pulls both again, and not ok.bin.
            let again = try Self.planned(world)
            #expect(again["fails-small.txt"] == "pull" && again["fails-big.bin"] == "pull" && again["ok.bin"] == nil, "\(again)")

            // The folder's directory cannot be flushed. A new allowlist is in place but not
            // durable: said, and the folder stops there (nothing pulled, nothing deleted).
            #expect(try world.kaiten("deselect", Self.folder, "ok.bin").status == 0)
            let allowlist = try apply(["KAITEN_TEST_FAIL_FSYNC_DIR": world.local])
            #expect(allowlist.status == 5, "\(allowlist.stdout)\(allowlist.stderr)")
            #expect(allowlist.stderr.contains(".stignore: written, but its directory could not be flushed to disk"), "\(allowlist.stderr)")
            #expect(FileManager.default.fileExists(atPath: world.local + "/ok.bin"), "no deletion after an allowlist that is not durable")
            #expect(!FileManager.default.fileExists(atPath: world.local + "/fails-small.txt"))
            #expect(try world.kaiten("select", Self.folder, "ok.bin").status == 0)
            // The allowlist made durable again; the fails-* files still fail, left to pull.
            let rewritten = try apply(["KAITEN_TEST_FAIL_FSYNC": "fails-"])
            #expect(rewritten.status == 5 && !rewritten.stderr.contains(".stignore"), "\(rewritten.stdout)\(rewritten.stderr)")

            // The allowlist unchanged, a file deleted on the peer and the pulls left over: the
            // files put into the directory are not called durable, and the deletion is held back.
            try FileManager.default.removeItem(atPath: world.peerData + "/doomed.txt")
            try await ApplyInteropTests.rescan(st)
            #expect(try world.kaiten("index", "sync").status == 0)
            let unflushed = try apply(["KAITEN_TEST_FAIL_FSYNC_DIR": world.local])
            #expect(unflushed.status == 5, "\(unflushed.stdout)\(unflushed.stderr)")
            #expect((unflushed.stdout + unflushed.stderr).contains("cannot flush the directory to disk"), "\(unflushed.stdout)\(unflushed.stderr)")
            #expect(FileManager.default.fileExists(atPath: world.local + "/doomed.txt"), "no deletion after an unflushed directory")

            // Flushes work again: everything lands, the file deleted on the peer goes.
            let healed = try world.kaiten("apply", "--yes")
            #expect(healed.status == 0, "\(healed.stdout)\(healed.stderr)")
            for name in ["fails-small.txt", "fails-big.bin", "ok.bin"] { #expect(content(world.local + "/" + name) == content(world.peerData + "/" + name), "\(name)") }
            #expect(!FileManager.default.fileExists(atPath: world.local + "/doomed.txt"))
        }
    }
}
