import KaitenProtocol

extension BEPFileInfo {
    /// Checks an entry a trusted device sends to this device as the untrusted one, where
    /// nothing can be decrypted: it must have the shape of syncthing's encrypted entries, so
    /// that plain data (a peer that takes this device for a trusted one) is never stored as if
    /// it were sealed. The name is an encrypted name as syncthing lays it out (first character
    /// and `.syncthing-enc`, two characters, then parts of 200, all base32hex); the sealed
    /// FileInfo is there; a file's blocks are sealed blocks (40 bytes over at least 1 KiB, a
    /// 48-byte sealed hash) back to back, adding up to its size.
    public func validateSealed() throws(WireNameError) {
        try WireName.validate(name)
        guard (try? EncryptedPath.deslashify(name)).map({ EncryptedPath.slashify($0) == name && Self.isBase32Hex($0) }) == true else {
            throw .inconsistent(name, "not an encrypted name: plain data where ciphertext belongs")
        }
        if encrypted.isEmpty { throw .inconsistent(name, "carries no encrypted FileInfo: plain data where ciphertext belongs") }
        if deleted && !blocks.isEmpty { throw .inconsistent(name, "deleted, but has blocks") }
        if type == .directory && !blocks.isEmpty { throw .inconsistent(name, "a directory with blocks") }
        guard type == .file || type == .directory else { throw .inconsistent(name, "neither a file nor a directory, as sealed entries are") }
        if type == .file && !deleted && !invalid && blocks.isEmpty { throw .inconsistent(name, "a file without blocks") }
        var end: Int64 = 0
        for block in blocks {
            guard block.offset == end, Int(block.size) >= EncryptedBlock.minimumPadded + EncryptedBlock.overhead,
                Int(block.size) <= (16 << 20) + EncryptedBlock.overhead, block.hash.count == 48
            else { throw .inconsistent(name, "block at offset \(block.offset) is not a sealed block") }
            end += Int64(block.size)
        }
        if !blocks.isEmpty && end != size { throw .inconsistent(name, "its sealed blocks add up to \(end) bytes, not its size \(size)") }
    }

    static func isBase32Hex(_ text: String) -> Bool {
        text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x41...0x56).contains($0) }
    }
}
