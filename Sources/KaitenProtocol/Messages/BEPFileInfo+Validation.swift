import Foundation
import KaitenProtocol

/// Why a peer's FileInfo or request name is refused (syncthing lib/protocol/protocol.go:
/// checkFilename, checkFileInfoConsistency).
public enum WireNameError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    case notCanonical(String)
    case notNFC(String)
    case escapesFolder(String)
    case inconsistent(String, String)

    public var description: String {
        switch self {
        case .empty: return "empty file name"
        case .notCanonical(let n): return "file name \"\(n)\" is not in canonical form (//, ./, trailing / or \\)"
        case .notNFC(let n): return "file name \"\(n)\" is not Unicode NFC"
        case .escapesFolder(let n): return "file name \"\(n)\" is absolute or escapes the folder"
        case .inconsistent(let n, let why): return "file \"\(n)\": \(why)"
        }
    }
}

/// The wire rules for names: UTF-8 NFC, `/`-separated, clean, relative, inside the folder.
public enum WireName {
    /// Checks a name as syncthing checks every FileInfo.name and Request.name.
    /// Every byte below 0x80: such a name is in NFC without normalising it.
    public static func isASCII(_ name: String) -> Bool {
        name.utf8.withContiguousStorageIfAvailable { isASCII(bytes: UnsafeRawBufferPointer($0)) } ?? name.utf8.allSatisfy { $0 < 0x80 }
    }

    /// The same over bytes, eight at a time (a log's replay checks every name it decodes).
    public static func isASCII(bytes: UnsafeRawBufferPointer) -> Bool {
        var at = 0
        while at + 8 <= bytes.count {
            if bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
            at += 8
        }
        while at < bytes.count {
            if bytes[at] & 0x80 != 0 { return false }
            at += 1
        }
        return true
    }

    public static func validate(_ name: String) throws(WireNameError) {
        guard !name.isEmpty else { throw .empty }
        // Over bytes, as syncthing reads a name: Swift's String APIs see grapheme clusters, and a
        // combining mark after "/" would hide that slash from hasPrefix or split ("../\u{301}x"
        // is one cluster "/\u{301}" to them and the component ".." to the file system).
        if let problem = byteProblem(name) { throw problem == .escapes ? .escapesFolder(name) : .notCanonical(name) }
        // Swift's String == compares canonically equivalent strings as equal; compare the bytes
        // (ASCII is NFC as it is: no normalisation for most names).
        if !isASCII(name) && !name.precomposedStringWithCanonicalMapping.utf8.elementsEqual(name.utf8) { throw .notNFC(name) }
    }

    private enum ByteProblem { case escapes, notCanonical }

    /// A leading "/" or a ".." component escapes; an empty or "." component (a "//", a trailing
    /// "/", a "./") or a NUL byte is not canonical.
    private static func byteProblem(_ name: String) -> ByteProblem? {
        var problem: ByteProblem?
        var component = 0
        var dots = 0
        var first = true
        func endComponent() -> ByteProblem? {
            if component == 0 { return first ? .escapes : .notCanonical }
            if component == dots && dots == 2 { return .escapes }
            if component == dots && dots == 1 { return .notCanonical }
            return nil
        }
        for byte in name.utf8 {
            switch byte {
            case 0:
                if problem == nil { problem = .notCanonical }
            case UInt8(ascii: "/"):
                if let found = endComponent(), problem != .escapes { problem = found }
                component = 0
                dots = 0
                first = false
            default:
                component += 1
                if byte == UInt8(ascii: ".") { dots += 1 }
            }
        }
        if let found = endComponent(), problem != .escapes { problem = found }
        return problem
    }
}

extension WireName {
    /// Whether `name` stays inside the folder: relative, no empty, `.` or `..` component, no
    /// NUL. The cheap byte-level half of ``validate(_:)`` (no NFC check), for places that see
    /// every record, such as replaying a log.
    public static func staysInsideFolder(_ name: String) -> Bool {
        // Over the string's own bytes when it has them in one piece (a native string does):
        // walking the UTF-8 view costs more than the check.
        name.utf8.withContiguousStorageIfAvailable { staysInsideFolder(bytes: UnsafeRawBufferPointer($0)) }
            ?? staysInsideFolder(bytes: name.utf8)
    }

    @inlinable
    public static func staysInsideFolder<C: Collection<UInt8>>(bytes: C) -> Bool {
        guard !bytes.isEmpty else { return false }
        var componentLength = 0
        var dots = 0
        for byte in bytes {
            switch byte {
            case 0: return false
            case UInt8(ascii: "/"):
                if componentLength == 0 || componentLength == dots && dots <= 2 { return false }
                componentLength = 0
                dots = 0
            default:
                componentLength += 1
                if byte == UInt8(ascii: ".") { dots += 1 }
            }
        }
        return componentLength > 0 && !(componentLength == dots && dots <= 2)
    }
}

extension BEPFileInfo {
    /// Checks a received entry before anything else looks at it: its name, and that its
    /// shape fits its kind (a deleted entry or a directory has no blocks; a live regular file
    /// has at least one).
    public func validate() throws(WireNameError) {
        try WireName.validate(name)
        if deleted && !blocks.isEmpty { throw .inconsistent(name, "deleted, but has blocks") }
        if type == .directory && !blocks.isEmpty { throw .inconsistent(name, "a directory with blocks") }
        if type == .file && !deleted && !invalid && blocks.isEmpty {
            throw .inconsistent(name, "a file without blocks")
        }
        for block in blocks where block.size < 0 || block.offset < 0 || block.hash.count != 32 {
            throw .inconsistent(name, "block at offset \(block.offset) is malformed")
        }
    }

    /// The effective block size: syncthing's `BlockSize()` gives 128 KiB when the raw value is smaller.
    public var effectiveBlockSize: Int { Int(max(blockSize, 128 << 10)) }
}

extension WireName {
    /// The `/`-separated components of a name, split at every "/" byte. `String.split` splits
    /// at Characters, and a combining mark after a "/" makes the two one Character: that
    /// slash would be missed, where the file system sees it.
    public static func components(_ name: String, omittingEmpty: Bool = true) -> [Substring] {
        name.unicodeScalars.split(separator: "/", omittingEmptySubsequences: omittingEmpty).map { Substring($0) }
    }
}
