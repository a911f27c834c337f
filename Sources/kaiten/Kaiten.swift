import ArgumentParser
import Foundation
import KaitenApp
import KaitenFiles
import KaitenTerminal
import Logging

/// The `kaiten` command: selective sync and on-demand access for Syncthing.
@main
struct Kaiten: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kaiten",
        abstract: "Selective sync and on-demand access for Syncthing, as a headless Syncthing device.",
        discussion: """
            Kaiten is a Syncthing device: it reads a Syncthing-compatible config.xml and identity \
            (cert.pem, key.pem) from its home and talks to real Syncthing peers itself.

            Getting started:
              kaiten init --name laptop
              kaiten peer add PEER-DEVICE-ID --name nas --address tcp://nas.local:22000
              kaiten folder add photos --path ~/Photos --share PEER-DEVICE-ID
              kaiten index sync photos && kaiten ls photos
              kaiten select photos 2025/summer
              kaiten plan photos

            The home is --home DIR, else $KAITEN_HOME, else ${XDG_CONFIG_HOME:-~/.config}/kaiten.

            Exit codes: 0 success, 1 error (nothing changed), 2 changes pending (plan \
            --detailed-exitcode), 3 stale saved plan, 4 refused by a safety brake, 5 partially \
            applied, 64 usage error.
            """,
        version: "0.1.0",
        subcommands: [
            Init.self, ID.self, Peer.self, Folder.self, Index.self, Select.self, Deselect.self, Adopt.self,
            PlanCommand.self, Show.self, ApplyCommand.self, Conflicts.self, Resolve.self, Cat.self, Get.self, Serve.self, URLCommand.self, Thumb.self, Import.self, OffloadCommand.self, View.self, Ls.self, Status.self, Run.self, UI.self, Mount.self, Pin.self, Unpin.self, Free.self, Decrypt.self,
        ]
    )
}

extension Kaiten {
    /// `kaiten --home DIR id` works as `kaiten id --home DIR` does: git and terraform take their
    /// directory options before the verb, and users type them both ways.
    static func main() async {
        HeapTuning.keepBlockBuffers()
        await main(movingGlobalOptions(Array(CommandLine.arguments.dropFirst())))
    }

    /// The global options written before the verb, moved after it (before a `--`, if any).
    static func movingGlobalOptions(_ arguments: [String]) -> [String] {
        var leading: [String] = []
        var rest = arguments[...]
        while let first = rest.first {
            if first == "--home", rest.count >= 2 {
                leading += rest.prefix(2)
                rest = rest.dropFirst(2)
            } else if first.hasPrefix("--home=") || first == "--verbose" || first == "-v" {
                leading.append(first)
                rest = rest.dropFirst()
            } else {
                break
            }
        }
        guard !leading.isEmpty, !rest.isEmpty else { return arguments }
        var moved = Array(rest)
        let end = moved.firstIndex(of: "--") ?? moved.endIndex
        moved.insert(contentsOf: leading, at: end)
        return moved
    }
}

/// Options every verb takes.
struct GlobalOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Kaiten's home directory (config.xml, cert.pem, key.pem, state).",
            discussion: "When omitted: $KAITEN_HOME, else ${XDG_CONFIG_HOME:-~/.config}/kaiten.",
            valueName: "dir"))
    var home: String?

    @Flag(name: .shortAndLong, help: "Log connection details to stderr.")
    var verbose = false

    /// A logger writing to stderr: warnings only, or everything with --verbose.
    var logger: Logger {
        LogSetup.bootstrapOnce()
        var logger = Logger(label: "kaiten")
        logger.logLevel = verbose ? .debug : .warning
        return logger
    }

    /// The use-case layer for this invocation: its home, its logger, remarks on stderr.
    var app: App {
        App(homeArgument: home, environment: ProcessInfo.processInfo.environment, logger: logger, diagnostics: Terminal.diagnostics)
    }
}

/// Runs a command body, turning library errors into one line on stderr and exit code 1.
///
/// Libraries never print or exit; this is the one place their errors meet the user.
func reportingErrors(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as ExitCode {
        throw error
    } catch let error as CleanExit {
        throw error
    } catch let error as ValidationError {
        throw error
    } catch let ended as VerbEnded {
        if let message = ended.message { Terminal.error(message) }
        throw ExitCode(ended.status.code)
    } catch {
        Terminal.error("\(error)")
        throw ExitCode(ExitStatus(for: error).code)
    }
}

extension LogSetup {
    private static let bootstrapped: Void = {
        LoggingSystem.bootstrap { label in StreamLogHandler.standardError(label: label) }
    }()

    /// Sends every log line to stderr, so stdout stays clean for results.
    static func bootstrapOnce() { _ = bootstrapped }
}

/// Namespace for logging setup.
enum LogSetup {}
