import Foundation
import KaitenConfig
import KaitenProtocol

/// A Kaiten identity for a test, in its own temporary home.
public struct KaitenDevice: Sendable {
    public let home: Home
    public let identity: Identity

    public init(in directory: String, name: String = "kaiten") throws {
        home = Home(path: (directory as NSString).appendingPathComponent(name))
        _ = try KaitenHome.initialize(home, name: name, listenAddress: "tcp://127.0.0.1:0", guiAddress: "127.0.0.1:0")
        identity = try Identity.load(certificatePath: home.certificatePath, keyPath: home.keyPath)
    }

    public var deviceID: DeviceID { identity.deviceID }
}

/// Deterministic test files.
public enum TestFiles {
    /// Writes `size` random bytes (from /dev/urandom) to `path`.
    public static func random(_ path: String, size: Int) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: path, contents: nil)
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        let source = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        var left = size
        while left > 0 {
            let chunk = source.readData(ofLength: min(left, 4 << 20))
            out.write(chunk)
            left -= chunk.count
        }
        try out.close()
        try source.close()
    }

    public static func write(_ path: String, _ text: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try text.write(toFile: path, atomically: false, encoding: .utf8)
    }
}
