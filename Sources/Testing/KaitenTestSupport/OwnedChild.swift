import Foundation
import Synchronization

/// A short-lived child the harness starts and reaps itself, with `posix_spawn` and `waitpid`.
///
/// Foundation's `Process` learns that a child ended from one thread that waits on every child's
/// socket in turn: a child that closes that socket without exiting (a browser closes every
/// descriptor it inherits) or a grandchild that keeps it open holds up the reaping of all the
/// others. A `kaiten peer add` that had exited was then reported a zombie, failing tests that
/// had nothing wrong. The commands a test runs to completion, and the browsers (which close what
/// they inherit), depend on nothing but their own `waitpid` here.
public final class OwnedChild: Sendable {
    public let pid: pid_t
    /// What `waitpid` reported once the child was reaped.
    private let reaped = Mutex<Int32?>(nil)

    /// Starts `executable` with no signal blocked or ignored, in a process group of its own (a
    /// ^C to the test run is the harness's to handle), and no descriptor but 0, 1 and 2.
    public init(
        executable: String, arguments: [String], environment: [String: String]?, currentDirectory: String?,
        stdin: Int32, stdout: Int32, stderr: Int32
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (from, to) in [(stdin, STDIN_FILENO), (stdout, STDOUT_FILENO), (stderr, STDERR_FILENO)] {
            try Self.check(posix_spawn_file_actions_adddup2(&actions, from, to), "adddup2")
        }
        try Self.check(Self.closeFrom(&actions, 3), "addclosefrom_np")
        if let currentDirectory {
            try Self.check(Self.changeDirectory(&actions, currentDirectory), "addchdir_np")
        }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        try Self.check(posix_spawnattr_setsigmask(&attributes, &none), "setsigmask")
        try Self.check(posix_spawnattr_setsigdefault(&attributes, &all), "setsigdefault")
        try Self.check(posix_spawnattr_setpgroup(&attributes, 0), "setpgroup")
        let flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP
        try Self.check(posix_spawnattr_setflags(&attributes, Int16(flags)), "setflags")

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let environ = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer { environ?.forEach { free($0) } }
        var pid = pid_t()
        let spawned: Int32 = if let environ {
            posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        } else {
            posix_spawn(&pid, executable, &actions, &attributes, argv, Foundation.environ)
        }
        guard spawned == 0 else {
            throw HarnessError("cannot start \(executable): \(String(cString: strerror(spawned)))")
        }
        self.pid = pid
    }

    /// A long-lived child with no input and its output (both streams) appended to `logPath`,
    /// or discarded.
    public convenience init(
        executable: String, arguments: [String], environment: [String: String]? = nil, logPath: String?
    ) throws {
        let input = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(input) }
        let output = open(logPath ?? "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard input >= 0, output >= 0 else { throw HarnessError("cannot open \(logPath ?? "/dev/null"): \(String(cString: strerror(errno)))") }
        defer { close(output) }
        try self.init(
            executable: executable, arguments: arguments, environment: environment, currentDirectory: nil,
            stdin: input, stdout: output, stderr: output)
    }

    /// Whether the child has not ended yet (one that has is reaped on the spot).
    public var isRunning: Bool { reap(blocking: false) == nil }

    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits until the child ends, at most `timeout` seconds: then it is killed and the wait
    /// throws. Returns what `Process.terminationStatus` would: the exit status, or the signal.
    @discardableResult
    public func wait(timeout: TimeInterval, what: String) throws -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        var pause: useconds_t = 500
        while true {
            if let status = reap(blocking: false) { return Self.termination(status) }
            if Date() >= deadline {
                kill(pid, SIGKILL)
                _ = reap(blocking: true)
                throw HarnessError("\(what) did not end within \(Int(timeout)) s and was killed")
            }
            usleep(pause)
            pause = min(pause * 2, 10_000)
        }
    }

    /// The child's wait status once it has ended; nil while it runs.
    private func reap(blocking: Bool) -> Int32? {
        reaped.withLock { known in
            if let known { return known }
            var status: Int32 = 0
            while true {
                let result = waitpid(pid, &status, blocking ? 0 : WNOHANG)
                if result == pid {
                    known = status
                    return status
                }
                if result < 0, errno == EINTR { continue }
                // ECHILD cannot happen to a child only this object waits for: say so loudly.
                precondition(result == 0, "waitpid(\(pid)): \(String(cString: strerror(errno)))")
                return nil
            }
        }
    }

    private static func termination(_ status: Int32) -> Int32 {
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : signal
    }

    // glibc's GNU extensions (2.29, 2.34), which Swift's Glibc module does not declare.
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias ChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    private static let closeFrom = unsafeBitCast(symbol("posix_spawn_file_actions_addclosefrom_np"), to: CloseFrom.self)
    private static let changeDirectory = unsafeBitCast(symbol("posix_spawn_file_actions_addchdir_np"), to: ChangeDirectory.self)

    private static func symbol(_ name: String) -> UnsafeMutableRawPointer {
        guard let address = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else {
            fatalError("glibc has no \(name): the harness needs glibc 2.34 or later")
        }
        return address
    }

    private static func check(_ result: Int32, _ step: String) throws {
        guard result == 0 else { throw HarnessError("posix_spawn \(step): \(String(cString: strerror(result)))") }
    }
}
