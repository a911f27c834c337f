import Foundation
import KaitenApply
import KaitenConfig
import KaitenDiscovery
import KaitenPeer
import KaitenProtocol
import KaitenReconcile
import KaitenStream
import KaitenSync
import KaitenTransfer
import Logging
import Synchronization
import Glibc

/// A source `kaiten run --import` watches. It is looked at every ``interval`` seconds (a card
/// being mounted sends no event to a folder that did not exist): when its tree of files differs
/// from the last look — it appeared, a card was swapped, a download landed — `run` imports it.
public struct ImportWatch: Sendable {
    public static let interval = 10.0

    public let source: String
    public let folder: String
    /// Imports the source; a line for the log.
    public let run: @Sendable () async -> String
    /// Called at every look (offload): a line for the log when it did something.
    public let tick: (@Sendable () async -> String?)?

    public init(source: String, folder: String, run: @escaping @Sendable () async -> String, tick: (@Sendable () async -> String?)? = nil) {
        self.source = source
        self.folder = folder
        self.run = run
        self.tick = tick
    }

    /// What the source holds, cheaply: its visible files' count, total size and latest mtime.
    /// nil while it is missing or empty (a card not inserted).
    public struct Signature: Equatable, Sendable {
        var files = 0
        var bytes: Int64 = 0
        var latest: Int64 = 0

        public static func of(_ root: String) -> Signature? {
            guard let walker = FileManager.default.enumerator(atPath: root) else { return nil }
            var signature = Signature()
            while let relative = walker.nextObject() as? String {
                if (relative as NSString).lastPathComponent.hasPrefix(".") {
                    if (walker.fileAttributes?[.type] as? FileAttributeType) == .typeDirectory { walker.skipDescendants() }
                    continue
                }
                var info = stat()
                guard lstat((root as NSString).appendingPathComponent(relative), &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
                signature.files += 1
                signature.bytes += Int64(info.st_size)
                signature.latest = max(signature.latest, Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec))
            }
            return signature.files == 0 ? nil : signature
        }
    }
}
