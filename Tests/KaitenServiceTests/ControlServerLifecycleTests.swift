import Foundation
import KaitenConfig
import KaitenStream
import KaitenTestSupport
import KaitenTestThreads
import KaitenTransfer
import Logging
import Synchronization
import Testing

@testable import KaitenService

#if canImport(Glibc)
import Glibc
#endif

/// The control socket's life inside a service's configuration: a reload closes it at any point
/// of its start, and the next configuration opens it again. A close that does not return
/// stalls the service's reload for good (nothing is logged, the old configuration stays).
///
/// The server's tasks run on the shared pool, which the other suites keep busy when all run at
/// once: the waits here are generous deadlines for "never", not measures of speed.
@Suite(.timeLimit(.minutes(5)), .ownThread)
final class ControlServerLifecycleTests {
    let directory: TemporaryDirectory
    let home: KaitenHome
    let files: RemoteFiles

    init() throws {
        directory = try TemporaryDirectory()
        let path = Home(path: directory.file("home"))
        _ = try KaitenHome.initialize(path, name: "k", listenAddress: "tcp://127.0.0.1:0")
        home = try KaitenHome.open(path)
        files = RemoteFiles(home: home, logger: Logger(label: "test"))
    }

    deinit { directory.remove() }

    func start() async throws -> LocalEndpoints {
        try await LocalEndpoints.start(
            home: home, files: files, peerAddresses: [], folders: [], role: "run", stop: StopSignal(), http: nil,
            controlLog: { _ in }, controlFailed: { Issue.record("control socket failed: \($0)") })
    }

    /// Waits for `endpoints.close()` up to `limit`; false when it has not returned by then.
    func closes(_ endpoints: LocalEndpoints, within limit: Duration) async -> Bool {
        let done = Flag()
        Task {
            await endpoints.close()
            done.set()
        }
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if done.isSet { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }

    @Test func aCloseRightAfterTheStartEndsTheSocketItHadNotBoundYet() async throws {
        for round in 0..<20 {
            let endpoints = try await start()
            let closed = await closes(endpoints, within: .seconds(60))
            #expect(closed, "round \(round): the control socket's close never returned")
            guard closed else { return }
            #expect(!FileManager.default.fileExists(atPath: ControlSocket.path(home.home)), "round \(round): the socket file is left")
        }
    }

    @Test func theNextConfigurationAnswersAfterTheLastOneClosed() async throws {
        for round in 0..<5 {
            let endpoints = try await start()
            let answered = await answers(within: .seconds(60))
            #expect(answered, "round \(round): nobody answers on the control socket")
            let closed = await closes(endpoints, within: .seconds(60))
            #expect(closed, "round \(round): the control socket's close never returned")
            guard closed else { return }
            #expect(ControlClient.answering(home.home) == nil, "round \(round): still answering after close")
        }
    }

    @Test func aClientThatSaysNothingDoesNotHoldTheCloseBeyondItsGrace() async throws {
        let endpoints = try await start()
        #expect(await answers(within: .seconds(60)))
        // Connected is not yet accepted: the client counts once the server serves it (and the
        // connection that asked whether the server answers is over first).
        try await waitFor(clients: 0, on: endpoints)
        let silent = try #require(ControlClient.connect(ControlSocket.path(home.home)))
        defer { silent.close() }
        try await waitFor(clients: 1, on: endpoints)
        try #require(endpoints.control.clientCount == 1)
        let started = ContinuousClock.now
        #expect(await closes(endpoints, within: .seconds(60)), "a silent client held the close past its 5 s grace")
        #expect(ContinuousClock.now - started >= .seconds(4), "the silent client was not given its grace")
    }

    /// An answer larger than the socket's buffer, to a client that starts reading only after
    /// a while, arrives whole: the server closes only once the client hung up. (It closed right
    /// after the last write, dropping what NIO still held: "the service closed the connection
    /// mid-answer" after an apply of 5,000 files beside `kaiten run`.)
    @Test func aSlowReaderGetsAnAnswerLargerThanTheSocketsBuffer() async throws {
        let endpoints = try await start()
        defer { Task { await endpoints.close() } }
        #expect(await answers(within: .seconds(60)))
        let connection = try #require(ControlClient.connect(ControlSocket.path(home.home)))
        defer { connection.close() }
        var request = ControlRequest(verb: .plan)
        // Folders this service does not keep: the refusal names every one, about 4 MiB.
        let names = (0..<40_000).map { "folder-\($0)-" + String(repeating: "x", count: 90) }
        request.folders = names
        try connection.send(request)
        try await Task.sleep(for: .seconds(1))
        let reply = try connection.reply()
        #expect(reply.message?.contains(names.last!) == true, "the refusal does not name the last folder")
    }

    /// A client learns from the hello what the service takes (a service started from an older
    /// executable says nothing, and is asked only the first version's requests); a fresh apply
    /// is refused for a folder the service does not keep, and an apply with neither a plan nor
    /// `fresh` is a malformed request.
    @Test func theHelloSaysWhatTheServiceTakesAndAFreshApplyIsCheckedLikeAnother() async throws {
        let endpoints = try await start()
        defer { Task { await endpoints.close() } }
        #expect(await answers(within: .seconds(60)))
        let client = try #require(ControlClient.answering(home.home))
        #expect(client.appliesFresh)
        #expect(client.accepts == Set(ControlFeature.allCases))

        let outside = try #require(ControlClient.connect(ControlSocket.path(home.home)))
        defer { outside.close() }
        var fresh = ControlRequest(verb: .apply)
        fresh.fresh = true
        fresh.folders = ["elsewhere"]
        fresh.maxDelete = "50%"
        try outside.send(fresh)
        let refused = try outside.reply()
        #expect(refused.type == .failure && refused.code == 1 && refused.message?.contains("not elsewhere") == true, "\(refused)")

        let malformed = try #require(ControlClient.connect(ControlSocket.path(home.home)))
        defer { malformed.close() }
        var empty = ControlRequest(verb: .apply)
        empty.maxDelete = "50%"
        try malformed.send(empty)
        let answer = try malformed.reply()
        #expect(answer.type == .failure && answer.code == 64, "\(answer)")
    }

    func waitFor(clients: Int, on endpoints: LocalEndpoints) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while endpoints.control.clientCount != clients, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
    }

    func answers(within limit: Duration) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if ControlClient.answering(home.home) != nil { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }
}

/// Set once, read from anywhere.
final class Flag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
