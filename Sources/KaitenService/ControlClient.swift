import Foundation
import KaitenApply
import KaitenConfig
import KaitenProtocol
import KaitenReconcile
import KaitenTransfer

#if canImport(Glibc)
import Glibc
#endif

/// A verb's way into a running service (``ControlSocket``). Blocking and short: one
/// connection per request; blocks are fetched on a dispatch queue so that many can be in
/// flight without holding the cooperative pool.
public final class ControlClient: Sendable {
    let path: String
    /// The service's process, and what it is (`run` or `serve`).
    public let pid: Int32
    public let role: String
    /// What the service's control socket takes beyond the first version (its hello).
    let accepts: Set<ControlFeature>

    init(path: String, pid: Int32, role: String, accepts: Set<ControlFeature>) {
        self.path = path
        self.pid = pid
        self.role = role
        self.accepts = accepts
    }

    /// Whether the service plans and applies in one request (``applyFresh(folders:maxDelete:requirePeers:sendTimeout:stop:note:planned:events:)``);
    /// one started from an older executable does not.
    public var appliesFresh: Bool { accepts.contains(.freshApply) }

    /// The service answering on this home's control socket, or nil when none does (no socket,
    /// or one left by a process that died: nothing listens).
    ///
    /// A service that holds the home's lock but does not answer yet is starting (it opens its
    /// control socket once its peers and index are set up): it is waited for, up to
    /// `startup`, rather than taken for absent — a verb run just after `kaiten run` would
    /// otherwise refuse, or dial the peers beside it.
    public static func running(_ home: Home, startup: Duration = .seconds(20)) -> ControlClient? {
        let deadline = ContinuousClock.now + startup
        while true {
            if let client = answering(home) { return client }
            guard ServiceRecord.running(home) != nil, ContinuousClock.now < deadline else { return nil }
            usleep(100_000)
        }
    }

    /// This process's own control socket, for the service's use cases (its REST API): known
    /// without asking, since asking blocks a thread the answer needs (two cores, two threads).
    public static func itself(_ home: Home) -> ControlClient {
        ControlClient(path: ControlSocket.path(home), pid: getpid(), role: "run", accepts: Set(ControlFeature.allCases))
    }

    static func answering(_ home: Home) -> ControlClient? {
        let path = ControlSocket.path(home)
        guard let connection = connect(path) else { return nil }
        defer { connection.close() }
        guard (try? connection.send(ControlRequest(verb: .hello))) != nil, let reply = try? connection.reply(), reply.type == .hello else {
            return nil
        }
        return ControlClient(
            path: path, pid: reply.pid ?? 0, role: reply.role ?? "run", accepts: Set((reply.accepts ?? []).compactMap(ControlFeature.init(rawValue:))))
    }

    static func connect(_ path: String) -> Connection? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        let connected = (try? ControlSocket.withShortPath(path) { short -> Bool in
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(short.utf8)
            guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (i, b) in bytes.enumerated() { raw[i] = b }
                raw[bytes.count] = 0
            }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 }
            }
        }) ?? false
        guard connected else {
            Glibc.close(fd)
            return nil
        }
        return Connection(fd: fd, path: path)
    }

    private func open() throws(ControlFailure) -> Connection {
        guard let connection = Self.connect(path) else {
            throw ControlFailure(1, "the running kaiten \(role) (pid \(pid)) no longer answers on \(path)")
        }
        return connection
    }

    /// What ``plan(folders:requirePeers:)`` answers.
    public struct PlanAnswer: Sendable {
        public var plan: Plan
        public var warnings: [String]
        public var skipped: [(folder: String, reason: String)]
    }

    /// Runs a blocking exchange on a thread of its own, not on Swift's cooperative pool: inside
    /// the service (a use case asked through its REST API), the pool is also what answers the
    /// exchange, and pool threads waiting on it wait for ever (two cores, two threads).
    public static func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.name = "kaiten-control-client"
            thread.start()
        }
    }

    /// A one-time token that logs a browser in to the service's web page.
    public func uiLoginToken() throws(ControlFailure) -> String {
        let connection = try open()
        defer { connection.close() }
        try connection.send(ControlRequest(verb: .uiLogin))
        let reply = try connection.reply()
        if reply.type == .failure { throw ControlFailure(reply.code ?? 1, reply.message ?? "the service refused") }
        guard let token = reply.message, !token.isEmpty else { throw ControlFailure(1, "the service answered with no token") }
        return token
    }

    /// The plan the service would apply now, made on its live connections.
    /// - Parameter maxDelete: the limit the plan's brake warnings weigh deletions against.
    public func plan(folders: [String], requirePeers: Int, maxDelete: String = "50%") throws(ControlFailure) -> PlanAnswer {
        let connection = try open()
        defer { connection.close() }
        var request = ControlRequest(verb: .plan)
        request.folders = folders
        request.requirePeers = requirePeers
        request.maxDelete = maxDelete
        try connection.send(request)
        let reply = try connection.reply()
        if reply.type == .failure { throw ControlFailure(reply.code ?? 1, reply.message ?? "the service refused") }
        guard reply.type == .plan, let plan = reply.plan else { throw ControlFailure(1, "the service answered with no plan") }
        return PlanAnswer(plan: plan, warnings: reply.warnings ?? [], skipped: (reply.skipped ?? []).map { ($0.folder, $0.reason) })
    }

    /// Has the service apply `plan` (checked again there like a saved plan), handing its events
    /// to `events` as they come. `stop` raised (Ctrl-C) asks it to stop between blocks.
    public func apply(
        _ plan: Plan, saved: Bool, maxDelete: String, requirePeers: Int, sendTimeout: Double, stop: StopSignal,
        note: (String) -> Void, events: (ApplyEvent) -> Void
    ) throws(ControlFailure) -> ApplyReport {
        var request = Self.applyRequest(maxDelete: maxDelete, requirePeers: requirePeers, sendTimeout: sendTimeout)
        request.plan = plan
        request.saved = saved
        let report: ApplyReport?
        do {
            report = try exchange(
                request, stop: stop, note: note, planned: { _ in throw ControlFailure(1, "the service answered out of turn") }, events: events)
        } catch let failure as ControlFailure {
            throw failure
        } catch {
            throw ControlFailure(1, "\(error)")
        }
        guard let report else { throw ControlFailure(1, "the service sent an empty report") }
        return report
    }

    /// Has the service plan and apply that plan at once (``appliesFresh``), for a front-end that
    /// would not ask: `planned` is handed the plan as it comes, before its events. The report is
    /// nil when the plan had nothing to apply.
    public func applyFresh(
        folders: [String], maxDelete: String, requirePeers: Int, sendTimeout: Double, stop: StopSignal, note: (String) -> Void,
        planned: (PlanAnswer) throws -> Void, events: (ApplyEvent) -> Void
    ) throws -> (answer: PlanAnswer, report: ApplyReport?) {
        var request = Self.applyRequest(maxDelete: maxDelete, requirePeers: requirePeers, sendTimeout: sendTimeout)
        request.fresh = true
        request.folders = folders
        var answered: PlanAnswer?
        let report = try exchange(
            request, stop: stop, note: note,
            planned: { answer in
                answered = answer
                try planned(answer)
            }, events: events)
        guard let answered else { throw ControlFailure(1, "the service applied without sending its plan") }
        return (answered, report)
    }

    /// An apply request with the options both kinds carry.
    private static func applyRequest(maxDelete: String, requirePeers: Int, sendTimeout: Double) -> ControlRequest {
        var request = ControlRequest(verb: .apply)
        request.maxDelete = maxDelete
        request.requirePeers = requirePeers
        request.sendTimeout = sendTimeout
        return request
    }

    /// Sends an apply request and hands on what comes back until its report.
    private func exchange(
        _ request: ControlRequest, stop: StopSignal, note: (String) -> Void, planned: (PlanAnswer) throws -> Void,
        events: (ApplyEvent) -> Void
    ) throws -> ApplyReport? {
        let connection = try open()
        defer { connection.close() }
        var request = request
        request.batches = true
        try connection.send(request)
        stop.onRaise { signal in
            var stopping = ControlRequest(verb: .stop)
            stopping.signal = signal
            try? connection.send(stopping)
        }
        while true {
            let reply: ControlReply
            do {
                reply = try connection.reply()
            } catch {
                throw ControlFailure(
                    5, "the service (pid \(pid)) went away during the apply: what it finished stays done; see its log, then plan again")
            }
            switch reply.type {
            case .event:
                if let event = reply.event { events(event) }
                for event in reply.events ?? [] { events(event) }
            case .note: note(reply.message ?? "")
            case .plan:
                guard let plan = reply.plan else { throw ControlFailure(1, "the service answered with no plan") }
                try planned(PlanAnswer(plan: plan, warnings: reply.warnings ?? [], skipped: (reply.skipped ?? []).map { ($0.folder, $0.reason) }))
            case .report: return reply.report
            case .failure: throw ControlFailure(reply.code ?? 1, reply.message ?? "the service refused")
            case .hello: throw ControlFailure(1, "the service answered out of turn")
            }
        }
    }

    /// One block of `file` through the service, as a ``BlockSource`` relay (verified there
    /// and again by the caller).
    public func block(folder: String, file: BEPFileInfo, block: BEPBlockInfo) async throws -> Data {
        var request = ControlRequest(verb: .block)
        request.folder = folder
        request.path = file.name
        request.offset = block.offset
        request.size = block.size
        request.hash = Hex.encode(block.hash)
        let path = self.path
        let name = file.name
        let sent = request
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(
                    with: Result {
                        guard let connection = Self.connect(path) else {
                            throw ApplyError(.peerFailed, path: name, "the running service no longer answers on \(path)")
                        }
                        defer { connection.close() }
                        try connection.send(sent)
                        guard let (kind, payload) = try connection.frame() else {
                            throw ApplyError(.peerFailed, path: name, "the running service closed the connection")
                        }
                        if kind == .data { return payload }
                        let reply = try JSONDecoder().decode(ControlReply.self, from: payload)
                        // The service's reason names the file already when it is about it.
                        let reason = reply.message ?? "the service refused the block"
                        throw ApplyError(.peerFailed, path: name, reason.hasPrefix(name + ": ") ? String(reason.dropFirst(name.count + 2)) : reason)
                    })
            }
        }
    }

    /// ``block(folder:file:block:)`` as the relay a ``BlockSource`` takes.
    public var relay: BlockSource.Relay {
        { [self] folder, file, block in try await self.block(folder: folder, file: file, block: block) }
    }
}

/// A verb refused or cut short by the service: what to say and the exit code to say it with.
public struct ControlFailure: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    init(_ code: Int32, _ message: String) {
        self.code = code
        self.message = message
    }
    public var description: String { message }
}

/// One connection to the control socket.
final class Connection: @unchecked Sendable {  // a send from the stop handler, reads from the caller
    let fd: Int32
    let path: String
    private let writing = NSLock()
    /// Set once closed: a late send (a Ctrl-C after the apply ended) must not write into a
    /// descriptor number the process has since given to something else.
    private var closed = false

    init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    /// A connection dropped without ``close()`` does not keep its descriptor.
    deinit { close() }

    func close() {
        writing.lock()
        defer { writing.unlock() }
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }

    func send(_ request: ControlRequest) throws(ControlFailure) {
        let frame = ControlSocket.frame(.json, ControlSocket.encode(request))
        writing.lock()
        defer { writing.unlock() }
        guard !closed else { throw ControlFailure(1, "\(path): the connection is closed") }
        let ok = frame.withUnsafeBytes { raw -> Bool in
            var sent = 0
            while sent < raw.count {
                let n = Glibc.send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return false }
                sent += n
            }
            return true
        }
        guard ok else { throw ControlFailure(1, "\(path): the service closed the connection (\(String(cString: strerror(errno))))") }
    }

    /// The next frame, or nil when the service closed the connection between frames.
    func frame() throws(ControlFailure) -> (ControlSocket.Kind, Data)? {
        var header = [UInt8](repeating: 0, count: 5)
        guard try readFully(&header, allowEnd: true) else { return nil }
        let length = Int(header[0]) << 24 | Int(header[1]) << 16 | Int(header[2]) << 8 | Int(header[3])
        guard length <= ControlSocket.maximumPayload, let kind = ControlSocket.Kind(rawValue: header[4]) else {
            throw ControlFailure(1, "\(path): a malformed answer from the service")
        }
        var payload = [UInt8](repeating: 0, count: length)
        _ = try readFully(&payload, allowEnd: false)
        return (kind, Data(payload))
    }

    func reply() throws(ControlFailure) -> ControlReply {
        guard let (kind, payload) = try frame() else { throw ControlFailure(1, "\(path): the service closed the connection") }
        guard kind == .json, let reply = try? JSONDecoder().decode(ControlReply.self, from: payload) else {
            throw ControlFailure(1, "\(path): a malformed answer from the service")
        }
        return reply
    }

    private func readFully(_ buffer: inout [UInt8], allowEnd: Bool) throws(ControlFailure) -> Bool {
        var got = 0
        while got < buffer.count {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, $0.count - got, 0) }
            if n < 0 && errno == EINTR { continue }
            if n == 0 && got == 0 && allowEnd { return false }
            guard n > 0 else { throw ControlFailure(1, "\(path): the service closed the connection mid-answer") }
            got += n
        }
        return true
    }
}
