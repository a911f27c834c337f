/// A search of a folder's global index by name, type, size and date.
public struct SearchQuery: Sendable, Equatable {
    /// A glob (`*`, `?`, `[…]`, `{a,b}`, as in selection patterns) matched against the whole
    /// name when it has no `/`, against the whole path when it has one; any other text is
    /// looked for anywhere in the path, ignoring case. Empty: every entry.
    public var text = ""
    /// `file`, `directory` or `symlink`; nil: any.
    public var type: String?
    public var minSize: Int64?
    public var maxSize: Int64?
    /// Modified at or after / before these times (seconds since 1970).
    public var modifiedAfter: Int64?
    public var modifiedBefore: Int64?
    /// How many entries the result lists (the total counts them all).
    public var limit = 200

    public init() {}

    public static let types = ["file", "directory", "symlink"]
    public static let maximumLimit = 5_000
}
