import KaitenErrors

/// Why a folder could not be scanned.
public struct ScanError: KaitenError, Equatable {
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

    public var location: String? { path }
    public var message: String { hint }
}
