import Crypto
import Foundation
import KaitenPeer
import KaitenProtocol
import KaitenScan
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where a block comes from: a local file that already holds it (the scan cache is a block
/// index), else the peers holding the global version, spread over them. Every block is
/// SHA-256-verified whichever way it came; bad data is dropped and the block tried elsewhere.
/// Beside a running service, which holds the peers' connections, blocks come through it
/// (`relay`) and are verified here again.
public final class BlockSource: Sendable {
    /// Fetches one block of `file` of a folder through the process that holds the peers'
    /// connections (the `kaiten run` control socket).
    public typealias Relay = @Sendable (_ folder: String, _ file: BEPFileInfo, _ block: BEPBlockInfo) async throws -> Data

    let folderID: String
    let root: String
    let connections: [DeviceID: PeerConnection]
    let relay: Relay?
    /// Each block hash once, with one local file and offset that hold it.
    let local: [ContentHash: (path: String, offset: Int64, size: Int32)]
    private let turn = Mutex(0)
    /// Blocks copied from local files, fetched and verified, rejected (the data's SHA-256 was
    /// wrong), refused by the peer (an error code), and lost to a connection that went away.
    private let counters = Mutex(Statistics())

    public struct Statistics: Sendable {
        public var copied = 0
        public var fetched = 0
        public var rejected = 0
        public var refused = 0
        public var lost = 0
    }

    /// False for a folder held as ciphertext: a block's hash is a sealed one only the trusted
    /// devices can check (they do); its size is still checked.
    let verifiesContent: Bool

    public init(
        folderID: String, root: String, connections: [DeviceID: PeerConnection], tree: LocalTree, relay: Relay? = nil,
        verifiesContent: Bool = true
    ) {
        self.verifiesContent = verifiesContent
        self.folderID = folderID
        self.root = root
        self.connections = connections
        self.relay = relay
        var index: [ContentHash: (String, Int64, Int32)] = [:]
        for file in tree.files where file.kind == .file {
            var offset: Int64 = 0
            for block in file.blocks {
                if block.size > 0 && index[block.hash] == nil { index[block.hash] = (file.path, offset, block.size) }
                offset += Int64(block.size)
            }
        }
        local = index
    }

    public var statistics: Statistics { counters.withLock { $0 } }

    /// Blocks found already verified in a leftover temp file count as copied locally.
    func countResumed(_ count: Int) {
        counters.withLock { $0.copied += count }
    }

    /// The verified bytes of one block of `file`.
    public func block(_ block: BEPBlockInfo, of file: BEPFileInfo, holders: [DeviceID]) async throws(ApplyError) -> Data {
        if block.size == 0 { return Data() }
        if verifiesContent, let hash = ContentHash(data: block.hash), let source = local[hash], source.size == block.size,
            let data = readLocal(source.path, offset: source.offset, size: Int(block.size)),
            ContentHash(SHA256.hash(data: data)) == hash
        {
            counters.withLock { $0.copied += 1 }
            return data
        }
        if let relay { return try await relayed(block, of: file, through: relay) }
        let candidates = holders.filter { connections[$0] != nil }
        guard !candidates.isEmpty else {
            throw ApplyError(.noPeer, path: file.name, "no connected peer holds the global version")
        }
        let start = turn.withLock { value -> Int in
            defer { value &+= 1 }
            return value
        }
        var problems: [String] = []
        for i in 0..<candidates.count {
            let peer = candidates[(start + i) % candidates.count]
            do {
                let data = try await connections[peer]!.fetchBlock(folder: folderID, file: file, block: block)
                counters.withLock { $0.fetched += 1 }
                return data
            } catch {
                // Only a failed hash check is a rejected block; a refusal or a lost connection is
                // counted apart, so a figure of rejected blocks means bad data and nothing else.
                switch (error as? PeerError)?.code {
                case .hashMismatch: counters.withLock { $0.rejected += 1 }
                case .requestFailed: counters.withLock { $0.refused += 1 }
                default: counters.withLock { $0.lost += 1 }
                }
                problems.append("\((error as? PeerError)?.description ?? "\(error)")")
            }
        }
        throw ApplyError(.peerFailed, path: file.name, "no peer delivered the block at offset \(block.offset): " + problems.joined(separator: "; "))
    }

    /// A block through the service, checked here as if it came from a peer: the service is
    /// trusted with the connections, not with the bytes.
    private func relayed(_ block: BEPBlockInfo, of file: BEPFileInfo, through relay: Relay) async throws(ApplyError) -> Data {
        let data: Data
        do {
            data = try await relay(folderID, file, block)
        } catch let error as ApplyError {
            counters.withLock { $0.refused += 1 }
            throw error
        } catch {
            counters.withLock { $0.lost += 1 }
            throw ApplyError(.peerFailed, path: file.name, "the running service did not deliver the block at offset \(block.offset): \(error)")
        }
        guard data.count == Int(block.size), !verifiesContent || Data(SHA256.hash(data: data)) == block.hash else {
            counters.withLock { $0.rejected += 1 }
            throw ApplyError(.peerFailed, path: file.name, "the block at offset \(block.offset) from the running service fails its SHA-256 check")
        }
        counters.withLock { $0.fetched += 1 }
        return data
    }

    private func readLocal(_ path: String, offset: Int64, size: Int) -> Data? {
        let fd = open(root + "/" + path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var data = Data(count: size)
        let n = data.withUnsafeMutableBytes { pread(fd, $0.baseAddress, size, off_t(offset)) }
        return n == size ? data : nil
    }
}
