/// Why a folder could not be scanned.
public struct ScanError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// `.stfolder` is missing: the folder may be an unmounted disk.
        case markerMissing
        case folderMissing
        case io
        case badCache
    }

    public let code: Code
    public let path: String
    public let hint: String

    public init(_ code: Code, path: String, _ hint: String) {
        self.code = code
        self.path = path
        self.hint = hint
    }

    public var description: String { "\(path): \(hint)" }
}
