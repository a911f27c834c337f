import Testing

@testable import KaitenStream

@Suite(.timeLimit(.minutes(5)))
struct HTTPRangeTests {
    @Test func resolvesEveryKindOfRange() {
        #expect(HTTPRange.resolve(nil, size: 100) == .full)
        #expect(HTTPRange.resolve("bytes=0-9", size: 100) == .ranges([0...9]))
        #expect(HTTPRange.resolve("bytes=90-", size: 100) == .ranges([90...99]))
        #expect(HTTPRange.resolve("bytes=-10", size: 100) == .ranges([90...99]))
        #expect(HTTPRange.resolve("bytes=-1000", size: 100) == .ranges([0...99]))
        #expect(HTTPRange.resolve("bytes=50-1000", size: 100) == .ranges([50...99]))
        #expect(HTTPRange.resolve("bytes=0-0, 5-9", size: 100) == .ranges([0...0, 5...9]))
        #expect(HTTPRange.resolve("bytes=100-", size: 100) == .unsatisfiable)
        #expect(HTTPRange.resolve("bytes=-0", size: 100) == .unsatisfiable)
        #expect(HTTPRange.resolve("bytes=200-300, 5-9", size: 100) == .ranges([5...9]))
        #expect(HTTPRange.resolve("bytes=9-5", size: 100) == .full)
        #expect(HTTPRange.resolve("items=0-5", size: 100) == .full)
        #expect(HTTPRange.resolve("bytes=abc", size: 100) == .full)
        #expect(HTTPRange.resolve("bytes=0-1", size: 0) == .unsatisfiable)
    }
}

@Suite(.timeLimit(.minutes(5)))
struct URLSignerTests {
    /// Every alteration of folder, path, expiry or signature is refused. (The comparison is
    /// HMAC's own `isValidAuthenticationCode`, constant-time by construction; a unit test cannot
    /// measure that, so the name does not claim it.)
    @Test func signsAndVerifiesAndRefusesEveryAlteration() {
        let signer = URLSigner(key: Array(repeating: 7, count: 32))
        let sig = signer.signature(folder: "f", path: "a b.mkv", expires: 100)
        #expect(sig.count == 64)
        #expect(signer.verify(folder: "f", path: "a b.mkv", expires: 100, signature: sig))
        #expect(!signer.verify(folder: "f", path: "a b.mkv", expires: 101, signature: sig))
        #expect(!signer.verify(folder: "g", path: "a b.mkv", expires: 100, signature: sig))
        #expect(!signer.verify(folder: "f", path: "a b.mkv ", expires: 100, signature: sig))
        #expect(!signer.verify(folder: "f", path: "a b.mkv", expires: 100, signature: String(sig.dropLast())))
        #expect(!signer.verify(folder: "f", path: "a b.mkv", expires: 100, signature: String(repeating: "z", count: 64)))
        #expect(signer.url(base: "http://h", folder: "f", path: "a b.mkv", expires: 100) == "http://h/file?folder=f&path=a%20b.mkv&exp=100&sig=\(sig)")
        #expect(!StreamServer.isClean("../etc/passwd") && !StreamServer.isClean("/abs") && StreamServer.isClean("a/b.mkv"))
    }
}
