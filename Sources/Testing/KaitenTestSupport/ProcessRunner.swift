import Foundation

/// What a finished program printed and how it exited.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

extension Process {
    /// Starts the process with no signal blocked.
    ///
    /// A child inherits the signal mask of the thread that starts it, and Swift's concurrency
    /// and Dispatch threads block nearly every signal: `terminate()` (SIGTERM) then did nothing
    /// to a program that does not unblock it (`sleep`, and any tool using the default action),
    /// and a test's stop waited out its timeout. The mask is cleared on this thread only for
    /// the start.
    public func runAlone() throws {
        var everything = sigset_t()
        var kept = sigset_t()
        sigemptyset(&everything)
        pthread_sigmask(SIG_SETMASK, &everything, &kept)
        defer { pthread_sigmask(SIG_SETMASK, &kept, nil) }
        try run()
    }

    /// Waits until the process ends, at most `timeout` seconds: then it is killed (SIGKILL) and
    /// the wait throws, so a hung child fails its test instead of hanging the suite.
    ///
    /// Bounded even when Foundation misses the child's end: a `kaiten` that trapped was once left
    /// a zombie that `Process` never reaped, and an unbounded `waitUntilExit()` hung the whole
    /// run. The kernel is asked directly (`waitid` with `WNOWAIT`, which leaves the reaping to
    /// Foundation); an end Foundation does not see within a few seconds is thrown, with how the
    /// process ended.
    public func waitForExit(timeout: TimeInterval, what: String) throws {
        let deadline = Date().addingTimeInterval(timeout)
        var ended: String?
        while isRunning, Date() < deadline {
            if let how = endSeenByKernel() {
                ended = how
                break
            }
            usleep(10_000)
        }
        if isRunning, ended == nil {
            kill(processIdentifier, SIGKILL)
            try awaitReaping(what: what, ended: "killed")
            throw HarnessError("\(what) did not end within \(Int(timeout)) s and was killed")
        }
        try awaitReaping(what: what, ended: ended ?? "ended")
    }

    /// Waits until Foundation has seen the end the kernel reports, up to a minute: it reaps on
    /// a queue of its own, which every suite starting at once on two cores keeps waiting for
    /// seconds; a child never reaped (seen once: `<defunct>` for good) fails the test instead
    /// of hanging it.
    private func awaitReaping(what: String, ended: String) throws {
        let deadline = Date().addingTimeInterval(60)
        while isRunning, Date() < deadline { usleep(10_000) }
        guard !isRunning else {
            throw HarnessError("\(what) \(endSeenByKernel() ?? ended), but Foundation did not reap it (left a zombie)")
        }
        waitUntilExit()
    }

    /// How the process ended, if it has (a zombie not yet reaped); nil while it runs.
    private func endSeenByKernel() -> String? {
        var info = siginfo_t()
        guard waitid(P_PID, id_t(processIdentifier), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else { return nil }
        let pid = info._sifields._sigchld.si_pid
        guard pid == processIdentifier else { return nil }
        let status = info._sifields._sigchld.si_status
        switch info.si_code {
        case Int32(CLD_EXITED): return "exited with status \(status)"
        default: return "ended on signal \(status) (\(String(cString: strsignal(status))))"
        }
    }
}

/// Runs a program to completion, capturing its output.
public enum ProcessRunner {
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        currentDirectory: String? = nil, stdin: String? = nil, timeout: TimeInterval = 900
    ) throws -> ProcessResult {
        let outFile = try TemporaryDirectory(prefix: "kaiten-proc")
        defer { outFile.remove() }
        func create(_ name: String) throws -> Int32 {
            let fd = open(outFile.file(name), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw HarnessError("cannot create \(outFile.file(name)): \(String(cString: strerror(errno)))") }
            return fd
        }
        let out = try create("out")
        defer { close(out) }
        let err = try create("err")
        defer { close(err) }
        var input: [Int32] = [-1, -1]
        if stdin != nil {
            // A socket, not a pipe: written with MSG_NOSIGNAL, a child that exits without reading
            // its input cannot end the test run with SIGPIPE.
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &input) == 0 else {
                throw HarnessError("socketpair: \(String(cString: strerror(errno)))")
            }
            shutdown(input[0], Int32(SHUT_WR))
        } else {
            input[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)
        }
        let child: OwnedChild
        do {
            defer { close(input[0]) }
            child = try OwnedChild(
                executable: executable, arguments: arguments, environment: environment,
                currentDirectory: currentDirectory, stdin: input[0], stdout: out, stderr: err)
        } catch {
            if input[1] >= 0 { close(input[1]) }
            throw error
        }
        if let stdin {
            var bytes = Array(stdin.utf8)[...]
            while !bytes.isEmpty {
                let sent = bytes.withUnsafeBytes { send(input[1], $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if sent < 0, errno == EINTR { continue }
                guard sent > 0 else { break }
                bytes = bytes.dropFirst(sent)
            }
            close(input[1])
        }
        let status = try child.wait(
            timeout: timeout, what: (executable as NSString).lastPathComponent + " " + arguments.prefix(2).joined(separator: " "))
        // Decoded with replacement characters, never dropped: a negative `contains` check on
        // output that failed to decode must not pass on an empty string.
        func text(_ name: String) throws -> String {
            String(decoding: try Data(contentsOf: URL(fileURLWithPath: outFile.file(name))), as: UTF8.self)
        }
        return ProcessResult(status: status, stdout: try text("out"), stderr: try text("err"))
    }

    /// Finds a program on $PATH.
    public static func which(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}

/// Runs the built `kaiten` binary, as a user would.
public enum KaitenCLI {
    /// The `kaiten` executable next to the running test bundle (SwiftPM builds it there).
    public static var executable: String {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let self_ = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        for candidate in [directory, self_.deletingLastPathComponent()] {
            var d = candidate
            for _ in 0..<4 {
                let path = d.appendingPathComponent("kaiten").path
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue {
                    return path
                }
                d = d.deletingLastPathComponent()
            }
        }
        directory = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        return directory.appendingPathComponent(".build/debug/kaiten").path
    }

    /// Starts a long-running `kaiten ARGS…` (serve, run) with its stderr appended to `logPath`;
    /// the caller stops it. `environment` is added to this process's.
    public static func start(_ arguments: [String], logPath: String, environment: [String: String] = [:]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new } }
        if !FileManager.default.fileExists(atPath: logPath) { FileManager.default.createFile(atPath: logPath, contents: nil) }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        try log.seekToEnd()
        process.standardError = log
        process.standardOutput = FileHandle.nullDevice
        try process.runAlone()
        return process
    }

    /// `run` on a thread of its own, so that waiting for the process never holds one of Swift's
    /// few cooperative threads: a test whose peer lives in the test process (a scripted peer
    /// answering on tasks) must leave them free, or two such tests waiting at once starve the
    /// peers they wait for.
    public static func runDetached(_ arguments: [String], environment: [String: String] = [:]) async throws -> ProcessResult {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Result { try run(arguments, environment: environment) })
            }
            thread.start()
        }
    }

    /// A home made by a test answers the REST API on a port of its own (tests run side by
    /// side; 127.0.0.1:8384 is one port), unless the test names the address itself.
    static func withTestGUIAddress(_ arguments: [String]) -> [String] {
        guard arguments.first == "init", !arguments.contains(where: { $0.hasPrefix("--gui-address") }), !arguments.contains("--help") else {
            return arguments
        }
        return arguments + ["--gui-address", "127.0.0.1:0"]
    }

    /// Runs `kaiten ARGS…` with a clean environment (no KAITEN_HOME leaking in from the user).
    public static func run(_ arguments: [String], environment: [String: String] = [:], stdin: String? = nil) throws
        -> ProcessResult
    {
        var env = ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "HOME": NSTemporaryDirectory()]
        env.merge(environment) { _, new in new }
        return try ProcessRunner.run(executable, withTestGUIAddress(arguments), environment: env, stdin: stdin)
    }
}
