import Foundation
import KaitenConfig
import KaitenFiles
import KaitenReconcile

/// Plan files on disk (`kaiten plan --out`, `kaiten apply FILE`): the plan as JSON, written
/// crash-safely and readable only by its owner; read back only at this kaiten's format.
public enum PlanFile {
    public static func write(_ plan: Plan, to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        var data = try encoder.encode(plan)
        data.append(0x0A)
        try AtomicFile.write([UInt8](data), to: (path as NSString).expandingTildeInPath, mode: 0o600)
    }

    public static func read(_ path: String) throws -> Plan {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigError(.invalidValue, file: path, "cannot read the plan file")
        }
        return try decode(data, from: path)
    }

    /// A plan document (a file's, or one sent to the REST API), checked as a plan file is;
    /// errors name `path`.
    public static func decode(_ data: Data, from path: String) throws -> Plan {
        struct Header: Decodable { let format_version: String }
        guard let header = try? JSONDecoder().decode(Header.self, from: data) else {
            throw ConfigError(.invalidValue, file: path, "not a Kaiten plan (no format_version)")
        }
        guard header.format_version.split(separator: ".").first == "1" else {
            throw ConfigError(
                .invalidValue, file: path, "plan format \(header.format_version) is newer than this kaiten understands (1.x)")
        }
        // A plan is made to be applied soon by the same kaiten: one from an older version may
        // lack what this one checks (causes, renames), so it is made again rather than guessed at.
        guard header.format_version == Plan.formatVersion else {
            throw ConfigError(
                .invalidValue, file: path,
                "plan format \(header.format_version) was written by another kaiten version (this one writes \(Plan.formatVersion)): make a new plan with `kaiten plan --out`")
        }
        do {
            return try JSONDecoder().decode(Plan.self, from: data)
        } catch {
            throw ConfigError(.invalidValue, file: path, "damaged plan: \(error)")
        }
    }
}
