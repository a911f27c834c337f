import Crypto
import Foundation
import KaitenIndex
import KaitenProtocol
import KaitenScan
import KaitenSelection

@testable import KaitenReconcile

/// A folder described in a few lines: what peers announce, what is on disk, what is selected.
struct Fixture {
    static let peerA = try! DeviceID("AIR6LPZ-7K4PTTV-UXQSMUU-CPQ5YWH-OEDFIIQ-JUG777G-2YQXXR5-YD6AWQR")
    static let peerB = try! DeviceID("MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYY-LTMRWAD")

    var global = GlobalIndex()
    var local = LocalTree()
    var selection = ""
    var stignore: String? = nil
    var requirePeers = 1
    var checkpoints: [(device: DeviceID, indexID: UInt64, sequence: Int64)] = [(peerA, 1, 10)]
    /// Peers reached just now; nil for an offline plan.
    var connected: Set<DeviceID>? = nil
    var ignorePermissions = false
    /// A folder that sends (sendreceive, or sendonly with `receives` false); this device's
    /// short ID is `me`, its own announcements `announced`.
    var sends = false
    var receives = true
    static let me: UInt64 = 2
    var announced: [String: FileEntry] = [:]
    /// Plan only these paths (a service's scoped round).
    var scope: Set<String>? = nil

    /// A content hash standing for a file's bytes.
    static func content(_ text: String) -> ContentHash { ContentHash(SHA256.hash(data: Array(text.utf8))) }

    static func version(_ value: UInt64, device: UInt64 = 1) -> BEPVector {
        var counter = BEPCounter()
        counter.id = device
        counter.value = value
        var vector = BEPVector()
        vector.counters = [counter]
        return vector
    }

    /// A peer announces a file with content `text` at version `version`.
    mutating func announce(
        _ path: String, _ text: String = "x", version: UInt64 = 1, by device: DeviceID = peerA, type: BEPFileInfoType = .file,
        deleted: Bool = false, invalid: Bool = false, size: Int64 = 100, permissions: UInt32? = nil
    ) {
        var file = BEPFileInfo()
        file.name = path
        file.permissions = permissions ?? (type == .directory ? 0o755 : 0o644)
        file.type = type
        file.size = type == .file && !deleted ? size : 0
        file.deleted = deleted
        file.invalid = invalid
        file.version = Self.version(version)
        file.modifiedS = 1_700_000_000
        file.blockSize = 131072
        if type == .file && !deleted { file.blocksHash = Data(Self.content(text).bytes) }
        global.announce(file, by: device)
    }

    /// A local file with content `text`; `synced` is the version Kaiten last synced and the
    /// content it had then.
    mutating func onDisk(
        _ path: String, _ text: String = "x", synced: (version: UInt64, text: String)? = nil, kind: LocalFile.Kind = .file,
        permissions: UInt32? = nil
    ) {
        var file = LocalFile(
            path: path, kind: kind, size: kind == .file ? 100 : 0, modifiedNs: 1, inode: 1,
            permissions: permissions ?? (kind == .directory ? 0o755 : 0o644))
        if kind == .file { file.contentHash = Self.content(text) }
        if let synced { file.synced = SyncedVersion(version: Self.version(synced.version), contentHash: Self.content(synced.text)) }
        local[path] = file
    }

    func plan() throws -> FolderPlan {
        let selectionFile = try SelectionFile.parse(selection, file: "sel.txt")
        var input = FolderInput(
            id: "f", path: "/data/f", selection: selectionFile, selectionBytes: Array(selection.utf8), stignore: stignore,
            global: global, checkpoints: checkpoints, local: local, requirePeers: requirePeers)
        input.connectedPeers = connected
        input.ignorePermissions = ignorePermissions
        input.sends = sends
        input.receives = receives
        input.me = Self.me
        input.announced = announced
        input.scope = scope
        return Reconciler.planFolder(input).0
    }

    func baseline() throws -> Plan.FolderBaseline {
        let input = FolderInput(
            id: "f", path: "/data/f", selection: try SelectionFile.parse(selection, file: "sel.txt"),
            selectionBytes: Array(selection.utf8), stignore: stignore, global: global, checkpoints: checkpoints, local: local,
            requirePeers: requirePeers)
        return Reconciler.planFolder(input).1
    }
}

extension FolderPlan {
    /// Actions as "kind path" strings, in order.
    var lines: [String] { actions.map { "\($0.action.rawValue) \($0.path)" } }
    var conflictLines: [String] { conflicts.map { "\($0.kind.rawValue) \($0.path)" } }
}
