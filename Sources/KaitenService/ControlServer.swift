import Foundation
import KaitenApply
import KaitenConfig
import KaitenProtocol
import KaitenReconcile
import KaitenServer
import KaitenStream
import KaitenSync
import KaitenTransfer
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Answers the verbs run beside a service on its live connections (``ControlSocket``): the
/// plan it would apply, an apply of a plan the client confirmed (checked again like a saved
/// plan, under the same apply lock as the service's own rounds) or of the plan it makes there
/// for a client that asks no question (`fresh`), and single verified blocks
/// for `cat` and `get`. It decides nothing itself: the planner, the stale check, the brakes and
/// the applier do, as for a one-shot `apply`.
public final class ControlServer: @unchecked Sendable {  // KaitenHome is read-only after load
    let home: KaitenHome
    let sessions: PeerSessions
    let files: RemoteFiles
    /// The folders the service keeps current; a request for another is refused.
    let folders: [String]
    let role: String
    let serviceStop: StopSignal
    let log: @Sendable (String) -> Void
    /// Where a service's log takes what a client's apply did, as its own rounds say it (`done`,
    /// `failed` with folder, path and action); nil: said through `log`.
    let events: (@Sendable (ServiceEvent) -> Void)?
    private let lifecycle = Mutex(Lifecycle())
    private let boundInode = Mutex<ino_t?>(nil)

    /// Where the server is between start and stop. ``close()`` may come at any point of
    /// ``run()``, before the socket is bound too: whatever is not open yet is never opened.
    private struct Lifecycle {
        /// ``close()`` was called.
        var closing = false
        /// The listening socket, once bound.
        var listener: (any Channel)?
        /// The clients' connections, so that stopping does not wait on one that says nothing.
        var clients: [ObjectIdentifier: any Channel] = [:]
        /// The grace after ``close()`` is over: connections still open are closed, and one
        /// whose serving starts only now is closed at once.
        var graceOver = false
    }

    /// Mints a one-time login token for the web page; nil where no page is served.
    let loginToken: (@Sendable () -> String?)?

    public init(
        home: KaitenHome, sessions: PeerSessions, files: RemoteFiles, folders: [String], role: String, stop: StopSignal,
        log: @escaping @Sendable (String) -> Void, events: (@Sendable (ServiceEvent) -> Void)? = nil,
        loginToken: (@Sendable () -> String?)? = nil
    ) {
        self.loginToken = loginToken
        self.events = events
        self.home = home
        self.sessions = sessions
        self.files = files
        self.folders = folders
        self.role = role
        self.serviceStop = stop
        self.log = log
    }

    /// Binds `state/run.sock` (mode 0600, made under a temporary name and renamed, so it is
    /// never reachable with looser permissions) and serves until ``close()``. A socket another
    /// live process answers on is left alone (said, and nothing served); a stale one is replaced.
    public func run() async throws {
        let path = ControlSocket.path(home.home)
        if lifecycle.withLock({ $0.closing }) { return }
        if let other = ControlClient.connect(path) {
            other.close()
            throw ServiceError("\(path): another kaiten process answers there; verbs beside it go to that one")
        }
        let temporary = path + ".\(getpid()).tmp"
        unlink(temporary)
        let server = try await ControlSocket.withShortPath(temporary) { short in
            try await ConnectionServer.bind(
                ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton), to: .unixDomainSocket(path: short),
                wrap: { channel in
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(ControlFrameDecoder()))
                    return try NIOAsyncChannel<ControlFrame, ByteBuffer>(wrappingChannelSynchronously: channel)
                },
                serve: { connection in await self.serve(connection) })
        }
        guard chmod(temporary, 0o600) == 0, rename(temporary, path) == 0 else {
            let why = String(cString: strerror(errno))
            server.close()
            await server.run()
            unlink(temporary)
            throw ServiceError("\(path): cannot put the control socket in place: \(why)")
        }
        var info = stat()
        if stat(path, &info) == 0 { boundInode.withLock { $0 = info.st_ino } }
        defer { removeSocket(path) }
        let closedMeanwhile = lifecycle.withLock { state -> Bool in
            if !state.closing { state.listener = server.channel }
            return state.closing
        }
        if closedMeanwhile { server.close() }
        await server.run()
    }

    /// Stops taking connections; those open get 5 s to finish (an apply stopping between
    /// blocks, as the service's stop asked it to, sends its report) and are then closed.
    /// Called before ``run()`` has bound the socket, it makes `run` end without serving.
    public func close() {
        let listener = lifecycle.withLock { state -> (any Channel)? in
            guard !state.closing else { return nil }
            state.closing = true
            return state.listener
        }
        listener?.close(promise: nil)
        Task {
            try? await Task.sleep(for: .seconds(5))
            let open = lifecycle.withLock { state -> [any Channel] in
                state.graceOver = true
                return Array(state.clients.values)
            }
            for client in open { client.close(promise: nil) }
        }
    }

    /// Clients whose connection is being served now.
    var clientCount: Int { lifecycle.withLock { $0.clients.count } }

    /// Removes the socket file if it is still the one bound here.
    private func removeSocket(_ path: String) {
        var info = stat()
        if stat(path, &info) == 0, boundInode.withLock({ $0 }) == info.st_ino { unlink(path) }
    }

    private func serve(_ connection: NIOAsyncChannel<ControlFrame, ByteBuffer>) async {
        let key = ObjectIdentifier(connection.channel)
        let late = lifecycle.withLock { state -> Bool in
            state.clients[key] = connection.channel
            return state.graceOver
        }
        if late { connection.channel.close(promise: nil) }
        defer { lifecycle.withLock { _ = $0.clients.removeValue(forKey: key) } }
        try? await connection.executeThenClose { inbound, outbound in
            // The request first, then whatever the client says while it waits (stop), or the
            // end of its side (it went away: an apply stops between blocks).
            let (frames, feed) = AsyncStream<ControlFrame>.makeStream()
            let reader = Task {
                do {
                    for try await frame in inbound { feed.yield(frame) }
                } catch {}
                feed.finish()
            }
            defer { reader.cancel() }
            var requests = frames.makeAsyncIterator()
            let send: @Sendable (ControlReply) async throws -> Void = { reply in
                try await outbound.write(ByteBuffer(bytes: ControlSocket.frame(.json, ControlSocket.encode(reply))))
            }
            guard let first = await requests.next(), first.kind == .json,
                let request = try? JSONDecoder().decode(ControlRequest.self, from: Data(first.payload.readableBytesView))
            else {
                try await send(.failure(64, "not a request this kaiten understands"))
                return
            }
            switch request.verb {
            case .hello:
                var reply = ControlReply(.hello)
                reply.pid = getpid()
                reply.role = role
                reply.accepts = ControlFeature.allCases.map(\.rawValue)
                try await send(reply)
            case .plan:
                try await send(plan(request))
            case .apply:
                let stop = StopSignal()
                serviceStop.onRaise { stop.raise($0) }
                let watcher = Task {
                    for await frame in frames {
                        if frame.kind == .json, let said = try? JSONDecoder().decode(ControlRequest.self, from: Data(frame.payload.readableBytesView)),
                            said.verb == .stop
                        {
                            stop.raise(said.signal ?? SIGINT)
                        }
                    }
                    // The client went away without a word: stop as for SIGTERM.
                    stop.raise(SIGTERM)
                }
                defer { watcher.cancel() }
                try await apply(request, stop: stop, send: send)
            case .block:
                do {
                    let data = try await block(request)
                    try await outbound.write(ByteBuffer(bytes: ControlSocket.frame(.data, data)))
                } catch {
                    try await send(.failure(1, (error as? ApplyError)?.hint ?? "\(error)"))
                }
            case .stop:
                try await send(.failure(64, "nothing to stop"))
            case .uiLogin:
                if let token = loginToken?() {
                    var reply = ControlReply(.hello)
                    reply.message = token
                    try await send(reply)
                } else {
                    try await send(.failure(1, "this \(role) serves no web page: its REST API is off (config.xml's <gui>)"))
                }
            }
            // The last frames may still wait in the channel for a client that reads slowly, and
            // closing now would drop them (an apply of 5,000 files ended in "the service closed
            // the connection mid-answer"): the client hangs up once it has read its answer.
            await Self.untilEnded(reader, within: Self.hangUpWait)
        }
    }

    /// How long a client is given, after its answer was sent, to read it and hang up.
    static let hangUpWait: Duration = .seconds(30)

    /// Waits for `reader` (which ends when the client hangs up), cancelling it after `limit`.
    static func untilEnded(_ reader: Task<Void, Never>, within limit: Duration) async {
        let timer = Task {
            try? await Task.sleep(for: limit)
            reader.cancel()
        }
        await reader.value
        timer.cancel()
    }

    private func checkFolders(_ requested: [String]) -> String? {
        let outside = requested.filter { !folders.contains($0) }
        guard !outside.isEmpty else { return nil }
        return "the running \(role) (pid \(getpid())) keeps folders \(folders.joined(separator: ", ")) current, not \(outside.joined(separator: ", ")); "
            + "stop it to use the others, or add them to it"
    }

    private func plan(_ request: ControlRequest) -> ControlReply {
        let requested = request.folders ?? []
        if let outside = checkFolders(requested) { return .failure(1, outside) }
        let chosen = requested.isEmpty ? folders : requested
        var warnings: [String] = []
        do {
            let prepared = try Applier.prepare(
                on: sessions.session(folders: chosen), home: home, folders: chosen, requirePeers: max(1, request.requirePeers ?? 1),
                warn: { warnings.append($0) })
            return Self.planReply(prepared, warnings: warnings, maxDelete: DeleteLimit(request.maxDelete ?? "50%") ?? .percent(50))
        } catch {
            return .failure(1, "\(error)")
        }
    }

    /// A plan as the client shows it: the brakes it would meet noted, with the planning's
    /// warnings and the folders left out.
    static func planReply(_ prepared: Applier.Prepared, warnings: [String], maxDelete: DeleteLimit) -> ControlReply {
        var plan = prepared.plan
        Applier.noteBrakes(&plan, states: prepared.states, maxDelete: maxDelete)
        var reply = ControlReply(.plan)
        reply.plan = plan
        reply.warnings = warnings
        reply.skipped = prepared.skipped.map { .init(folder: $0.folder, reason: $0.reason) }
        return reply
    }

    private func apply(_ request: ControlRequest, stop: StopSignal, send: @escaping @Sendable (ControlReply) async throws -> Void) async throws {
        let fresh = request.fresh == true
        guard fresh || request.plan != nil, let maxDelete = DeleteLimit(request.maxDelete ?? "50%") else {
            try await send(.failure(64, "an apply request carries a plan (or asks for a fresh one) and a --max-delete"))
            return
        }
        let requested = request.plan.map { $0.folders.map(\.id) } ?? request.folders ?? []
        if let outside = checkFolders(requested) {
            try await send(.failure(1, outside))
            return
        }
        let chosen = fresh && requested.isEmpty ? folders : requested
        log(fresh ? "planning and applying for a client on the control socket" : "applying plan \(request.plan!.planID) for a client on the control socket")
        // Replies go out in order through one writer; progress at most a few times a second.
        let replies = ControlReplyQueue(batches: request.batches == true)
        let writer = Task { await replies.run(send) }
        let lastProgress = Mutex(ContinuousClock.now - .seconds(1))
        let log = self.log
        let said = self.events
        let requirePeers = max(request.requirePeers ?? 1, request.plan?.requirePeers ?? 1)
        let pipeline = ApplyPipeline(
            home: home, maxDelete: maxDelete, brakes: .refuse, requirePeers: requirePeers, sendTimeout: request.sendTimeout ?? 300)
        let sessions = self.sessions
        let home = self.home
        let warnings = Mutex<[String]>([])
        let choice: ApplyPipeline.Choice
        if let plan = request.plan {
            choice = .given(plan, saved: request.saved == true)
        } else {
            // Shown by the client as it comes, applied without waiting for it: the client asks
            // for this only when it would not ask the user.
            choice = .fresh(decide: { prepared in
                let reply = Self.planReply(prepared, warnings: warnings.withLock { $0 }, maxDelete: maxDelete)
                replies.post(reply)
                guard let plan = reply.plan, plan.summary.hasChanges else { return nil }
                return plan
            })
        }
        let outcome: ApplyPipeline.Outcome
        do {
            outcome = try await pipeline.run(
                // The service's own round may be applying: this one follows it, as one apply per home does.
                lock: .wait(notice: {
                    var note = ControlReply(.note)
                    note.message = "the service is applying a round of its own; this apply follows it"
                    replies.post(note)
                }),
                prepare: {
                    try Applier.prepare(
                        on: sessions.session(folders: chosen), home: home, folders: chosen, requirePeers: requirePeers,
                        warn: { warning in warnings.withLock { $0.append(warning) } })
                },
                choice: choice, stop: stop
            ) { event in
                switch event {
                case .progress(let done, let total, _, _, _):
                    let due = lastProgress.withLock { last in
                        guard done == total || ContinuousClock.now - last >= .milliseconds(250) else { return false }
                        last = ContinuousClock.now
                        return true
                    }
                    if !due { return }
                case .done(let folder, let action, let note):
                    if let said {
                        said(ServiceEvent("done", folder: folder, path: action.path, action: action.action.rawValue, note ?? action.reason))
                    } else {
                        log("done \(action.action.rawValue) \(folder)/\(action.path): \(note ?? action.reason)")
                    }
                case .failed(let folder, let action, let reason):
                    if let said {
                        said(ServiceEvent("failed", folder: folder, path: action.path, action: action.action.rawValue, reason))
                    } else {
                        log("failed \(action.action.rawValue) \(folder)/\(action.path): \(reason)")
                    }
                default:
                    break
                }
                replies.post(event)
            }
        } catch {
            // The writer ends with the request, whichever way it ends.
            replies.finish()
            await writer.value
            throw error
        }
        switch outcome.ending {
        case .refused(.cannotPlan(let why)):
            replies.post(.failure(1, "cannot plan: \(why)"))
        case .refused(let refusal):
            replies.post(.failure(refusal.exitCode, "\(refusal)"))
        case .nothingToApply where fresh:
            // The plan went first; its summary says there is nothing to do.
            replies.post(ControlReply(.report))
        case .nothingToApply:
            replies.post(.failure(1, "nothing to apply"))
        case .applied(_, let report, _):
            var reply = ControlReply(.report)
            reply.report = report
            replies.post(reply)
        }
        replies.finish()
        await writer.value
    }

    private func block(_ request: ControlRequest) async throws -> Data {
        guard let folder = request.folder, let path = request.path, let offset = request.offset, let size = request.size,
            let hex = request.hash, let hash = Hex.decode(hex).map({ Data($0) })
        else { throw ServiceError("a block request names a folder, a path, an offset, a size and a hash") }
        if let outside = checkFolders([folder]) { throw ServiceError(outside) }
        do {
            return try await files.block(folder: folder, path: path, offset: offset, size: size, hash: hash)
        } catch let error as StreamError {
            throw ServiceError(error.hint)
        }
    }
}

/// One frame off the socket.
struct ControlFrame: Sendable {
    let kind: ControlSocket.Kind
    let payload: ByteBuffer
}

/// Cuts the byte stream into frames; a length beyond the limit, or an unknown kind, closes
/// the connection.
struct ControlFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ControlFrame

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) else { return .needMoreData }
        guard Int(length) <= ControlSocket.maximumPayload else { throw ServiceError("control frame of \(length) bytes") }
        guard buffer.readableBytes >= 5 + Int(length) else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: 4)
        guard let kind = ControlSocket.Kind(rawValue: buffer.readInteger(as: UInt8.self)!) else {
            throw ServiceError("unknown control frame kind")
        }
        let payload = buffer.readSlice(length: Int(length))!
        context.fireChannelRead(wrapInboundOut(ControlFrame(kind: kind, payload: payload)))
        return .continue
    }
}

