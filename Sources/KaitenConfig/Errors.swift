import KaitenErrors
import KaitenFiles

/// A problem with a file Kaiten reads or writes in its home: config.xml, cert.pem, key.pem.
///
/// `description` is the one line a user sees: it names the file (and the line, where known),
/// says what is wrong and, where it helps, what to do.
public struct ConfigError: KaitenError, Equatable {
    /// What went wrong, for programs and tests; people read `description`.
    public enum Code: Equatable, Sendable {
        case malformedXML
        case unsupportedVersion
        case unknownFolderType
        case duplicateFolderID
        case duplicateDeviceID
        case invalidDeviceID
        case invalidValue
        /// A folder shared with a device meant to see it encrypted: Kaiten cannot encrypt yet.
        case untrustedDevice
        case unknownFolder
        case unknownDevice
        case missingFile
        case unreadable
        case malformedPEM
        case keyMismatch
        case alreadyExists
        case writeFailed
    }

    public let code: Code
    /// The file the problem is in.
    public let file: String
    /// The 1-based line in `file`, when known.
    public let line: Int?
    /// What is wrong, and what to do about it.
    public let message: String

    public init(_ code: Code, file: String, line: Int? = nil, _ message: String) {
        self.code = code
        self.file = file
        self.line = line
        self.message = message
    }

    public var location: String? { line.map { "\(file):\($0)" } ?? file }
}

extension ConfigError {
    /// Config's own files (config.xml, the identity, index IDs) written through ``AtomicFile``,
    /// their failure said as a config error.
    static func writing(_ write: () throws(FileWriteError) -> Void) throws(ConfigError) {
        do {
            try write()
        } catch {
            throw ConfigError(.writeFailed, file: error.file, error.message)
        }
    }
}
