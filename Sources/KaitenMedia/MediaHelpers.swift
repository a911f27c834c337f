import Foundation
import Synchronization
import KaitenTransfer

#if canImport(Glibc)
import Glibc
#endif

/// One thumbnail job for the `kaiten-media` helper (its protocol is in its main.swift).
struct MediaJob: Encodable, Sendable {
    enum Kind: String, Encodable, Sendable {
        case image, video
        case videoDate = "video-date"
        case imageDate = "image-date"
    }

    var kind: Kind
    var input: String
    var output: String
    var size: Int
    var max_pixels: Int64
    var orientation: Int = 0
    var at: Double = 1
    var timeout: Int = 30
}

/// What the helper made: the JPEG's width, height and length.
public struct MediaPicture: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var bytes: Int
}

struct MediaOutcome: Decodable, Sendable {
    var ok: Bool
    var width: Int?
    var height: Int?
    var bytes: Int?
    var error: String?
    var date: String?
}

/// The decoder processes: up to `count` `kaiten-media` helpers, each doing one job at a time,
/// kept between jobs (libvips and libavcodec take ~30 ms to load). A helper that crashes, runs
/// out of its address space, or overstays `timeout` is killed: that job fails with the reason,
/// and the next job starts a new helper.
public final class MediaHelpers: Sendable {
    public let executable: String
    let memoryLimitMiB: Int
    let timeout: Double
    private let idle = Mutex<[HelperProcess]>([])
    private let slots: AsyncBudget

    public init(executable: String, count: Int = ProcessInfo.processInfo.activeProcessorCount, memoryLimitMiB: Int = 1536, timeout: Double = 120) {
        self.executable = executable
        self.memoryLimitMiB = memoryLimitMiB
        self.timeout = timeout
        self.slots = AsyncBudget(max(1, count))
    }

    /// Where `kaiten-media` is: `$KAITEN_MEDIA_HELPER`, else beside the running executable (a
    /// build directory, `scripts/install`'s bin), else `../lib/kaiten/` from it (the .deb).
    public static func locate(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> String {
        if let explicit = environment["KAITEN_MEDIA_HELPER"], !explicit.isEmpty {
            guard access(explicit, X_OK) == 0 else { throw MediaError("KAITEN_MEDIA_HELPER=\(explicit): not an executable") }
            return explicit
        }
        let me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let directory = (me as NSString).deletingLastPathComponent
        for candidate in ["kaiten-media", "../lib/kaiten/kaiten-media"] {
            let path = ((directory as NSString).appendingPathComponent(candidate) as NSString).standardizingPath
            if access(path, X_OK) == 0 { return path }
        }
        throw MediaError(
            "the media helper kaiten-media is not installed (looked beside \(me) and in ../lib/kaiten/); thumbnails need it and libvips42, libavformat59 (set KAITEN_MEDIA_HELPER to use another)"
        )
    }

    /// A thumbnail job: the picture made.
    func run(_ job: MediaJob) async -> Result<MediaPicture, MediaError> {
        switch await outcome(of: job) {
        case .failure(let error): return .failure(error)
        case .success(let outcome):
            guard let width = outcome.width, let height = outcome.height, let bytes = outcome.bytes else {
                return .failure(MediaError("the media helper answered something else"))
            }
            return .success(MediaPicture(width: width, height: height, bytes: bytes))
        }
    }

    /// A video's creation time as its container records it (ISO 8601, UTC).
    public func videoCreationTime(_ path: String) async -> Result<String, MediaError> {
        await date(MediaJob(kind: .videoDate, input: path, output: "", size: 0, max_pixels: 0))
    }

    /// An image's EXIF DateTimeOriginal as libvips reads it (HEIF, PNG, WebP, TIFF as well as JPEG).
    public func imageCaptureTime(_ path: String) async -> Result<String, MediaError> {
        await date(MediaJob(kind: .imageDate, input: path, output: "", size: 0, max_pixels: 0))
    }

    func date(_ job: MediaJob) async -> Result<String, MediaError> {
        switch await outcome(of: job) {
        case .failure(let error): return .failure(error)
        case .success(let outcome):
            guard let date = outcome.date else { return .failure(MediaError("the media helper answered something else")) }
            return .success(date)
        }
    }

    func outcome(of job: MediaJob) async -> Result<MediaOutcome, MediaError> {
        await slots.acquire(1)
        defer { slots.release(1) }
        let helper: HelperProcess
        do {
            helper = try idle.withLock { $0.popLast() } ?? HelperProcess(executable: executable, memoryLimitMiB: memoryLimitMiB)
        } catch {
            return .failure(error as? MediaError ?? MediaError("\(error)"))
        }
        let timeout = self.timeout
        let (result, reusable) = await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: helper.run(job, timeout: timeout)) }
        }
        if reusable { idle.withLock { $0.append(helper) } } else { helper.stop() }
        return result
    }

    /// Ends the idle helpers (their stdin closes; they exit).
    public func close() {
        for helper in idle.withLock({ list in defer { list.removeAll() }; return list }) { helper.stop() }
    }

    deinit { close() }
}

/// One running `kaiten-media`.
private final class HelperProcess: @unchecked Sendable {
    let process = Process()
    let toHelper: FileHandle
    let fromHelper: Int32
    var pending: [UInt8] = []

    init(executable: String, memoryLimitMiB: Int) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["--memory-limit", "\(memoryLimitMiB)"]
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        // Decoders print warnings about damaged files; the job's result carries the error.
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw MediaError("cannot start \(executable): \(error.localizedDescription)")
        }
        toHelper = stdin.fileHandleForWriting
        fromHelper = dup(stdout.fileHandleForReading.fileDescriptor)
        stdout.fileHandleForReading.closeFile()
    }

    /// Runs one job; the Bool says whether this helper may take another.
    func run(_ job: MediaJob, timeout: Double) -> (Result<MediaOutcome, MediaError>, Bool) {
        guard var line = try? JSONEncoder().encode(job) else { return (.failure(MediaError("cannot encode the job")), true) }
        line.append(0x0A)
        do {
            try toHelper.write(contentsOf: line)
        } catch {
            return (.failure(MediaError("the media helper is gone (\(ended()))")), false)
        }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let newline = pending.firstIndex(of: 0x0A) {
                let reply = Array(pending[..<newline])
                pending.removeSubrange(...newline)
                guard let outcome = try? JSONDecoder().decode(MediaOutcome.self, from: Data(reply)) else {
                    return (.failure(MediaError("the media helper answered something else")), false)
                }
                guard outcome.ok else { return (.failure(MediaError(outcome.error ?? "failed")), true) }
                return (.success(outcome), true)
            }
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else {
                kill(process.processIdentifier, SIGKILL)
                return (.failure(MediaError("the decoder took longer than \(Int(timeout)) s and was stopped")), false)
            }
            var descriptor = pollfd(fd: fromHelper, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(min(remaining, 1) * 1000))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = chunk.withUnsafeMutableBytes { read(fromHelper, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return (.failure(MediaError("the decoder stopped (\(ended()))")), false) }
            pending += chunk[..<n]
        }
    }

    /// How the process ended, in words.
    func ended() -> String {
        process.waitUntilExit()
        if process.terminationReason == .uncaughtSignal {
            let signal = process.terminationStatus
            return signal == SIGKILL ? "killed" : "signal \(signal)\(signal == SIGSEGV ? ", a crash in the decoder" : signal == SIGABRT ? ", out of memory or a failed check" : "")"
        }
        return "exit status \(process.terminationStatus)"
    }

    func stop() {
        try? toHelper.close()
        close(fromHelper)
        if process.isRunning {
            // Give it a moment to finish its job and see the end of its input.
            for _ in 0..<50 where process.isRunning { usleep(10_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        process.waitUntilExit()
    }
}
