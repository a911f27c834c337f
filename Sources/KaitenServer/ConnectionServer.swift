import NIOCore
import NIOPosix
import Synchronization

/// A listening socket whose every accepted connection is served by a task of its own from the
/// moment the connection exists.
///
/// swift-nio's async `bind` hands accepted connections to the server's loop through a buffer.
/// A connection accepted while the server closes stays in that buffer, is dropped unserved, and
/// a `NIOAsyncChannel` dropped before `executeThenClose` traps the whole process (swift-nio
/// #2637, #2813). Here the child initializer starts the serving task itself, so no connection
/// ever waits to be taken; ``run()`` returns once the listening socket is closed and every
/// connection's task has ended.
public final class ConnectionServer: Sendable {
    /// Where the server listens.
    public enum Address: Sendable {
        case host(String, port: Int)
        case unixDomainSocket(path: String)
    }

    /// The listening channel.
    public let channel: any Channel
    private let connections: ServingCount

    private init(channel: any Channel, connections: ServingCount) {
        self.channel = channel
        self.connections = connections
    }

    /// The port bound (for `.host` with port 0, the one the system chose).
    public var port: Int? { channel.localAddress?.port }

    /// Binds `address` and starts accepting.
    /// - Parameters:
    ///   - bootstrap: options set by the caller (reuse-address, buffer sizes); its child
    ///     initializer is replaced.
    ///   - wrap: installs the connection's handlers and wraps it, on its event loop.
    ///   - serve: serves one connection; it must end with the connection's `executeThenClose`.
    public static func bind<Inbound: Sendable, Outbound: Sendable>(
        _ bootstrap: ServerBootstrap, to address: Address,
        wrap: @escaping @Sendable (any Channel) throws -> NIOAsyncChannel<Inbound, Outbound>,
        serve: @escaping @Sendable (NIOAsyncChannel<Inbound, Outbound>) async -> Void
    ) async throws -> ConnectionServer {
        let connections = ServingCount()
        let configured = bootstrap
            .serverChannelInitializer { server in
                server.eventLoop.makeCompletedFuture {
                    try server.pipeline.syncOperations.addHandler(AcceptCounter(connections))
                }
            }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let connection = try wrap(channel)
                    let ticket = connections.ticket(for: channel)
                    ticket?.serving()
                    Task {
                        await serve(connection)
                        ticket?.served()
                    }
                }
            }
        let channel: any Channel
        switch address {
        case .host(let host, let port):
            channel = try await configured.bind(host: host, port: port).get()
        case .unixDomainSocket(let path):
            channel = try await configured.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true).get()
        }
        return ConnectionServer(channel: channel, connections: connections)
    }

    /// Waits until the listening socket is closed (by ``close()`` or an error) and every
    /// connection accepted has been served.
    public func run() async {
        try? await channel.closeFuture.get()
        await connections.allEnded()
    }

    /// Stops accepting; the connections open go on until their serving ends.
    public func close() {
        channel.close(promise: nil)
    }

    /// How many connections are being served now.
    public var serving: Int { connections.count }
}

/// Counts each connection from the moment it is accepted, before its initializer runs: a
/// connection accepted as the listener closes is waited for like any other.
final class AcceptCounter: ChannelInboundHandler, Sendable {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel
    let connections: ServingCount

    init(_ connections: ServingCount) { self.connections = connections }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        connections.accepted(unwrapInboundIn(data))
        context.fireChannelRead(data)
    }
}

/// Connections accepted and not yet done with: counted, not kept (a service lives for months),
/// and waited for.
final class ServingCount: Sendable {
    private struct State {
        var count = 0
        var tickets: [ObjectIdentifier: Ticket] = [:]
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    var count: Int { state.withLock { $0.count } }

    /// One accepted connection: done once it is closed and, if a task serves it, that task ended.
    final class Ticket: Sendable {
        private struct Progress {
            var closed = false
            var served = false
            var serving = false
            var ended = false
        }
        private let progress = Mutex(Progress())
        private let owner: ServingCount
        private let key: ObjectIdentifier

        init(owner: ServingCount, key: ObjectIdentifier) {
            self.owner = owner
            self.key = key
        }

        func serving() { update { $0.serving = true } }
        func served() { update { $0.served = true } }
        func closed() { update { $0.closed = true } }

        private func update(_ change: (inout Progress) -> Void) {
            let done = progress.withLock { progress -> Bool in
                change(&progress)
                guard !progress.ended, progress.closed, !progress.serving || progress.served else { return false }
                progress.ended = true
                return true
            }
            if done { owner.end(key) }
        }
    }

    func accepted(_ channel: any Channel) {
        let key = ObjectIdentifier(channel)
        let ticket = Ticket(owner: self, key: key)
        state.withLock {
            $0.count += 1
            $0.tickets[key] = ticket
        }
        channel.closeFuture.whenComplete { _ in ticket.closed() }
    }

    func ticket(for channel: any Channel) -> Ticket? {
        state.withLock { $0.tickets[ObjectIdentifier(channel)] }
    }

    private func end(_ key: ObjectIdentifier) {
        let resumed = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.count -= 1
            state.tickets[key] = nil
            guard state.count == 0 else { return [] }
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in resumed { continuation.resume() }
    }

    func allEnded() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.count == 0 { return true }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}
