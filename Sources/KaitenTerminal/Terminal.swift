import Foundation
import KaitenApp

/// Where a verb's words go on a terminal: results on stdout, remarks and errors on stderr (so
/// stdout stays clean for scripts).
public enum Terminal {
    public static let diagnostics = Diagnostics(error: { error($0) }, warning: { warning($0) }, note: { note($0) })

    public static func error(_ message: String) {
        FileHandle.standardError.write(Data("kaiten: \(message)\n".utf8))
    }

    public static func warning(_ message: String) {
        FileHandle.standardError.write(Data("kaiten: warning: \(message)\n".utf8))
    }

    /// A human remark on stderr.
    public static func note(_ message: String) {
        FileHandle.standardError.write(Data("\(message)\n".utf8))
    }

    /// Lines of a result on stdout.
    public static func print(_ lines: [String]) {
        for line in lines { Swift.print(line) }
    }

    /// A verb's `--json` document: sorted keys, so that a diff of two runs shows what changed.
    public static func json<T: Encodable>(_ value: T) throws {
        FileHandle.standardOutput.write(try JSONDocument.encode(value))
    }

    /// Rows as aligned columns, the last column unpadded.
    public static func table(_ header: [String], _ rows: [[String]]) -> [String] {
        let all = [header] + rows
        var widths = [Int](repeating: 0, count: header.count)
        for row in all {
            for (i, cell) in row.enumerated() where i < widths.count { widths[i] = max(widths[i], cell.count) }
        }
        return all.map { row in
            var line = ""
            for (i, cell) in row.enumerated() {
                line += i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count + 2)
            }
            return line
        }
    }

    /// A size as people read it (3.1 MiB).
    public static func human(_ bytes: Int64) -> String { TextFacts.human(bytes) }

    /// A path as a shell takes it back: bare when it is plain, else single-quoted.
    public static func shellQuoted(_ path: String) -> String {
        path.allSatisfy { $0.isLetter || $0.isNumber || "/._-".contains($0) } ? path : "'" + path.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// A peer as lines show it: its name, else the first group of its ID.
    public static func peer(_ id: String, name: String?) -> String { DeviceID.label(id, name: name) }

    /// A peer with both: `nas (MFZWI3D)`, or `(MFZWI3D)` without a name.
    public static func peerWithID(_ id: String, name: String) -> String {
        (name.isEmpty ? "" : name + " ") + "(" + String(id.prefix(7)) + ")"
    }
}

extension String {
    /// Right-aligned in `width` columns.
    public func leftPad(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }

    /// Left-aligned in at least `width` columns.
    func padded(_ width: Int) -> String {
        padding(toLength: max(width, count), withPad: " ", startingAt: 0)
    }
}
