import Foundation
import KaitenTransfer
import KaitenConfig
import KaitenIndex
import KaitenProtocol
import KaitenReconcile
import KaitenScan
import KaitenSync
import Logging
#if canImport(Glibc)
import Glibc
#endif

// MARK: - The lock, and the plan to apply

extension Applier {
    /// The pid of the apply running on this home, or nil when none is (the lock is free).
    public static func runningApply(_ home: Home) -> String? {
        let path = (home.stateDirectory as NSString).appendingPathComponent("apply.lock")
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return nil
        }
        var buffer = [UInt8](repeating: 0, count: 32)
        let n = pread(fd, &buffer, 32, 0)
        return n > 0 ? String(decoding: buffer[..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : "?"
    }

    public static func lock(_ home: Home) throws(ApplyError) -> Lock {
        try? FileManager.default.createDirectory(atPath: home.stateDirectory, withIntermediateDirectories: true)
        let path = (home.stateDirectory as NSString).appendingPathComponent("apply.lock")
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ApplyError(.io, path: path, "cannot open the lock: \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            var buffer = [UInt8](repeating: 0, count: 32)
            let n = pread(fd, &buffer, 32, 0)
            let pid = n > 0 ? String(decoding: buffer[..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : "?"
            close(fd)
            throw ApplyError(.locked, path: path, "another kaiten apply (pid \(pid)) is running on this home; try again when it has finished")
        }
        let pid = Array("\(getpid())\n".utf8)
        ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        return Lock(fd: fd)
    }

    /// Refreshes the index (keeping connections), scans, and plans. What this device needs is
    /// announced when the apply ends (``Announcement/DeferredNeeds``).
    public static func prepare(
        home: KaitenHome, folders: [String], requirePeers: Int, timeout: Double, logger: Logger, warn: (String) -> Void
    ) async throws -> Prepared {
        let server = BlockServer(home: home)
        let (reports, session) = try await IndexSync.runKeepingConnections(
            home: home, folders: folders, timeout: timeout, logger: logger, serve: server.answer, lanes: .pulling(), deferringNeeds: true,
            warn: warn)
        var warnings: [String] = []
        for r in reports where !r.ok {
            warnings.append("\(r.folder): could not refresh the index from \(r.peerLabel): \(r.problem ?? "unknown error")")
        }
        do {
            // Its connections end with it: what the peers have not taken yet is waited on.
            let (plan, states, skipped) = try Planner.plan(
                home: home, folders: folders, requirePeers: requirePeers, connected: session.refreshed, pendingSends: true,
                skipUnscannable: true, warn: warn)
            return Prepared(plan: plan, states: states, session: session, warnings: warnings, skipped: skipped)
        } catch {
            // What this device needs was put off until the pulls, which will not come.
            await session.announceChanges(home: home, folders: folders)
            await session.close(reason: "apply failed")
            throw error
        }
    }

    /// Plans on the connections a long-running service holds (its sessions keep the index
    /// current, so nothing is synced first).
    /// - Parameter logs: the folders' global logs the service keeps open and current.
    public static func prepare(
        on session: PeerSession, home: KaitenHome, folders: [String], requirePeers: Int, logs: [String: IndexLog] = [:], warn: (String) -> Void
    ) throws -> Prepared {
        let (plan, states, skipped) = try Planner.plan(
            home: home, folders: folders, requirePeers: requirePeers, connected: session.refreshed, skipUnscannable: true, logs: logs,
            warn: warn)
        return Prepared(plan: plan, states: states, session: session, warnings: [], skipped: skipped)
    }

    /// Plans again on the connections `prepared` holds (after a selection file changed).
    public static func replan(_ prepared: Prepared, home: KaitenHome, folders: [String], requirePeers: Int) throws -> Prepared {
        let (plan, states, skipped) = try Planner.plan(
            home: home, folders: folders, requirePeers: requirePeers, connected: prepared.session.refreshed,
            pendingSends: !prepared.session.isLent, skipUnscannable: true)
        return Prepared(plan: plan, states: states, session: prepared.session, warnings: prepared.warnings, skipped: skipped)
    }
}
