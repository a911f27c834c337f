import Foundation

/// Kaiten's home directory and what lives in it.
///
/// ```
/// <home>/
///   config.xml              Syncthing-compatible configuration (version 36)
///   cert.pem, key.pem       this device's identity; the device ID is SHA-256 of the certificate
///   selections/<folder>.txt what the user wants locally, one file per folder
///   index/<folder>.log      the global index: what peers announced, an append-only log
///   index/<folder>.local    the local index: what this device announces, same format
///   scan/<folder>.cache     the local scan cache (size, mtime, inode, blocks per file)
///   state/                  Kaiten's own records: index IDs, last-synced versions, locks
///   thumbnails/             thumbnails by content, in Sushitrain's cache layout (`kaiten thumb`)
///   cache/blocks/           verified blocks read on demand (`kaiten mount`), by content hash
/// ```
///
/// The home is chosen as: `--home DIR`, else `$KAITEN_HOME`, else
/// `${XDG_CONFIG_HOME:-~/.config}/kaiten`.
public struct Home: Sendable, Equatable {
    /// The home directory itself.
    public let path: String

    public init(path: String) {
        self.path = Home.absolute(path)
    }

    /// Picks the home from an explicit flag, then the environment, then the XDG default.
    public static func resolve(explicit: String?, environment: [String: String]) -> Home {
        if let explicit, !explicit.isEmpty { return Home(path: explicit) }
        if let env = environment["KAITEN_HOME"], !env.isEmpty { return Home(path: env) }
        let configBase: String
        if let xdg = environment["XDG_CONFIG_HOME"], !xdg.isEmpty {
            configBase = xdg
        } else {
            let userHome = environment["HOME"] ?? NSHomeDirectory()
            configBase = (userHome as NSString).appendingPathComponent(".config")
        }
        return Home(path: (configBase as NSString).appendingPathComponent("kaiten"))
    }

    public var configPath: String { file("config.xml") }
    public var certificatePath: String { file("cert.pem") }
    public var keyPath: String { file("key.pem") }
    public var selectionsDirectory: String { file("selections") }
    public var indexDirectory: String { file("index") }
    public var scanDirectory: String { file("scan") }
    public var stateDirectory: String { file("state") }
    public var thumbnailsDirectory: String { file("thumbnails") }
    /// Blocks read on demand (the mount's cache), by content hash.
    public var blockCacheDirectory: String { file("cache/blocks") }
    /// The configuration a long-running service runs on (its last good config.xml), for the
    /// verbs that only read while an edit of config.xml does not load.
    public var runningConfigPath: String { (stateDirectory as NSString).appendingPathComponent("config.running.xml") }

    /// The selection file of one folder.
    public func selectionPath(folderID: String) -> String {
        (selectionsDirectory as NSString).appendingPathComponent("\(folderID).txt")
    }

    /// The index log of one folder. Folder IDs may hold characters unfit for a file name;
    /// those are percent-encoded.
    public func indexLogPath(folderID: String) -> String {
        (indexDirectory as NSString).appendingPathComponent("\(Home.fileSafe(folderID)).log")
    }

    /// What this device announces for one folder (its local index). Global logs end in `.log`,
    /// so no folder ID makes one name the other.
    public func localIndexPath(folderID: String) -> String {
        (indexDirectory as NSString).appendingPathComponent("\(Home.fileSafe(folderID)).local")
    }

    /// The scan cache (and synced record) of one folder.
    public func scanCachePath(folderID: String) -> String {
        (scanDirectory as NSString).appendingPathComponent("\(Home.fileSafe(folderID)).cache")
    }

    /// Where `kaiten plan` keeps the lineage stamped on every plan.
    public var lineagePath: String { (stateDirectory as NSString).appendingPathComponent("lineage") }

    /// A folder ID as a file name (percent-encoding what a file name cannot hold).
    public static func fileSafeName(_ name: String) -> String { fileSafe(name) }

    static func fileSafe(_ name: String) -> String {
        var out = ""
        for byte in name.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                out.append(Character(UnicodeScalar(byte)))
            case UInt8(ascii: ".") where !out.isEmpty:
                out.append(".")
            default:
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    static func absolute(_ path: String) -> String {
        var expanded = (path as NSString).expandingTildeInPath
        if !expanded.hasPrefix("/") {
            expanded = (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(expanded)
        }
        return (expanded as NSString).standardizingPath
    }
}
