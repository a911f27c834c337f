import Foundation
import KaitenEncryption
import KaitenProtocol
import Synchronization

/// The folders one connection exchanges encrypted, because the peer is an untrusted device for
/// them (syncthing's encryptedConnection): every index sent for such a folder goes out
/// encrypted, every index received is decrypted (an entry that does not decrypt ends the
/// connection), every block request of the peer is read in plain terms and answered sealed,
/// and every block asked of it is asked by its encrypted coordinates and opened and verified.
/// Everything above the connection works in plain terms.
///
/// Set from the configuration before the ClusterConfig goes out. A folder not listed passes as
/// plain text; the block server answers an untrusted device only through the sealing path
/// (``answer(_:exchange:respond:)``), so a connection that lacks an entry answers nothing.
public final class SealedFolders: Sendable {
    private let table = Mutex<[String: UntrustedExchange]>([:])
    /// The folders this device holds as the untrusted device (`receiveencrypted`), each with
    /// the password token it stores (nil until a trusted device gave it one).
    private let heldTable = Mutex<[String: [UInt8]?]>([:])

    public init() {}

    /// The folders this device holds ciphertext of for the peer, each with its stored token.
    public func setHeld(_ held: [String: [UInt8]?]) { heldTable.withLock { $0 = held } }

    public var held: [String: [UInt8]?] { heldTable.withLock { $0 } }

    /// Whether `folder` is one this device holds as ciphertext (entries, blocks and requests
    /// stay encrypted: nothing is decrypted or hashed as plain data).
    public func holdsCiphertext(_ folder: String) -> Bool { heldTable.withLock { $0[folder] != nil } }

    /// Notes the token stored for a folder held as ciphertext (the first trusted device's).
    public func stored(token: [UInt8], for folder: String) {
        heldTable.withLock { if $0[folder] != nil { $0[folder] = .some(token) } }
    }

    /// The folders (by ID) exchanged encrypted from now on, each with its key.
    public func set(_ exchanges: [String: UntrustedExchange]) { table.withLock { $0 = exchanges } }

    public func exchange(for folder: String) -> UntrustedExchange? { table.withLock { $0[folder] } }

    public var all: [String: UntrustedExchange] { table.withLock { $0 } }

    /// Answers the untrusted peer's request for a block of a folder it holds encrypted: its
    /// name, offset, size and hash opened, the plain block asked of `respond` (told the
    /// request is sealed), the bytes sealed with the file's key. A request that does not open
    /// is refused as an invalid file; nothing plain ever goes out.
    static func answer(
        _ request: BEPRequest, exchange: UntrustedExchange, respond: (BEPRequest, _ sealed: Bool) -> BEPReply
    ) -> BEPReply {
        func refused(_ code: BEPErrorCode) -> BEPReply {
            var response = BEPResponse()
            response.id = request.id
            response.code = code
            return .response(response)
        }
        guard let block = try? exchange.plainBlock(for: request), (try? WireName.validate(block.name)) != nil else {
            return refused(.invalidFile)
        }
        var plain = BEPRequest()
        plain.id = request.id
        plain.folder = request.folder
        plain.name = block.name
        plain.offset = block.offset
        plain.size = Int32(block.size)
        plain.hash = Data(block.hash)
        plain.blockNo = request.blockNo
        let bytes: [UInt8]
        switch respond(plain, true) {
        case .response(let response):
            guard response.code == .noError else { return refused(response.code) }
            bytes = Array(response.data)
        case .frame(let frame):
            bytes = frame.withData(count: frame.count) { Array($0) }
        }
        guard let sealed = try? exchange.seal(bytes, for: block) else { return refused(.generic) }
        var response = BEPResponse()
        response.id = request.id
        response.data = Data(sealed)
        return .response(response)
    }
}
