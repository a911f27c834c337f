import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Testing

/// The files in examples/ are run where they can be: the systemd units pass
/// `systemd-analyze verify` without a warning, and every kaiten command line in them parses.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct ExamplesTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("examples").path

    static func files(_ directory: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).sorted().map { directory + "/" + $0 }
    }

    @Test func systemdUnitsVerify() throws {
        let analyze = "/usr/bin/systemd-analyze"
        guard FileManager.default.isExecutableFile(atPath: analyze) else {
            try Test.cancel("systemd-analyze verify needs \(analyze) (scripts/test installs systemd)")
        }
        let dir = try TemporaryDirectory(prefix: "kaiten-units")
        defer { dir.remove() }
        // verify wants the ExecStart binary to exist: the built one stands in for /usr/local/bin.
        var units: [String] = []
        for path in try Self.files(Self.examples + "/systemd") {
            let text = try String(contentsOfFile: path, encoding: .utf8)
                .replacingOccurrences(of: "/usr/local/bin/kaiten", with: KaitenCLI.executable)
            let copy = dir.file((path as NSString).lastPathComponent)
            try text.write(toFile: copy, atomically: true, encoding: .utf8)
            units.append(copy)
        }
        #expect(units.contains { $0.hasSuffix("kaiten-run.service") })
        let result = try ProcessRunner.run(analyze, ["verify"] + units)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.isEmpty, "no warning: \(result.stderr)")
    }

    /// Every `kaiten ...` command in the examples is accepted by the parser (exit 64 would be a
    /// usage error: an option renamed or gone).
    @Test func everyKaitenCommandLineParses() throws {
        var commands: [[String]] = []
        for path in try Self.files(Self.examples + "/systemd") + [Self.examples + "/cron.txt"] + Self.files(Self.examples + "/ci") {
            for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") where !line.hasPrefix("#") {
                var rest = Substring(line)
                while let range = rest.range(of: "kaiten ") {
                    // A command: at the start, after a path, a quote, `&&`, `|` or `=`; not prose
                    // (`name: kaiten selection`).
                    let before = rest[..<range.lowerBound].trimmingCharacters(in: .whitespaces)
                    rest = rest[range.upperBound...]
                    guard before.isEmpty || ["/", "'", "&&", "|", "="].contains(where: { before.hasSuffix($0) }) else { continue }
                    let words = rest.prefix { !">|&'\"".contains($0) }.split(separator: " ").map(String.init)
                    if let verb = words.first, verb.first?.isLetter == true { commands.append(words) }
                }
            }
        }
        #expect(commands.count >= 6, "\(commands)")
        let dir = try TemporaryDirectory(prefix: "kaiten-examples")
        defer { dir.remove() }
        for words in commands {
            let result = try KaitenCLI.run(words + ["--home", dir.file("no-home")])
            #expect(result.status != 64, "kaiten \(words.joined(separator: " ")): \(result.stderr)")
        }
    }
}
