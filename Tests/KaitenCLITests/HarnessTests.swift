import Foundation
import KaitenTestSupport
import KaitenTestThreads
import Synchronization
import Testing

/// The harness itself: a test that fails must fail because of Kaiten, never because the harness
/// lost track of a child.
@Suite(.ownThread, .timeLimit(.minutes(5)))
struct HarnessTests {
    /// Short commands run while long-lived children start on other threads, as interop suites
    /// do side by side: every short one is reaped when it ends, none is held alive by a socket a
    /// long-lived child inherited; stopped, the long-lived ones are reaped as promptly.
    @Test func shortChildrenStartedBesideLongOnesAreReaped() throws {
        let sleep = try #require(ProcessRunner.which("sleep"))
        let truePath = try #require(ProcessRunner.which("true"))
        let longLived = Mutex<[Process]>([])
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { lane in
            for round in 0..<15 {
                do {
                    if (lane + round) % 3 == 0 {
                        let process = Process()
                        process.executableURL = URL(fileURLWithPath: sleep)
                        process.arguments = ["120"]
                        try process.runAlone()
                        longLived.withLock { $0.append(process) }
                    } else {
                        let result = try ProcessRunner.run(truePath, [], timeout: 20)
                        if result.status != 0 { failures.withLock { $0.append("true exited \(result.status)") } }
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
        }
        // Stopped, each must be reaped at once: none may be kept "running" by a socket of its
        // own that another child inherited.
        let children = longLived.withLock { $0 }
        for process in children { process.terminate() }
        for process in children {
            let asked = Date()
            while process.isRunning, Date().timeIntervalSince(asked) < 10 { usleep(10_000) }
            if process.isRunning {
                failures.withLock { $0.append("sleep \(process.processIdentifier) ended on SIGTERM but was not reaped within 10 s") }
                kill(process.processIdentifier, SIGKILL)
            }
        }
        #expect(failures.withLock { $0 } == [])
    }
}

extension HarnessTests {
    /// A `Process` that closes the descriptors it inherited and lives on, as a browser does,
    /// stops Foundation from reaping any other child until it exits (measured: a `true` started
    /// as a `Process` beside it was reaped after 19.5 s, when the other ended). The commands a
    /// test runs are reaped by the harness, whatever such a child does.
    @Test func aCommandIsReapedWhileAChildThatClosedItsDescriptorsLives() throws {
        let perl = try #require(ProcessRunner.which("perl"))
        let truePath = try #require(ProcessRunner.which("true"))
        let closer = Process()
        closer.executableURL = URL(fileURLWithPath: perl)
        closer.arguments = ["-e", "use POSIX; POSIX::close($_) for 3..1023; sleep 60"]
        try closer.runAlone()
        defer {
            closer.terminate()
            try? closer.waitForExit(timeout: 70, what: "perl")
        }
        usleep(300_000)
        let began = Date()
        for _ in 0..<5 {
            #expect(try ProcessRunner.run(truePath, [], timeout: 20).status == 0)
        }
        #expect(Date().timeIntervalSince(began) < 5)
    }
}
