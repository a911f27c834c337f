/// Hard limits the frame decoder enforces before allocating anything.
public struct BEPLimits: Sendable, Equatable {
    /// The largest on-wire message body: syncthing's `MaxMessageLen`, 500,000,000 bytes.
    public var maxMessageLength: Int
    /// The largest size a compressed body may claim to expand to. Syncthing 1.19.2 checks no
    /// limit here; Kaiten refuses more than 64 MiB: an Index batch is about 250 KiB and a block
    /// response at most 16 MiB, so anything near the cap is an attack or a bug.
    public var maxDecompressedLength: Int
    /// The largest Hello: syncthing refuses lengths over 32767.
    public var maxHelloLength: Int

    public init(maxMessageLength: Int = 500_000_000, maxDecompressedLength: Int = 64 << 20, maxHelloLength: Int = 32767)
    {
        self.maxMessageLength = maxMessageLength
        self.maxDecompressedLength = maxDecompressedLength
        self.maxHelloLength = maxHelloLength
    }

    public static let `default` = BEPLimits()
}
