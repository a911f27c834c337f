import Crypto
import Foundation
import KaitenProtocol

/// A file's block list as syncthing's scanner makes it for small files: 128 KiB blocks with
/// their SHA-256, and one empty block for an empty file.
public enum TestBlocks {
    public static let size = 128 << 10

    public static func of(_ data: some Collection<UInt8>) -> [BEPBlockInfo] {
        let bytes = Array(data)
        var blocks: [BEPBlockInfo] = []
        var offset = 0
        repeat {
            let end = min(offset + size, bytes.count)
            var block = BEPBlockInfo()
            block.offset = Int64(offset)
            block.size = Int32(end - offset)
            block.hash = Data(SHA256.hash(data: bytes[offset..<end]))
            blocks.append(block)
            offset = end
        } while offset < bytes.count
        return blocks
    }
}
