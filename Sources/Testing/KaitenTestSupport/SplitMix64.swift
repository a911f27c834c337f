import Foundation

/// A small deterministic generator (SplitMix64), so fuzz and random-moment failures can be
/// replayed from a printed seed.
public struct SplitMix64: RandomNumberGenerator {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension SplitMix64 {
    /// A generator for a test's random choices (moments to kill, ranges to read): seeded from
    /// `KAITEN_TEST_SEED` when set, else at random; the seed is printed first, so a failing
    /// run is replayed with `KAITEN_TEST_SEED=<seed> swift test --filter <test>`.
    public static func forTest(_ name: String) -> SplitMix64 {
        let environment = ProcessInfo.processInfo.environment
        let seed = (environment["KAITEN_TEST_SEED"] ?? environment["KAITEN_FUZZ_SEED"]).flatMap(UInt64.init)
            ?? UInt64.random(in: 1...UInt64.max)
        FileHandle.standardError.write(Data("\(name): KAITEN_TEST_SEED=\(seed)\n".utf8))
        return SplitMix64(seed: seed)
    }
}
