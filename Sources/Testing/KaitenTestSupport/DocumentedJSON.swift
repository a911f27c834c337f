import Foundation
import Testing

/// Docs/json.md read as tables: what each verb's `--json` document may and must hold. A verb's
/// output is held against it, so that the page and the program cannot drift apart.
public enum DocumentedJSON {
    /// Docs/json.md of this checkout.
    public static let page = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Docs/json.md").path

    /// Each table's keys (key → always printed), by where the object sits: `kaiten VERB`, then
    /// `[]` for an array's elements and `.key` into an object.
    public static func tables() throws -> [String: [String: Bool]] {
        var result: [String: [String: Bool]] = [:]
        var current: String?
        for line in try String(contentsOfFile: page, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("### `"), let end = line.dropFirst(5).firstIndex(of: "`") {
                let path = String(line.dropFirst(5)[..<end])
                current = path
                result[path] = [:]
            } else if let path = current, line.hasPrefix("| `") {
                let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count >= 2 else { continue }
                result[path]![cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))] = !cells[1].contains("optional")
            } else if line.hasPrefix("## ") {
                current = nil
            }
        }
        return result
    }

    /// Records an issue for every key printed that the page does not list, every key it marks
    /// always-present that is missing, and every object it has no table for; returns the tables used.
    @discardableResult
    public static func check(_ value: Any, at path: String, tables: [String: [String: Bool]]) -> Set<String> {
        var seen: Set<String> = []
        check(value, at: path, tables: tables, seen: &seen)
        return seen
    }

    /// Parses `stdout` (one document) and checks it.
    @discardableResult
    public static func check(stdout: String, at path: String) throws -> Set<String> {
        let value = try JSONSerialization.jsonObject(with: Data(stdout.utf8))
        return check(value, at: path, tables: try tables())
    }

    static func check(_ value: Any, at path: String, tables: [String: [String: Bool]], seen: inout Set<String>) {
        if let array = value as? [Any] {
            for element in array { check(element, at: path + "[]", tables: tables, seen: &seen) }
            return
        }
        guard let object = value as? [String: Any] else { return }
        guard let keys = tables[path] else {
            Issue.record("Docs/json.md has no table for \(path) (keys \(object.keys.sorted()))")
            return
        }
        seen.insert(path)
        for key in object.keys.sorted() where keys[key] == nil {
            Issue.record("\(path).\(key) is printed but not in Docs/json.md")
        }
        for (key, always) in keys.sorted(by: { $0.key < $1.key }) where always && object[key] == nil {
            Issue.record("\(path).\(key) is documented as always printed but was not")
        }
        for (key, child) in object where child is [Any] || child is [String: Any] {
            check(child, at: path + "." + key, tables: tables, seen: &seen)
        }
    }
}
