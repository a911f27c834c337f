import Foundation

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

    /// What the page and `value` disagree on: a key printed that the page does not list, a key
    /// it marks always printed that is missing, an object it has no table for (empty: they
    /// agree); and the tables used.
    public static func problems(_ value: Any, at path: String, tables: [String: [String: Bool]]) -> (problems: [String], seen: Set<String>) {
        var problems: [String] = []
        var seen: Set<String> = []
        check(value, at: path, tables: tables, problems: &problems, seen: &seen)
        return (problems, seen)
    }

    /// The problems of `stdout` (one document) against the page.
    public static func problems(stdout: String, at path: String) throws -> [String] {
        let value = try JSONSerialization.jsonObject(with: Data(stdout.utf8))
        return problems(value, at: path, tables: try tables()).problems
    }

    static func check(_ value: Any, at path: String, tables: [String: [String: Bool]], problems: inout [String], seen: inout Set<String>) {
        if let array = value as? [Any] {
            for element in array { check(element, at: path + "[]", tables: tables, problems: &problems, seen: &seen) }
            return
        }
        guard let object = value as? [String: Any] else { return }
        guard let keys = tables[path] else {
            problems.append("Docs/json.md has no table for \(path) (keys \(object.keys.sorted()))")
            return
        }
        seen.insert(path)
        for key in object.keys.sorted() where keys[key] == nil {
            problems.append("\(path).\(key) is printed but not in Docs/json.md")
        }
        for (key, always) in keys.sorted(by: { $0.key < $1.key }) where always && object[key] == nil {
            problems.append("\(path).\(key) is documented as always printed but was not")
        }
        for (key, child) in object where child is [Any] || child is [String: Any] {
            check(child, at: path + "." + key, tables: tables, problems: &problems, seen: &seen)
        }
    }
}
