/// The lines of a text file as editors write them.
///
/// In Swift `"\r\n"` is one `Character`, so splitting a CRLF file on `"\n"` finds no line break
/// at all: the whole file becomes one line. Every reader of a line-based file splits here.
public enum TextLines {
    /// The lines of `text`, split at LF and at CRLF, without their line breaks. A final line
    /// break ends the last line (it does not begin an empty one); a lone `\r` at the end of a
    /// line is dropped as well, as a CRLF file cut between its two bytes would leave it.
    public static func split(_ text: String) -> [Substring] {
        var lines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
        if lines.last?.isEmpty == true { lines.removeLast() }
        return lines.map { $0.last == "\r" ? $0.dropLast() : $0 }
    }

    /// The lines that are not empty.
    public static func nonEmpty(_ text: String) -> [Substring] {
        split(text).filter { !$0.isEmpty }
    }
}
