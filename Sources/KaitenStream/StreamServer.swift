import Foundation
import KaitenTransfer
import KaitenConfig
import KaitenProtocol
import KaitenServer
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// `kaiten serve`: GET and HEAD of signed, expiring `/file` URLs with HTTP range support; only
/// the blocks a range needs are fetched. `/thumb` links answer with a thumbnail when the
/// server was given a maker of them.
public final class StreamServer: Sendable {
    /// A JPEG thumbnail of a file, not larger than the size on either side, and a tag that
    /// changes with the file's content.
    public typealias ThumbnailMaker = @Sendable (_ folder: String, _ path: String, _ size: Int) async throws -> (jpeg: [UInt8], etag: String)

    let files: RemoteFiles
    let signer: URLSigner
    let log: @Sendable (String) -> Void
    /// Where this process listens for peers, recorded with the HTTP address.
    let peerAddresses: [String]
    let thumbnails: ThumbnailMaker?
    /// Blocks fetched ahead of what a response has sent.
    let readAhead: Int
    /// SO_SNDBUF of each connection, when set: what the kernel holds beyond what the client took.
    let sendBufferBytes: Int?

    /// - Parameters:
    ///   - readAhead, sendBufferBytes: a player wants blocks fetched ahead (the defaults); a
    ///     decoder that reads a little and seeks (a video's index, one frame) wants neither,
    ///     or an open-ended range fetches megabytes it drops at the next seek.
    public init(
        files: RemoteFiles, signer: URLSigner, peerAddresses: [String] = [], thumbnails: ThumbnailMaker? = nil, readAhead: Int = 8,
        sendBufferBytes: Int? = nil, log: @escaping @Sendable (String) -> Void
    ) {
        self.files = files
        self.signer = signer
        self.peerAddresses = peerAddresses
        self.thumbnails = thumbnails
        self.readAhead = readAhead
        self.sendBufferBytes = sendBufferBytes
        self.log = log
    }

    /// Binds, records the base URL in the home (unless `record` is false: a server private to
    /// this process), calls `ready` with it, serves until `stop` resolves, then cleans up.
    public func run(
        host: String, port: Int, record: Bool = true, ready: @escaping @Sendable (String) -> Void = { _ in },
        stop: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void
    ) async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        var bootstrap = ServerBootstrap(group: group).serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        if let sendBufferBytes { bootstrap = bootstrap.childChannelOption(.socketOption(.so_sndbuf), value: SocketOptionValue(sendBufferBytes)) }
        let server = try await ConnectionServer.bind(
            bootstrap, to: .host(host, port: port),
            wrap: { channel in
                try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                try channel.pipeline.syncOperations.addHandler(RequestHeadDeadline(seconds: Self.requestHeadSeconds))
                // Outbound half-closure: a response to "Connection: close" ends with the
                // output shut down after every queued byte is written (a plain close would
                // drop what the socket buffer had not taken yet: a player's range cut short).
                return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(
                    wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
            },
            serve: { connection in await self.serve(connection) })
        let bound = server.port ?? port
        let shownHost = host.contains(":") ? "[\(host)]" : host
        let base = "http://\(shownHost):\(bound)"
        if record {
            try ServerRecord(baseURL: base, pid: getpid(), peerAddresses: peerAddresses).save(files.home.home)
            log("serving on \(base) (kaiten url FOLDER PATH prints a signed link)")
        }
        stop { server.close() }
        ready(base)
        defer { if record { ServerRecord.remove(files.home.home) } }
        await server.run()
    }

    func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async {
        do {
            try await connection.executeThenClose { inbound, outbound in
                var head: HTTPRequestHead?
                var finished = false
                for try await part in inbound where !finished {
                    switch part {
                    case .head(let h): head = h
                    case .body: break
                    case .end:
                        guard let h = head else { continue }
                        let keepAlive = try await respond(to: h, outbound)
                        head = nil
                        if !keepAlive {
                            // The last response: the output is shut down once it is all written;
                            // the client closes when it has read it, which ends this loop.
                            outbound.finish()
                            finished = true
                        }
                    }
                }
            }
        } catch {
            // The client went away mid-body, or sent garbage: its connection ends, the server goes on.
        }
    }

    struct Failure: Error {
        let status: HTTPResponseStatus
        let message: String
        /// The connection ends after the answer.
        var closes = false
        /// A redirect's target.
        var location: String?
    }

    /// How long a connection may take to send a request's head, when it opens and after each
    /// answer: a client that trickles its headers (or holds an idle socket) is let go.
    public static let requestHeadSeconds: Int64 = 15

    /// Answers one request; returns whether the connection may be reused.
    func respond(to head: HTTPRequestHead, _ out: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>) async throws -> Bool {
        let started = Date()
        let fetchedBefore = files.blocksFetched
        var status: HTTPResponseStatus = .ok
        var sent: Int64 = 0
        let isHead = head.method == .HEAD
        var logged = Self.redacted(head.uri)
        defer {
            let ms = Int(Date().timeIntervalSince(started) * 1000)
            log("\(head.method.rawValue) \(logged) \(status.code) bytes=\(sent) blocks_fetched=\(files.blocksFetched - fetchedBefore) ms=\(ms)")
        }
        do {
            guard head.method == .GET || isHead else {
                // The connection ends with the answer: after a CONNECT or a request with a body
                // the client may send more than the server would read.
                throw Failure(status: .methodNotAllowed, message: "only GET and HEAD", closes: true)
            }
            if URLComponents(string: head.uri)?.path == "/thumb" {
                let (folder, path, size) = try authorizeThumbnail(head.uri)
                logged = "/thumb folder=\(folder) path=\(path) size=\(size)"
                return try await respondThumbnail(head, folder: folder, path: path, size: size, out, status: &status, sent: &sent)
            }
            let isSite = head.uri.hasPrefix("/site/")
            let (folder, path) = isSite ? try authorizeSite(head.uri) : try authorize(head.uri)
            logged = "\(isSite ? "/site" : "/file") folder=\(folder) path=\(path)"
            let entry: RemoteFiles.Entry
            do {
                entry = try files.entry(folder: folder, path: path)
            } catch {
                // A site's directory named without its slash: sent to it, as web servers do, so
                // that its page's relative links resolve inside it.
                if isSite, !path.hasSuffix("/index.html"), (try? files.entry(folder: folder, path: path + "/index.html")) != nil {
                    let target = (URLComponents(string: head.uri)?.percentEncodedPath ?? head.uri) + "/"
                    throw Failure(status: .movedPermanently, message: "moved to \(target)", location: target)
                }
                throw Failure(status: HTTPResponseStatus(statusCode: error.status), message: error.hint)
            }
            var headers = HTTPHeaders()
            if isSite {
                // A site runs its scripts, in an origin of its own (no cookie of this host, no
                // other link's answer).
                headers.add(name: "X-Content-Type-Options", value: "nosniff")
                headers.add(name: "Content-Security-Policy", value: "sandbox allow-scripts allow-forms allow-popups allow-downloads")
            } else {
                Self.addPeerContentHeaders(&headers)
            }
            headers.add(name: "Accept-Ranges", value: "bytes")
            headers.add(name: "ETag", value: entry.etag)
            headers.add(name: "Last-Modified", value: Self.httpDate(Date(timeIntervalSince1970: TimeInterval(entry.global.modifiedS))))
            headers.add(name: "Cache-Control", value: "private, max-age=0")
            // Shown in a browser, saved under its own name (RFC 6266, RFC 8187 for UTF-8 names).
            // download=1 (not signed: it changes how, not what): saved rather than shown.
            let download = URLComponents(string: head.uri)?.queryItems?.contains { $0.name == "download" && $0.value == "1" } == true
            headers.add(name: "Content-Disposition", value: Self.contentDisposition(for: path, attachment: download))
            let type = MIME.type(forPath: path)
            var ranges = HTTPRange.resolve(head.headers.first(name: "Range"), size: entry.size)
            if let ifRange = head.headers.first(name: "If-Range"), ifRange != entry.etag {
                // A changed representation: the whole of the new one, not a piece of it.
                ranges = .full
            }
            switch ranges {
            case .unsatisfiable:
                status = .rangeNotSatisfiable
                headers.add(name: "Content-Range", value: "bytes */\(entry.size)")
                headers.add(name: "Content-Length", value: "0")
                try await out.write(.head(HTTPResponseHead(version: head.version, status: status, headers: headers)))
                try await out.write(.end(nil))
            case .full:
                headers.add(name: "Content-Type", value: type)
                headers.add(name: "Content-Length", value: "\(entry.size)")
                let responseHead = HTTPResponseHead(version: head.version, status: .ok, headers: headers)
                if isHead || entry.size == 0 {
                    try await out.write(.head(responseHead))
                } else {
                    try await Self.streaming(responseHead, out) { send in
                        try await files.read(entry, range: 0...(entry.size - 1), window: readAhead) { data in
                            try await send(data)
                            sent += Int64(data.count)
                        }
                    }
                }
                try await out.write(.end(nil))
            case .ranges(let list) where list.count == 1:
                let r = list[0]
                status = .partialContent
                headers.add(name: "Content-Type", value: type)
                headers.add(name: "Content-Range", value: "bytes \(r.lowerBound)-\(r.upperBound)/\(entry.size)")
                headers.add(name: "Content-Length", value: "\(r.upperBound - r.lowerBound + 1)")
                let responseHead = HTTPResponseHead(version: head.version, status: status, headers: headers)
                if isHead {
                    try await out.write(.head(responseHead))
                } else {
                    try await Self.streaming(responseHead, out) { send in
                        try await files.read(entry, range: r, window: readAhead) { data in
                            try await send(data)
                            sent += Int64(data.count)
                        }
                    }
                }
                try await out.write(.end(nil))
            case .ranges(let list):
                status = .partialContent
                let boundary = "kaiten-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
                let parts = list.map { r in
                    "--\(boundary)\r\nContent-Type: \(type)\r\nContent-Range: bytes \(r.lowerBound)-\(r.upperBound)/\(entry.size)\r\n\r\n"
                }
                let closing = "--\(boundary)--\r\n"
                let length = zip(parts, list).reduce(Int64(closing.utf8.count)) { $0 + Int64($1.0.utf8.count) + ($1.1.upperBound - $1.1.lowerBound + 1) + 2 }
                headers.add(name: "Content-Type", value: "multipart/byteranges; boundary=\(boundary)")
                headers.add(name: "Content-Length", value: "\(length)")
                try await out.write(.head(HTTPResponseHead(version: head.version, status: status, headers: headers)))
                if !isHead {
                    for (part, r) in zip(parts, list) {
                        try await out.write(.body(.byteBuffer(ByteBuffer(string: part))))
                        try await files.read(entry, range: r) { data in
                            try await out.write(.body(.byteBuffer(ByteBuffer(bytes: data))))
                            sent += Int64(data.count)
                        }
                        try await out.write(.body(.byteBuffer(ByteBuffer(string: "\r\n"))))
                    }
                    try await out.write(.body(.byteBuffer(ByteBuffer(string: closing))))
                }
                try await out.write(.end(nil))
            }
            return head.isKeepAlive
        } catch let failure as Failure {
            status = failure.status
            var headers = HTTPHeaders()
            Self.addPeerContentHeaders(&headers)
            let body = failure.message + "\n"
            headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
            headers.add(name: "Content-Length", value: "\(body.utf8.count)")
            if let location = failure.location { headers.add(name: "Location", value: location) }
            if failure.closes { headers.add(name: "Connection", value: "close") }
            try await out.write(.head(HTTPResponseHead(version: head.version, status: status, headers: headers)))
            if !isHead { try await out.write(.body(.byteBuffer(ByteBuffer(string: body)))) }
            try await out.write(.end(nil))
            return head.isKeepAlive && !failure.closes
        } catch let error as StreamError {
            // The head is already out: the body cannot be finished; end the connection.
            status = HTTPResponseStatus(statusCode: error.status)
            log("\(logged): \(error.hint)")
            return false
        }
    }

    /// A thumbnail, made (or found in the cache) by `thumbnails`; 304 for a current If-None-Match.
    func respondThumbnail(
        _ head: HTTPRequestHead, folder: String, path: String, size: Int, _ out: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>,
        status: inout HTTPResponseStatus, sent: inout Int64
    ) async throws -> Bool {
        guard let thumbnails else { throw Failure(status: .notFound, message: "this server makes no thumbnails") }
        let made: (jpeg: [UInt8], etag: String)
        do {
            made = try await thumbnails(folder, path, size)
        } catch let error as StreamError {
            throw Failure(status: HTTPResponseStatus(statusCode: error.status), message: error.hint)
        } catch {
            // The file is there but is no picture this decoder makes one of.
            throw Failure(status: .unprocessableEntity, message: "\(folder)/\(path): \(error)")
        }
        var headers = HTTPHeaders()
        Self.addPeerContentHeaders(&headers)
        headers.add(name: "ETag", value: made.etag)
        // The tag names the content: a thumbnail of it never changes.
        headers.add(name: "Cache-Control", value: "private, max-age=86400")
        if let match = head.headers.first(name: "If-None-Match"), match == made.etag {
            status = .notModified
            try await out.write(.head(HTTPResponseHead(version: head.version, status: status, headers: headers)))
            try await out.write(.end(nil))
            return head.isKeepAlive
        }
        headers.add(name: "Content-Type", value: "image/jpeg")
        headers.add(name: "Content-Length", value: "\(made.jpeg.count)")
        try await out.write(.head(HTTPResponseHead(version: head.version, status: .ok, headers: headers)))
        if head.method != .HEAD {
            try await out.write(.body(.byteBuffer(ByteBuffer(bytes: made.jpeg))))
            sent = Int64(made.jpeg.count)
        }
        try await out.write(.end(nil))
        return head.isKeepAlive
    }

    /// The query of a signed link: a clean path (400), then a valid, unexpired signature (403).
    func signedQuery(_ uri: String, resource: String) throws -> (folder: String, path: String, query: [String: String], exp: Int64, sig: String) {
        guard let components = URLComponents(string: uri), components.path == resource else {
            throw Failure(status: .notFound, message: "not found (the resources are /file and /thumb)")
        }
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] { query[item.name] = item.value ?? "" }
        let folder = query["folder"] ?? ""
        let path = query["path"] ?? ""
        guard !folder.isEmpty, Self.isClean(path) else {
            throw Failure(status: .badRequest, message: "folder and path must name a clean folder-relative file")
        }
        guard let exp = query["exp"].flatMap({ Int64($0) }), let sig = query["sig"] else {
            throw Failure(status: .forbidden, message: "missing signature (make a link with `kaiten url`)")
        }
        guard exp >= Int64(Date().timeIntervalSince1970) else { throw Failure(status: .forbidden, message: "the link has expired") }
        return (folder, path, query, exp, sig)
    }

    func authorizeThumbnail(_ uri: String) throws -> (folder: String, path: String, size: Int) {
        let signed = try signedQuery(uri, resource: "/thumb")
        guard let size = signed.query["size"].flatMap({ Int($0) }), (16...ThumbnailLimits.largest).contains(size) else {
            throw Failure(status: .badRequest, message: "size must be 16 to \(ThumbnailLimits.largest) pixels")
        }
        guard signer.verifyThumbnail(folder: signed.folder, path: signed.path, size: size, expires: signed.exp, signature: signed.sig) else {
            throw Failure(status: .forbidden, message: "bad signature")
        }
        return (signed.folder, signed.path, size)
    }

    /// A site's file: `/site/EXP.DEPTH.SIG/FOLDER/ROOT.../REST`, the signature checked over
    /// the folder, ROOT (DEPTH segments) and the expiry (403), REST a clean name below ROOT (400)
    /// or empty, or ending in `/`, for that directory's index.html.
    func authorizeSite(_ uri: String) throws -> (folder: String, path: String) {
        guard let components = URLComponents(string: uri) else { throw Failure(status: .badRequest, message: "not a site address") }
        let segments = components.percentEncodedPath.split(separator: "/", omittingEmptySubsequences: false).dropFirst(2)
        let token = segments.first?.split(separator: ".") ?? []
        guard token.count == 3, let exp = Int64(token[0]), let depth = Int(token[1]), depth >= 0, depth <= 64, segments.count >= 2 + depth,
            let folder = segments[segments.startIndex + 1].removingPercentEncoding, !folder.isEmpty
        else { throw Failure(status: .forbidden, message: "not a site address (make one with `kaiten ui --site`)") }
        let rootStart = segments.startIndex + 2
        var decoded: [String] = []
        for segment in segments[rootStart...] {
            guard let text = segment.removingPercentEncoding else { throw Failure(status: .badRequest, message: "a badly escaped address") }
            decoded.append(text)
        }
        let root = decoded.prefix(depth).joined(separator: "/")
        guard signer.verifySite(folder: folder, root: root, expires: exp, signature: String(token[2])) else {
            throw Failure(status: .forbidden, message: "bad signature")
        }
        guard exp >= Int64(Date().timeIntervalSince1970) else { throw Failure(status: .forbidden, message: "the site's address has expired") }
        var rest = decoded.dropFirst(depth).joined(separator: "/")
        if rest.isEmpty || rest.hasSuffix("/") { rest += "index.html" }
        let path = root.isEmpty ? rest : root + "/" + rest
        guard Self.isClean(path), Self.isClean(rest) else {
            throw Failure(status: .badRequest, message: "a site's address names a clean file below its directory")
        }
        return (folder, path)
    }

    /// Checks the URL: a clean path (400), then a valid, unexpired signature (403).
    func authorize(_ uri: String) throws -> (folder: String, path: String) {
        let signed = try signedQuery(uri, resource: "/file")
        guard signer.verify(folder: signed.folder, path: signed.path, expires: signed.exp, signature: signed.sig) else {
            throw Failure(status: .forbidden, message: "bad signature")
        }
        return (signed.folder, signed.path)
    }

    /// The one clean-name rule apply uses too: syncthing allows `\` in names on Linux.
    static func isClean(_ path: String) -> Bool {
        SafePath.isClean(path)
    }

    /// `inline; filename*=UTF-8''NAME` with NAME percent-encoded, plus an ASCII fallback.
    static func contentDisposition(for path: String, attachment: Bool = false) -> String {
        let name = (path as NSString).lastPathComponent
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)..<Unicode.Scalar(128)))
        allowed.insert(charactersIn: "!#$&+-.^_`|~")
        let encoded = name.addingPercentEncoding(withAllowedCharacters: allowed) ?? "file"
        let fallback = String(name.unicodeScalars.map { $0.isASCII && $0 != "\"" && $0 != "\\" && $0.value >= 0x20 ? Character($0) : "_" })
        return "\(attachment ? "attachment" : "inline"); filename=\"\(fallback)\"; filename*=UTF-8''\(encoded)"
    }

    /// The request line without its signature, for the log.
    static func redacted(_ uri: String) -> String {
        guard var components = URLComponents(string: uri) else { return uri }
        components.queryItems = components.queryItems?.map { $0.name == "sig" ? URLQueryItem(name: "sig", value: "…") : $0 }
        return components.string ?? uri
    }

    /// One formatter for every response (making one per request costs more than the headers).
    nonisolated(unsafe) private static let httpDates: DateFormatter = {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter
    }()
    private static let httpDatesLock = NSLock()

    /// Runs `body`, writing `responseHead` just before the first bytes it sends: a read that
    /// fails before any (no peer answers, none holds the file) is an error answer with its own
    /// status (503, 502), not a 200 whose body never comes. Once bytes went out, a failure
    /// ends the connection (the caller's StreamError path).
    static func streaming(
        _ responseHead: HTTPResponseHead, _ out: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>,
        _ body: (_ send: (Data) async throws -> Void) async throws -> Void
    ) async throws {
        var headSent = false
        do {
            try await body { data in
                if !headSent {
                    try await out.write(.head(responseHead))
                    headSent = true
                }
                try await out.write(.body(.byteBuffer(ByteBuffer(bytes: data))))
            }
        } catch let error as StreamError where !headSent {
            throw Failure(status: HTTPResponseStatus(statusCode: error.status), message: error.hint)
        }
    }

    /// Every answer carries bytes or names a peer chose: a browser must neither guess another
    /// type for them (`nosniff`: a "photo" that is HTML stays an image) nor run what they hold
    /// in this server's origin (`sandbox`: an .html or .svg file opened from a link is shown in
    /// a unique origin with scripts off; the web page that shares this origin stays safe).
    static func addPeerContentHeaders(_ headers: inout HTTPHeaders) {
        headers.add(name: "X-Content-Type-Options", value: "nosniff")
        headers.add(name: "Content-Security-Policy", value: "sandbox")
    }

    static func httpDate(_ date: Date) -> String {
        httpDatesLock.lock()
        defer { httpDatesLock.unlock() }
        return httpDates.string(from: date)
    }
}

/// Thumbnail sizes a link may ask for.
public enum ThumbnailLimits {
    /// Sushitrain's size, the largest the shared cache holds.
    public static let largest = 255
}

/// Content types by extension: what players and browsers need to pick a decoder.
enum MIME {
    static let types: [String: String] = [
        "mkv": "video/x-matroska", "mp4": "video/mp4", "m4v": "video/mp4", "mov": "video/quicktime", "webm": "video/webm",
        "avi": "video/x-msvideo", "ts": "video/mp2t", "mp3": "audio/mpeg", "m4a": "audio/mp4", "flac": "audio/flac",
        "ogg": "audio/ogg", "opus": "audio/opus", "wav": "audio/wav", "jpg": "image/jpeg", "jpeg": "image/jpeg",
        "png": "image/png", "gif": "image/gif", "webp": "image/webp", "heic": "image/heic", "svg": "image/svg+xml",
        "pdf": "application/pdf", "txt": "text/plain; charset=utf-8", "md": "text/markdown; charset=utf-8",
        "html": "text/html; charset=utf-8", "json": "application/json", "zip": "application/zip", "srt": "application/x-subrip",
        "vtt": "text/vtt", "htm": "text/html; charset=utf-8", "css": "text/css; charset=utf-8",
        "js": "text/javascript; charset=utf-8", "mjs": "text/javascript; charset=utf-8", "wasm": "application/wasm",
        "xml": "application/xml", "csv": "text/csv; charset=utf-8", "ico": "image/x-icon", "avif": "image/avif",
        "woff": "font/woff", "woff2": "font/woff2", "ttf": "font/ttf", "otf": "font/otf",
    ]

    static func type(forPath path: String) -> String {
        types[(path as NSString).pathExtension.lowercased()] ?? "application/octet-stream"
    }
}
