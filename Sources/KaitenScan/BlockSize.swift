/// syncthing's block size rule (bep-brief §5.1, lib/protocol.BlockSize).
public enum BlockSize {
    public static let valid: [Int32] = (0..<8).map { Int32(128 << 10) << $0 }

    /// The smallest valid size B with `size < 2000 * B`, else 16 MiB.
    public static func forFileSize(_ size: Int64) -> Int32 {
        for candidate in valid where size < 2000 * Int64(candidate) { return candidate }
        return valid.last!
    }

    /// The rule with syncthing's hysteresis: an earlier block size within a factor of two of the
    /// rule's choice is kept, so a file that grows a little is not re-blocked.
    public static func forFileSize(_ size: Int64, previous: Int32?) -> Int32 {
        let chosen = forFileSize(size)
        if let previous, valid.contains(previous), previous <= chosen * 2, previous * 2 >= chosen { return previous }
        return chosen
    }
}
