internal import CLZ4

/// LZ4 block compression through the system's liblz4, as BEP uses it: one raw LZ4 block, no
/// frame (bep-brief §2.3).
public enum LZ4 {
    /// Decompresses one raw LZ4 block that must expand to exactly `expectedSize` bytes.
    /// - Throws: ``LZ4Error/corruptInput`` for data liblz4 rejects, or
    ///   ``LZ4Error/sizeMismatch(expected:actual:)`` when the output length differs.
    public static func decompress(_ input: some Collection<UInt8>, expectedSize: Int) throws(LZ4Error) -> [UInt8] {
        guard expectedSize >= 0, expectedSize <= Int(Int32.max) else { throw .corruptInput }
        if expectedSize == 0 {
            return []
        }
        let source = Array(input)
        guard source.count <= Int(Int32.max) else { throw .corruptInput }
        var output = [UInt8](repeating: 0, count: expectedSize)
        let produced = source.withUnsafeBufferPointer { src in
            output.withUnsafeMutableBufferPointer { dst in
                src.baseAddress.map { base in
                    base.withMemoryRebound(to: CChar.self, capacity: src.count) { s in
                        dst.baseAddress!.withMemoryRebound(to: CChar.self, capacity: dst.count) { d in
                            LZ4_decompress_safe(s, d, Int32(src.count), Int32(dst.count))
                        }
                    }
                } ?? -1
            }
        }
        guard produced >= 0 else { throw .corruptInput }
        guard Int(produced) == expectedSize else { throw .sizeMismatch(expected: expectedSize, actual: Int(produced)) }
        return output
    }

    /// Compresses bytes into one raw LZ4 block.
    public static func compress(_ input: [UInt8]) -> [UInt8] {
        guard !input.isEmpty else { return [0] }  // liblz4's encoding of an empty block: a zero token
        let bound = Int(LZ4_compressBound(Int32(input.count)))
        var output = [UInt8](repeating: 0, count: bound)
        let written = input.withUnsafeBufferPointer { src in
            output.withUnsafeMutableBufferPointer { dst in
                src.baseAddress!.withMemoryRebound(to: CChar.self, capacity: src.count) { s in
                    dst.baseAddress!.withMemoryRebound(to: CChar.self, capacity: dst.count) { d in
                        LZ4_compress_default(s, d, Int32(src.count), Int32(dst.count))
                    }
                }
            }
        }
        return Array(output.prefix(Int(max(written, 0))))
    }
}

/// Why an LZ4 block could not be decompressed.
public enum LZ4Error: Error, Equatable, Sendable, CustomStringConvertible {
    case corruptInput
    case sizeMismatch(expected: Int, actual: Int)

    public var description: String {
        switch self {
        case .corruptInput: return "corrupt LZ4 block"
        case .sizeMismatch(let expected, let actual):
            return "LZ4 block expanded to \(actual) bytes, the message said \(expected)"
        }
    }
}
