import Crypto
import Foundation
import Synchronization
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// Answers peers' block requests from this device's files (issue 11, item 2).
///
/// Stricter than syncthing, which serves whatever bytes on disk match the requested hash: a
/// block is served only from a file this device's local index announces as a valid, current
/// file, only at one of its announced blocks, and only when the bytes read still have that
/// block's SHA-256 (a file changed since its scan gets NO_SUCH_FILE, never the old version's
/// place filled with new bytes). Nothing is read through a symlink or outside the folder. A
/// folder held as the untrusted device is served at its announced blocks without that check:
/// its hashes are sealed ones, checked by the trusted device that decrypts the answer.
/// The disk work runs off the event loop; the connection bounds the bytes in flight.
public final class BlockServer: Sendable {
    /// The largest block syncthing makes (16 MiB); a larger request is refused.
    public static let maxBlockSize = 16 << 20
    /// The least an untrusted device asks for: syncthing pads shorter blocks to this before sealing.
    static let minimumSealedBlock = 1024

    private let me: DeviceID
    private let home: Home
    /// The folders as config.xml says, replaced by ``reconfigure(_:)`` (a reload).
    private let configured: Mutex<[String: FolderConfiguration]>
    private let logs = LogCache()
    private let allocator = FrameMemory.allocator

    public init(home: KaitenHome) {
        me = home.identity.deviceID
        self.home = home.home
        configured = Mutex(Dictionary(home.config.folders.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a }))
    }

    /// Serves as `home`'s configuration says from now on (who shares which folder, and where).
    public func reconfigure(_ home: KaitenHome) {
        configured.withLock { $0 = Dictionary(home.config.folders.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a }) }
    }

    /// Why a request is not served, as the wire says it.
    enum Refusal: Error, Equatable {
        /// INVALID_FILE: not something this device offers (not announced, reserved, not a block).
        case invalid(String)
        /// GENERIC: the folder is unknown here, not shared with the requester, or paused.
        case generic(String)
        /// NO_SUCH_FILE: gone, not a regular file, behind a symlink, or changed since announced.
        case noSuchFile(String)

        var code: BEPErrorCode {
            switch self {
            case .invalid: return .invalidFile
            case .generic: return .generic
            case .noSuchFile: return .noSuchFile
            }
        }
    }

    /// The answer to `request` from `peer`: the frame carrying its data, or an error code.
    /// Reads the disk: call it off the event loop (a connection runs it on a worker thread).
    /// `sealed`: the request came through the connection's encryption, which seals the answer;
    /// only then is a device the folder is shared with encrypted (an untrusted one) answered,
    /// and a block shorter than the padded minimum is found by its offset alone.
    public func answer(_ request: BEPRequest, from peer: DeviceID, sealed: Bool) -> BEPReply {
        switch read(request, from: peer, sealed: sealed) {
        case .success(let frame):
            return .frame(frame)
        case .failure(let refusal):
            var response = BEPResponse()
            response.id = request.id
            response.code = refusal.code
            return .response(response)
        }
    }

    /// The frame of one announced block's bytes, or why not.
    func read(_ request: BEPRequest, from peer: DeviceID, sealed: Bool = false) -> Result<ResponseFrame, Refusal> {
        let name = request.name
        guard request.offset >= 0, request.size > 0, Int(request.size) <= Self.maxBlockSize else {
            return .failure(.invalid("offset \(request.offset), size \(request.size): not a block"))
        }
        guard let folder = configured.withLock({ $0[request.folder] }), !folder.isPaused,
            sealed ? folder.encryptedDevices[peer] != nil : folder.devices.contains(peer)
        else {
            return .failure(.generic("folder \"\(request.folder)\" is not shared with \(peer.shortDescription)"))
        }
        guard (try? SafePath.validate(name)) != nil else { return .failure(.invalid("\(name): not a name this device offers")) }
        let block: BEPBlockInfo
        // An untrusted device asks for at least a padded block's worth: the block is shorter.
        let padded = sealed && Int(request.size) == Self.minimumSealedBlock
        switch announcedBlock(folder: folder.id, name: name, offset: request.offset, size: request.size, padded: padded) {
        case .success(let found): block = found
        case .failure(let refusal): return .failure(refusal)
        }
        guard (try? SafePath.prepareParentsExisting(root: folder.path, name: name)) != nil else {
            return .failure(.noSuchFile("\(name): a parent is not a real directory"))
        }
        let fd = open(folder.path + "/" + name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return .failure(.noSuchFile("\(name): cannot open: \(String(cString: strerror(errno)))")) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return .failure(.noSuchFile("\(name): not a regular file")) }
        // Read straight into the frame that goes to the peer, on this thread, and hash it there.
        let count = Int(block.size)
        let frame = ResponseFrame.make(answering: request, count: count, allocator: allocator) { raw in
            pread(fd, raw.baseAddress, count, off_t(request.offset)) == count
        }
        guard let frame else { return .failure(.noSuchFile("\(name): shorter than announced")) }
        if folder.type == .receiveencrypted {
            // Held as the untrusted device: the announced hash is a sealed one, which only the
            // requester can check against what it decrypts (as syncthing serves such a folder).
            guard request.hash.isEmpty || request.hash == block.hash else {
                return .failure(.noSuchFile("\(name): another version than the one announced"))
            }
            return .success(frame)
        }
        let hash = frame.withData(count: count) { Data(SHA256.hash(data: $0)) }
        guard hash == block.hash, request.hash.isEmpty || request.hash == hash else {
            return .failure(.noSuchFile("\(name): changed on disk since it was announced"))
        }
        return .success(frame)
    }

    /// The announced block at `offset` of a valid file in this device's local index.
    private func announcedBlock(folder: String, name: String, offset: Int64, size: Int32, padded: Bool) -> Result<BEPBlockInfo, Refusal> {
        let path = home.localIndexPath(folderID: folder)
        let me = self.me
        do {
            let found = try logs.with(path: path, folder: folder) { log, blocksOf throws -> BEPBlockInfo? in
                guard let entry = log.index.entry(name, from: me), entry.type == .file, !entry.isDeleted, !entry.isInvalid else {
                    return nil
                }
                guard let block = try blocksOf(entry)[offset], block.size == size || (padded && block.size < size) else { return nil }
                return block
            }
            guard let found else { return .failure(.invalid("\(name): no such announced block (offset \(offset), size \(size))")) }
            return .success(found)
        } catch {
            return .failure(.generic("cannot read the local index: \(error)"))
        }
    }
}

/// Read-only local index logs, reopened when the file grew (the announcer appended), and the
/// block lists of the files being served, by offset: a peer pulling a 256 MiB file asks for its
/// 2,048 blocks one by one, and decoding the whole list from the log for each would cost more
/// than reading and hashing the block itself.
private final class LogCache: @unchecked Sendable {
    private let lock = NSLock()
    private var open: [String: (log: IndexLog, size: Int64)] = [:]
    /// Per log path: block lists by the record that holds them (a few files at a time).
    private var lists: [String: [Int64: [Int64: BEPBlockInfo]]] = [:]

    func with<T>(path: String, folder: String, _ body: (IndexLog, (FileEntry) throws -> [Int64: BEPBlockInfo]) throws -> T) throws -> T {
        try lock.withLock {
            var info = stat()
            let size = stat(path, &info) == 0 ? Int64(info.st_size) : 0
            if open[path] == nil || open[path]!.size != size {
                open[path]?.log.close()
                open[path] = (try IndexLog.open(path: path, folderID: folder, readOnly: true), size)
                lists[path] = [:]
            }
            let log = open[path]!.log
            return try body(log) { entry in
                if let list = self.lists[path]?[entry.recordOffset] { return list }
                var list: [Int64: BEPBlockInfo] = [:]
                for block in try log.blocks(of: entry) { list[block.offset] = block }
                if (self.lists[path]?.count ?? 0) >= 16 { self.lists[path] = [:] }
                self.lists[path, default: [:]][entry.recordOffset] = list
                return list
            }
        }
    }
}
