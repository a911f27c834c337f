// kaiten-media: the helper process that decodes images and video frames for Kaiten's thumbnails.
//
// Decoders of files that come from other devices are the riskiest code Kaiten runs, and libvips
// and libavcodec bring a hundred shared libraries: they live in this process, not in `kaiten`.
// A crash, a hang or a runaway allocation here costs one thumbnail (the parent reports it,
// kills what overstays and starts another helper), and `kaiten` itself starts no slower for them.
//
// Protocol: one JSON job per line on stdin, one JSON result per line on stdout, in order.
//   {"kind":"image","input":PATH,"output":PATH,"size":255,"max_pixels":N,"orientation":0}
//   {"kind":"video","input":PATH-OR-URL,"output":PATH,"size":255,"max_pixels":N,"at":1,"timeout":30}
//   {"kind":"video-date"|"image-date","input":PATH,"output":"","size":0}
//   → {"ok":true,"width":W,"height":H,"bytes":N}, {"ok":true,"date":"2024-05-06T07:08:09.000000Z"}
//     or {"ok":false,"error":"…"}
// The JPEG is written to `output` (created, never overwritten) and fsynced; the parent renames it.
import CKaitenMedia
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

struct Job: Decodable {
    var kind: String
    var input: String
    var output: String
    var size: Int
    var max_pixels: Int64?
    var orientation: Int?
    var at: Double?
    var timeout: Int?
}

struct Outcome: Encodable {
    var ok: Bool
    var width: Int?
    var height: Int?
    var bytes: Int?
    var error: String?
    /// For "video-date" and "image-date": the creation or capture time.
    var date: String?
}

func text(of buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

func errnoText() -> String { text(of: Array(UnsafeBufferPointer(start: strerror(errno), count: Int(strlen(strerror(errno))) + 1))) }

/// Writes all of `text` to the descriptor (stdout's results are read line by line by the parent).
func writeAll(_ fd: Int32, _ text: String) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return }
        bytes = bytes.dropFirst(n)
    }
}

func run(_ job: Job) -> Outcome {
    var error = [CChar](repeating: 0, count: 512)
    var data: UnsafeMutableRawPointer?
    var length = 0
    var width: Int32 = 0
    var height: Int32 = 0
    let maxPixels = job.max_pixels ?? 64_000_000
    let size = Int32(clamping: job.size)
    let status: Int32
    switch job.kind {
    case "image":
        status = km_image_thumbnail(
            job.input, nil, 0, size, maxPixels, Int32(clamping: job.orientation ?? 0), &data, &length, &width, &height, &error, error.count)
    case "video":
        status = km_video_thumbnail(
            job.input, size, maxPixels, job.at ?? 1, Int32(clamping: job.timeout ?? 30), &data, &length, &width, &height, &error,
            error.count)
    case "image-date":
        var date = [CChar](repeating: 0, count: 64)
        guard km_image_date(job.input, &date, date.count, &error, error.count) == 0 else {
            return Outcome(ok: false, error: text(of: error))
        }
        return Outcome(ok: true, date: text(of: date))
    case "video-date":
        var date = [CChar](repeating: 0, count: 64)
        guard km_video_creation_time(job.input, &date, date.count, &error, error.count) == 0 else {
            return Outcome(ok: false, error: text(of: error))
        }
        return Outcome(ok: true, date: text(of: date))
    default:
        return Outcome(ok: false, error: "unknown kind \(job.kind)")
    }
    guard status == 0, let data else {
        return Outcome(ok: false, error: text(of: error))
    }
    defer { km_free(data) }
    let fd = open(job.output, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
    guard fd >= 0 else { return Outcome(ok: false, error: "\(job.output): \(errnoText())") }
    defer { close(fd) }
    var written = 0
    while written < length {
        let n = write(fd, data + written, length - written)
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return Outcome(ok: false, error: "\(job.output): \(errnoText())") }
        written += n
    }
    guard fsync(fd) == 0 else { return Outcome(ok: false, error: "\(job.output): fsync: \(errnoText())") }
    return Outcome(ok: true, width: Int(width), height: Int(height), bytes: length)
}

var arguments = CommandLine.arguments.dropFirst()
if arguments.first == "--version" {
    print("kaiten-media 0.1.0")
    exit(0)
}
// --memory-limit MiB: the address space this process may use; a decoder that asks for more
// fails its allocation (one thumbnail lost, an error said) instead of growing without end.
if arguments.first == "--memory-limit", arguments.count >= 2, let mib = Int(arguments.dropFirst().first!) {
    var limit = rlimit(rlim_cur: rlim_t(mib) << 20, rlim_max: rlim_t(mib) << 20)
    // Without the limit a decoder bomb could take the machine's memory: no limit, no decoding.
    guard setrlimit(Int32(RLIMIT_AS.rawValue), &limit) == 0 else {
        writeAll(2, "kaiten-media: cannot limit its memory to \(mib) MiB: \(errnoText())\n")
        exit(1)
    }
    arguments = arguments.dropFirst(2)
}
guard arguments.isEmpty else {
    writeAll(2, "usage: kaiten-media [--memory-limit MiB] (jobs as JSON lines on stdin; started by kaiten)\n")
    exit(2)
}
var error = [CChar](repeating: 0, count: 512)
guard km_init(CommandLine.arguments[0], &error, error.count) == 0 else {
    writeAll(2, "kaiten-media: \(text(of: error))\n")
    exit(1)
}
let decoder = JSONDecoder()
let encoder = JSONEncoder()
while let line = readLine(strippingNewline: true) {
    let outcome: Outcome
    do {
        outcome = run(try decoder.decode(Job.self, from: Data(line.utf8)))
    } catch {
        outcome = Outcome(ok: false, error: "bad job: \(error)")
    }
    let encoded = (try? encoder.encode(outcome)) ?? Data(#"{"ok":false,"error":"cannot encode the result"}"#.utf8)
    writeAll(1, String(decoding: encoded, as: UTF8.self) + "\n")
}
