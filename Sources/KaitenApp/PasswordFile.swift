import Foundation

/// A password read from a file or stdin (`-`): never from the command line, where every user
/// of the machine can see it in the process list.
public enum PasswordFile {
    /// The file's content without one trailing newline (an editor's or echo's); an empty
    /// password, a missing file or one over 4 KiB is an error naming the file.
    public static func read(_ path: String) throws -> String {
        let data: Data
        if path == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            let expanded = (path as NSString).expandingTildeInPath
            guard let contents = FileManager.default.contents(atPath: expanded) else {
                throw DecryptError("\(expanded): cannot read the password file")
            }
            data = contents
        }
        let name = path == "-" ? "stdin" : path
        guard data.count <= 4096 else { throw DecryptError("\(name): \(data.count) bytes is not a password (at most 4096)") }
        guard var text = String(data: data, encoding: .utf8) else { throw DecryptError("\(name): the password is not UTF-8") }
        if text.hasSuffix("\r\n") {
            text.removeLast(1)
        } else if text.hasSuffix("\n") {
            text.removeLast()
        }
        guard !text.isEmpty else { throw DecryptError("\(name): the password is empty") }
        return text
    }
}
