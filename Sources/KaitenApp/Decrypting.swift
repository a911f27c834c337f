import Foundation
import KaitenEncryption
import KaitenFiles
import KaitenProtocol
import KaitenScan
import KaitenTransfer

/// What `kaiten decrypt` asks for: a folder as an untrusted device stores it (by Kaiten or by
/// syncthing), its password, and where the plain files go (nowhere with `verifyOnly`).
public struct DecryptRequest: Sendable {
    public var source: String
    public var password: String
    /// nil: only verify.
    public var destination: String?
    /// nil: read from the folder's token file, as syncthing decrypt does.
    public var folderID: String?
    /// Replace a file of the destination whose content differs (one with the same content is
    /// left as it is either way).
    public var overwrite = false

    public init(source: String, password: String, destination: String?) {
        self.source = source
        self.password = password
        self.destination = destination
    }
}

/// One stored file's outcome.
public struct DecryptOutcome: Sendable {
    public enum Status: String, Sendable {
        /// Decrypted, verified and written.
        case written
        /// Decrypted and verified (verify only).
        case verified
        /// The destination already had exactly this content.
        case unchanged
        case failed
    }

    /// The encrypted path, relative to the source.
    public let stored: String
    /// The plain name, once known.
    public let name: String?
    public let size: Int64
    public let status: Status
    public let error: String?
}

public struct DecryptRun: Sendable {
    public let folderID: String
    public let outcomes: [DecryptOutcome]
    public var failed: Int { outcomes.count { $0.status == .failed } }
}

/// A decrypt that cannot start: the request's folder, password or destination.
public struct DecryptError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension App {
    /// Decrypts (or verifies) every file an untrusted device stores in `request.source`: each
    /// name and FileInfo opened with the folder's key, each block's tag checked, then its plain
    /// SHA-256 against the plain FileInfo. A file is written to a temporary name, flushed and
    /// renamed into place only once all its blocks verified: a failure leaves nothing under the
    /// file's name. A wrong password is found from the folder's token before any file is read.
    public func decrypt(_ request: DecryptRequest, done: (DecryptOutcome) -> Void = { _ in }) throws -> DecryptRun {
        let source = (request.source as NSString).expandingTildeInPath
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw DecryptError("\(source): no such directory")
        }
        let stored: StoredPasswordToken?
        do {
            stored = try StoredPasswordToken.read(folderPath: source)
        } catch {
            throw DecryptError("\(error)")
        }
        guard let folderID = request.folderID ?? stored?.folderID else {
            throw DecryptError(
                "\(source)/\(StoredPasswordToken.relativePath): no folder token, so the folder ID is unknown; give it with --folder-id")
        }
        let key: FolderKey
        do {
            key = try FolderKey(folderID: folderID, password: request.password)
        } catch {
            throw DecryptError("folder \"\(folderID)\": \(error)")
        }
        if let stored, stored.folderID == folderID, stored.token != key.passwordToken {
            throw DecryptError(
                "folder \"\(folderID)\": wrong password (it does not match the token in \(source)/\(StoredPasswordToken.relativePath)); nothing was written")
        }
        var destination: String?
        if let requested = request.destination {
            let path = ((requested as NSString).expandingTildeInPath as NSString).standardizingPath
            let real = (source as NSString).resolvingSymlinksInPath
            if path == real || path.hasPrefix(real + "/") || path == source || path.hasPrefix(source + "/") {
                throw DecryptError("\(path) is inside the encrypted folder \(source); decrypt to another directory")
            }
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            } catch {
                throw DecryptError("\(path): cannot create the destination: \(error.localizedDescription)")
            }
            destination = path
        }
        var outcomes: [DecryptOutcome] = []
        for relative in Self.storedFiles(under: source) {
            let outcome = Self.decryptOne(relative, source: source, key: key, destination: destination, overwrite: request.overwrite)
            outcomes.append(outcome)
            done(outcome)
        }
        if !outcomes.isEmpty, outcomes.allSatisfy({ $0.status == .failed && $0.name == nil }), stored == nil {
            throw DecryptError(
                "folder \"\(folderID)\": no stored name decrypts with this password and folder ID (\(outcomes.count) tried); wrong password or folder ID?")
        }
        return DecryptRun(folderID: folderID, outcomes: outcomes)
    }

    /// Regular files below `root`, in name order, without syncthing's own (the marker
    /// directory, .stignore, versions, temporary files).
    static func storedFiles(under root: String) -> [String] {
        var found: [String] = []
        var pending = [""]
        while let directory = pending.popLast() {
            let full = directory.isEmpty ? root : root + "/" + directory
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: full) else { continue }
            for name in names {
                if directory.isEmpty && FolderScanner.internalRootNames.contains(name) { continue }
                if FolderScanner.isTemporary(name) { continue }
                let relative = directory.isEmpty ? name : directory + "/" + name
                var info = stat()
                guard lstat(root + "/" + relative, &info) == 0 else { continue }
                switch info.st_mode & S_IFMT {
                case S_IFDIR: pending.append(relative)
                case S_IFREG: found.append(relative)
                default: continue
                }
            }
        }
        return found.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    private static func decryptOne(_ relative: String, source: String, key: FolderKey, destination: String?, overwrite: Bool) -> DecryptOutcome {
        var name: String?
        var size: Int64 = 0
        func failed(_ why: String) -> DecryptOutcome {
            DecryptOutcome(stored: relative, name: name, size: size, status: .failed, error: why)
        }
        let fd = Glibc.open(source + "/" + relative, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return failed("cannot be opened: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return failed("cannot be read: \(String(cString: strerror(errno)))") }
        let plain: BEPFileInfo
        do {
            let outer = try EncryptedTrailer.read(fd: fd, size: Int64(info.st_size))
            // The trailer's encrypted name is where the file must be: a trailer moved to another
            // path (a swap by the untrusted device) is refused.
            guard outer.name == relative else {
                return failed("its trailer names \"\(outer.name)\": stored under another file's name")
            }
            plain = try EncryptedFileInfo.decrypt(outer, folderKey: key)
            name = plain.name
            size = plain.size
            guard plain.type == .file, !plain.deleted else { return failed("it holds a \(plain.deleted ? "deleted entry" : "non-file entry")") }
            let fileKey = key.fileKey(for: plain.name)
            let writer = try destination.map { root throws(DecryptError) in try PlainFileWriter(root: root, name: plain.name) }
            do {
                for (index, (sealed, block)) in zip(outer.blocks, plain.blocks).enumerated() {
                    let bytes = try EncryptedTrailer.readExactly(fd: fd, count: Int(sealed.size), at: sealed.offset)
                    let opened: [UInt8]
                    do {
                        opened = try EncryptedBlock.openVerified(bytes, fileKey: fileKey, block: block)
                    } catch {
                        throw DecryptError("block \(index) at \(sealed.offset): \(error)")
                    }
                    try writer?.write(opened, at: block.offset)
                }
                guard let writer else { return DecryptOutcome(stored: relative, name: name, size: size, status: .verified, error: nil) }
                let status = try writer.finish(plain, overwrite: overwrite)
                return DecryptOutcome(stored: relative, name: name, size: size, status: status, error: nil)
            } catch {
                writer?.abandon()
                throw error
            }
        } catch {
            return failed("\(error)")
        }
    }
}

/// One plain file being written: a temporary file beside its place, renamed over it once whole.
private final class PlainFileWriter {
    let root: String
    let name: String
    let full: String
    let temporary: String
    let fd: Int32
    /// Once closed, never closed again (the number may be another file's by then).
    private var isOpen = true

    init(root: String, name: String) throws(DecryptError) {
        self.root = root
        self.name = name
        do {
            try SafePath.validate(name)
            try SafePath.prepareParents(root: root, name: name)
        } catch {
            throw DecryptError("\(error)")
        }
        full = root + "/" + name
        temporary = root + "/" + SafePath.temporaryName(for: name)
        fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw DecryptError("\(temporary): cannot be created: \(String(cString: strerror(errno)))") }
    }

    func write(_ bytes: [UInt8], at offset: Int64) throws(DecryptError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw DecryptError("\(temporary): write failed: \(String(cString: strerror(errno)))") }
            done += n
        }
    }

    /// Puts the file in place (its mode and time from the plain FileInfo) unless an existing
    /// file has other content and `overwrite` is off.
    func finish(_ plain: BEPFileInfo, overwrite: Bool) throws(DecryptError) -> DecryptOutcome.Status {
        fchmod(fd, plain.noPermissions ? 0o644 : mode_t(plain.permissions & 0o7777))
        var times = [
            timespec(tv_sec: Int(plain.modifiedS), tv_nsec: Int(plain.modifiedNs)),
            timespec(tv_sec: Int(plain.modifiedS), tv_nsec: Int(plain.modifiedNs)),
        ]
        futimens(fd, &times)
        guard fsync(fd) == 0 else {
            let why = String(cString: strerror(errno))
            abandon()
            throw DecryptError("\(temporary): fsync failed: \(why)")
        }
        closeOnce()
        var info = stat()
        if lstat(full, &info) == 0 {
            if (info.st_mode & S_IFMT) == S_IFREG, Self.holds(full, plain) {
                unlink(temporary)
                return .unchanged
            }
            guard overwrite, (info.st_mode & S_IFMT) == S_IFREG else {
                unlink(temporary)
                throw DecryptError("\(full) exists with other content; --overwrite replaces it")
            }
        }
        guard rename(temporary, full) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temporary)
            throw DecryptError("\(full): rename failed: \(why)")
        }
        let flushed = AtomicFile.syncDirectory((full as NSString).deletingLastPathComponent)
        guard flushed == 0 else { throw DecryptError("\(full): written, but its directory could not be flushed: \(String(cString: strerror(flushed)))") }
        return .written
    }

    func abandon() {
        closeOnce()
        unlink(temporary)
    }

    private func closeOnce() {
        if isOpen { close(fd) }
        isOpen = false
    }

    /// Whether the file at `path` has exactly the plain FileInfo's blocks.
    static func holds(_ path: String, _ plain: BEPFileInfo) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, Int64(info.st_size) == plain.size else { return false }
        for block in plain.blocks {
            guard let bytes = try? EncryptedTrailer.readExactly(fd: fd, count: Int(block.size), at: block.offset),
                EncryptedBlock.hashMatches(bytes, block)
            else { return false }
        }
        return true
    }
}
