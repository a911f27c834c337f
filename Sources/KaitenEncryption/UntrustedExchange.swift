import Crypto
import Foundation
import KaitenProtocol

/// What a trusted device does with one folder it shares with an untrusted device, message by
/// message (syncthing's encryptedModel and encryptedConnection): the index it sends is
/// encrypted, the index it receives is decrypted, a block the untrusted device asks for is
/// found by its plain name, offset and hash and answered sealed, and a block asked of the
/// untrusted device is asked by its encrypted coordinates and opened. Pure functions; the
/// session layer calls them.
public struct UntrustedExchange: Sendable {
    public let key: FolderKey

    public init(key: FolderKey) { self.key = key }

    // MARK: Index

    /// The FileInfos to send the untrusted device for these plain ones.
    public func outgoing(_ files: [BEPFileInfo]) throws(EncryptionError) -> [BEPFileInfo] {
        var sent: [BEPFileInfo] = []
        sent.reserveCapacity(files.count)
        for file in files { sent.append(try EncryptedFileInfo.encrypt(file, folderKey: key)) }
        return sent
    }

    /// The plain FileInfos behind what the untrusted device announced (its sequences kept).
    /// One that does not decrypt is an error naming its encrypted name: the whole message is
    /// refused, as syncthing refuses it.
    public func incoming(_ files: [BEPFileInfo]) throws(EncryptionError) -> [BEPFileInfo] {
        var plain: [BEPFileInfo] = []
        plain.reserveCapacity(files.count)
        for file in files {
            do {
                plain.append(try EncryptedFileInfo.decrypt(file, folderKey: key))
            } catch {
                throw .malformed("\"\(file.name)\": \(error)")
            }
        }
        return plain
    }

    // MARK: Requests from the untrusted device

    /// A block the untrusted device asked for, in plain terms.
    public struct PlainBlock: Sendable, Equatable {
        public let name: String
        public let offset: Int64
        public let size: Int
        public let hash: [UInt8]
    }

    /// Reads a request the untrusted device sent: the name opened with the folder key, the
    /// offset and size less the sealing overhead of the blocks before it and of this one, and
    /// the sealed block hash opened (with the plain offset, or without, as older syncthings
    /// sealed it). A request for less than a padded block, or without a hash, is refused.
    public func plainBlock(for request: BEPRequest) throws(EncryptionError) -> PlainBlock {
        let name = try key.decryptName(request.name)
        guard request.size >= Int32(EncryptedBlock.minimumPadded + EncryptedBlock.overhead), request.blockNo >= 0 else {
            throw .malformed("\"\(name)\": a request for \(request.size) bytes, shorter than any sealed block")
        }
        guard !request.hash.isEmpty else { throw .malformed("\"\(name)\": a request without the block's hash") }
        let offset = request.offset - Int64(request.blockNo) * Int64(EncryptedBlock.overhead)
        guard offset >= 0 else { throw .malformed("\"\(name)\": a request at \(request.offset) for block \(request.blockNo)") }
        let hash = try EncryptedFileInfo.openBlockHash(request.hash, fileKey: key.fileKey(for: name), plainOffset: offset)
        return PlainBlock(name: name, offset: offset, size: Int(request.size) - EncryptedBlock.overhead, hash: hash)
    }

    /// The answer to such a request: the plain bytes read (at most the plain size; a last
    /// block is shorter and padded), sealed with the file's key.
    public func seal(_ plain: some DataProtocol, for block: PlainBlock) throws(EncryptionError) -> [UInt8] {
        try EncryptedBlock.seal(plain, fileKey: key.fileKey(for: block.name))
    }

    // MARK: Requests to the untrusted device

    /// The request to send the untrusted device for a plain block (`number` its index in the
    /// file): the encrypted name, the offset and size it is stored at, the sealed hash.
    public func encryptedRequest(name: String, offset: Int64, size: Int, number: Int, hash: some DataProtocol) throws(EncryptionError) -> BEPRequest {
        let fileKey = key.fileKey(for: name)
        var request = BEPRequest()
        request.name = key.encryptName(name)
        request.offset = offset + Int64(number) * Int64(EncryptedBlock.overhead)
        request.size = Int32(EncryptedBlock.sealedSize(size))
        request.blockNo = Int32(number)
        request.hash = Data(try AESSIV.seal(Array(hash), key: fileKey, associatedData: [EncryptedFileInfo.bigEndian(offset), []]))
        return request
    }

    /// The plain block in the untrusted device's answer: its tag checked, cut to `size`, its
    /// SHA-256 checked against `hash`.
    public func openAnswer(_ sealed: some DataProtocol, name: String, offset: Int64, size: Int, hash: some DataProtocol) throws(EncryptionError) -> [UInt8] {
        var block = BEPBlockInfo()
        block.offset = offset
        block.size = Int32(size)
        block.hash = Data(hash)
        return try EncryptedBlock.openVerified(sealed, fileKey: key.fileKey(for: name), block: block)
    }
}
