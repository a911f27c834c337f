import Foundation
import KaitenProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Answers a request allowed through ``APIAccess``: syncthing's endpoints with syncthing's JSON
/// shapes (the keys syncthing 2.1.3 answers with, a superset of 1.19.2's), over ``APIState``.
public struct APIRouter: Sendable {
    public let state: any APIState
    public let version: APIVersion

    public init(state: any APIState, version: APIVersion) {
        self.state = state
        self.version = version
    }

    public func respond(to request: APIRequest) async -> APIResponse {
        // The on-demand server's signed links, for a page that is not on loopback itself (it
        // cannot reach that server): passed on as they are, the link's signature checked there.
        if request.method == "GET" || request.method == "HEAD", request.uri.hasPrefix("/ondemand/") {
            guard let port = state.onDemandPort else { return .text("no on-demand server runs", status: 503) }
            var response = APIResponse(status: 200, contentType: "", body: [])
            response.forward = .init(port: port, uri: String(request.uri.dropFirst("/ondemand".count)))
            return response
        }
        let route = (request.method, request.path)
        switch route {
        case ("GET", "/rest/noauth/health"): return .json(["status": "OK"])
        case ("GET", "/"):
            // A browser's first request: where its CSRF token comes from (the access check adds
            // it); what to do here is said, nothing of the device.
            let page = """
                <!doctype html><meta charset="utf-8"><title>Kaiten</title>
                <p>Kaiten \(version.version) answers syncthing's REST API here (<code>/rest/…</code>, <code>/metrics</code>);
                see Docs/rest.md. Tools use the API key of config.xml.</p>

                """
            return APIResponse(status: 200, contentType: "text/html; charset=utf-8", body: Array(page.utf8))
        case ("GET", "/rest/system/ping"), ("POST", "/rest/system/ping"): return .json(["ping": "pong"])
        case ("GET", "/rest/system/version"): return .json(versionJSON())
        case ("GET", "/rest/system/status"): return .json(statusJSON())
        case ("GET", "/rest/system/connections"): return .json(connectionsJSON())
        case ("GET", "/rest/system/discovery"): return .json([String: Any]())
        case ("GET", "/rest/system/error"):
            let errors = state.messages().filter { $0.level != .info }
            return .json(["errors": errors.isEmpty ? NSNull() : errors.map(Self.messageJSON) as Any])
        case ("GET", "/rest/system/log"):
            return .json(["messages": state.messages().map(Self.messageJSON)])
        case ("GET", "/rest/system/paths"):
            // syncthing's keys; what Kaiten has no file for is "".
            var paths: [String: Any] = [:]
            for key in Self.pathKeys { paths[key] = "" }
            return .json(paths.merging(state.paths()) { _, given in given })
        case ("GET", "/rest/events"), ("GET", "/rest/events/disk"): return await events(request)
        case ("GET", "/rest/db/status"): return dbStatus(request)
        case ("GET", "/rest/db/completion"): return dbCompletion(request)
        case ("GET", "/rest/db/need"), ("GET", "/rest/db/remoteneed"), ("GET", "/rest/db/localchanged"), ("GET", "/rest/db/browse"),
            ("GET", "/rest/db/file"), ("GET", "/rest/db/ignores"), ("GET", "/rest/folder/errors"):
            return await answering { try dbRead(request, $0) }
        case ("POST", "/rest/db/ignores"):
            return .text(
                "Kaiten writes .stignore from the selection file: change what is kept with PUT /rest/kaiten/selection (or kaiten select)",
                status: 501)
        case ("POST", "/rest/db/scan"):
            let folder = request.query["folder"].flatMap { $0.isEmpty ? nil : $0 }
            let subdirectories = request.query["sub"].map { [$0] } ?? []
            return state.scan(folder: folder, subdirectories: subdirectories) ? .empty : .text("no such folder", status: 500)
        case ("GET", "/rest/stats/device"): return .json(deviceStatsJSON())
        case ("GET", "/rest/stats/folder"): return .json(folderStatsJSON())
        case ("POST", "/rest/system/pause"), ("POST", "/rest/system/resume"):
            return await answering { useCases in
                var devices: [DeviceID]?
                if let text = request.query["device"], !text.isEmpty {
                    guard let id = try? DeviceID(text) else { throw APIFailure(status: 400, "\"\(text)\": not a device ID") }
                    devices = [id]
                }
                try useCases.setPaused(request.path.hasSuffix("/pause"), devices: devices)
                return .empty
            }
        case ("POST", "/rest/system/restart"):
            var answer = APIResponse.json(["ok": "restarting"])
            answer.afterwards = .restart
            return answer
        case ("POST", "/rest/system/shutdown"):
            var answer = APIResponse.json(["ok": "shutting down"])
            answer.afterwards = .shutdown
            return answer
        case ("GET", "/rest/system/pause"), ("GET", "/rest/system/resume"), ("GET", "/rest/system/restart"), ("GET", "/rest/system/shutdown"),
            ("GET", "/rest/db/scan"):
            return .text("Method Not Allowed", status: 405)
        case ("GET", "/metrics"):
            return APIResponse(status: 200, contentType: PrometheusText.contentType, body: Array(PrometheusText.render(state.metrics()).utf8))
        case ("GET", "/rest/config"), ("GET", "/rest/system/config"): return .json(state.configJSON())
        case ("GET", "/rest/config/restart-required"): return .json(["requiresRestart": false])
        case ("GET", "/rest/config/folders"): return .json(state.configJSON()["folders"] ?? [Any]())
        case ("GET", "/rest/config/devices"): return .json(state.configJSON()["devices"] ?? [Any]())
        case ("GET", "/rest/config/options"), ("GET", "/rest/config/gui"), ("GET", "/rest/config/ldap"), ("GET", "/rest/config/defaults/folder"),
            ("GET", "/rest/config/defaults/device"), ("GET", "/rest/config/defaults/ignores"):
            return .json(configPart(request.path) ?? [String: Any]())
        case ("PUT", "/rest/config"), ("POST", "/rest/system/config"):
            return await answering { useCases in
                guard let object = try Self.jsonBody(request) as? [String: Any] else { throw APIFailure(status: 400, "want a JSON object") }
                try useCases.replaceConfiguration(object)
                return .empty
            }
        case ("PUT", "/rest/config/gui"), ("PATCH", "/rest/config/gui"), ("PUT", "/rest/config/options"), ("PATCH", "/rest/config/options"):
            return await answering { useCases in
                guard let object = try Self.jsonBody(request) as? [String: Any] else { throw APIFailure(status: 400, "want a JSON object") }
                try useCases.patchSection(String(request.path.dropFirst("/rest/config/".count)), object: object)
                return .empty
            }
        case ("POST", "/rest/db/override"), ("POST", "/rest/db/revert"):
            return .text(
                "Kaiten does not override or revert a folder: what is sent and what is pulled follow the selection and the plan (kaiten plan, kaiten apply)",
                status: 501)
        default:
            if request.path.hasPrefix("/rest/config/folders") || request.path.hasPrefix("/rest/config/devices") {
                if request.method == "GET" { return configEntry(request.path) }
                return await answering { try configWrite(request, $0) }
            }
            if request.path.hasPrefix("/rest/kaiten/") { return await answering { try await kaiten(request, $0) } }
            if request.method == "GET", let page = UIPage.asset(request.path) { return page }
            return .notFound()
        }
    }

    /// The answer of a use case, or its refusal (501 when this server has none to call).
    private func answering(_ body: (any APIUseCases) async throws -> APIResponse) async -> APIResponse {
        guard let useCases = state.useCases else { return .text("not served by this process", status: 501) }
        do {
            return try await body(useCases)
        } catch let failure as APIFailure {
            return .text(failure.message, status: failure.status)
        } catch {
            return .text("\(error)", status: 500)
        }
    }

    /// `/rest/system/paths`' keys (2.1.3's; 1.19.2 has no such endpoint).
    static let pathKeys = [
        "auditLog", "baseDir-config", "baseDir-data", "baseDir-userHome", "certFile", "config", "database", "defFolder", "guiAssets",
        "httpsCertFile", "httpsKeyFile", "keyFile", "legacyDatabase", "lockFile", "logFile", "panicLog",
    ]

    /// The longest a poll waits, whatever it asks.
    static let longestPoll: Duration = .seconds(3600)

    /// `/rest/events[/disk]?since=N&limit=N&timeout=S&events=A,B`: what happened after `since`,
    /// waiting up to `timeout` (60 s) for something when nothing did.
    private func events(_ request: APIRequest) async -> APIResponse {
        func number(_ name: String, _ fallback: Int) -> Int? {
            guard let text = request.query[name], !text.isEmpty else { return fallback }
            return Int(text)
        }
        guard let since = number("since", 0), since >= 0 else { return .text("invalid since: want a number", status: 400) }
        guard let limit = number("limit", 0) else { return .text("invalid limit: want a number", status: 400) }
        guard let timeout = number("timeout", 60), timeout >= 0 else { return .text("invalid timeout: want seconds", status: 400) }
        var types: Set<String>?
        if request.path == "/rest/events/disk" {
            types = EventLog.diskTypes
        } else if let names = request.query["events"], !names.isEmpty {
            types = Set(names.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        }
        let found = await state.events.events(
            since: since, types: types, limit: limit > 0 ? limit : nil, timeout: min(.seconds(timeout), Self.longestPoll))
        return APIResponse(status: 200, contentType: "application/json; charset=utf-8", body: EventLog.json(found))
    }

    struct Refusal: Error {
        let response: APIResponse
    }

    /// A folder's summary, or the answer that says why there is none (404: no such folder).
    private func folderSummary(_ folder: String, device: DeviceID?) -> Result<APIFolderSummary, Refusal> {
        do {
            guard let found = try state.folderSummary(folder, device: device) else {
                return .failure(Refusal(response: .notFound("no folder with the ID \(folder)")))
            }
            return .success(found)
        } catch {
            return .failure(Refusal(response: .text("\(error)", status: 500)))
        }
    }

    /// `/rest/db/status?folder=F`: the folder's counts, need in Kaiten's meaning.
    private func dbStatus(_ request: APIRequest) -> APIResponse {
        guard let folder = request.query["folder"], !folder.isEmpty else { return .text("missing folder", status: 400) }
        let summary: APIFolderSummary
        switch folderSummary(folder, device: nil) {
        case .success(let found): summary = found
        case .failure(let refusal): return refusal.response
        }
        return .json(Self.statusJSON(summary, myID: state.myID))
    }

    /// A folder's `db/status` (and the FolderSummary event's `summary`).
    public static func statusJSON(_ summary: APIFolderSummary, myID: DeviceID) -> [String: Any] {
        let sequence = summary.sequences[myID] ?? 0
        var remote: [String: Any] = [:]
        for (device, value) in summary.sequences where device != myID { remote[device.description] = value }
        let zero = APIFolderSummary.Counts()
        var body: [String: Any] = [
            "errors": 0, "pullErrors": 0, "invalid": "", "error": "", "watchError": "", "ignorePatterns": false,
            "state": summary.state, "stateChanged": summary.stateChanged.map(APITime.string) ?? APITime.never,
            "version": sequence, "sequence": sequence, "remoteSequence": remote,
            "inSyncFiles": max(0, summary.global.files - summary.need.files),
            "inSyncBytes": max(0, summary.global.bytes - summary.need.bytes),
        ]
        for (scope, counts) in [("global", summary.global), ("local", summary.local), ("need", summary.need), ("receiveOnlyChanged", zero)] {
            body[scope + "Files"] = counts.files
            body[scope + "Directories"] = counts.directories
            body[scope + "Symlinks"] = counts.symlinks
            body[scope + (scope == "need" || scope == "receiveOnlyChanged" ? "Deletes" : "Deleted")] = counts.deleted
            body[scope + "Bytes"] = counts.bytes
            body[scope == "receiveOnlyChanged" ? "receiveOnlyTotalItems" : scope + "TotalItems"] = counts.items
        }
        return body
    }

    /// `/rest/db/completion[?folder=F][&device=D]`: how much of what is wanted is had; without
    /// a device, this one (its selection), without a folder, every folder together.
    private func dbCompletion(_ request: APIRequest) -> APIResponse {
        var device: DeviceID?
        if let text = request.query["device"], !text.isEmpty {
            guard let id = try? DeviceID(text) else { return .text("invalid device ID \(text)", status: 400) }
            device = id == state.myID ? nil : id
        }
        let folders: [String]
        if let folder = request.query["folder"], !folder.isEmpty {
            folders = [folder]
        } else {
            folders = (state.configJSON()["folders"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
        }
        var summaries: [APIFolderSummary] = []
        for folder in folders {
            switch folderSummary(folder, device: device) {
            case .success(let found): summaries.append(found)
            case .failure(let refusal): return refusal.response
            }
        }
        return .json(Self.completionJSON(summaries, remote: device != nil, device: device ?? state.myID))
    }

    /// `db/completion` of one folder or several together (and the FolderCompletion event's
    /// data, without its folder and device).
    public static func completionJSON(_ summaries: [APIFolderSummary], remote: Bool, device: DeviceID? = nil) -> [String: Any] {
        var global = APIFolderSummary.Counts()
        var need = APIFolderSummary.Counts()
        var sequence: Int64 = 0
        var remoteState = remote ? "valid" : "unknown"
        for summary in summaries {
            global.files += summary.global.files
            global.directories += summary.global.directories
            global.symlinks += summary.global.symlinks
            global.bytes += summary.global.bytes
            need.files += summary.need.files
            need.directories += summary.need.directories
            need.symlinks += summary.need.symlinks
            need.deleted += summary.need.deleted
            need.bytes += summary.need.bytes
            if let device { sequence = max(sequence, summary.sequences[device] ?? 0) }
            if remote && summary.remoteState != "valid" { remoteState = summary.remoteState }
        }
        let completions = summaries.map(\.completion)
        let completion = summaries.count == 1 ? completions[0] : (need.items == 0 ? 100 : min(95, completions.reduce(0, +) / Double(max(1, completions.count))))
        return [
            "completion": completion, "globalBytes": global.bytes, "globalItems": global.items - global.deleted, "needBytes": need.bytes,
            "needDeletes": need.deleted, "needItems": need.files + need.directories + need.symlinks, "remoteState": remoteState,
            "sequence": sequence,
        ]
    }

    private func configPart(_ path: String) -> Any? {
        let parts = path.dropFirst("/rest/config/".count).split(separator: "/").map(String.init)
        var value: Any? = state.configJSON()
        for part in parts { value = (value as? [String: Any])?[part] }
        return value
    }

    /// `/rest/config/folders/ID` and `/rest/config/devices/ID`.
    private func configEntry(_ path: String) -> APIResponse {
        let isFolder = path.hasPrefix("/rest/config/folders/")
        let id = String(path.dropFirst(isFolder ? "/rest/config/folders/".count : "/rest/config/devices/".count))
        let list = state.configJSON()[isFolder ? "folders" : "devices"] as? [[String: Any]] ?? []
        let key = isFolder ? "id" : "deviceID"
        let wanted = isFolder ? id : ((try? DeviceID(id))?.description ?? id)
        guard let entry = list.first(where: { ($0[key] as? String) == wanted }) else {
            return .notFound(isFolder ? "no folder with the ID \(id)" : "no device with the ID \(id)")
        }
        return .json(entry)
    }

    private func versionJSON() -> [String: Any] {
        var system = utsname()
        uname(&system)
        let machine = withUnsafeBytes(of: &system.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let arch = ["x86_64": "amd64", "aarch64": "arm64"][machine] ?? machine
        return [
            "arch": arch, "os": "linux", "codename": "Kaiten", "container": false, "date": "", "extra": "kaiten",
            "isBeta": false, "isCandidate": false, "isRelease": true,
            "longVersion": "kaiten \(version.version) (swift linux-\(arch))", "stamp": "", "tags": ["kaiten"], "user": "",
            "version": version.version,
        ]
    }

    private func statusJSON() -> [String: Any] {
        var services: [String: Any] = [:]
        for listener in state.listeners() {
            services[listener.address] = [
                "error": listener.error.map { $0 as Any } ?? NSNull(),
                "lanAddresses": [listener.address], "wanAddresses": [listener.address],
            ]
        }
        return [
            "alloc": Self.residentBytes(), "sys": Self.residentBytes(), "connectionServiceStatus": services, "cpuPercent": 0,
            "goroutines": 0, "guiAddressOverridden": false, "guiAddressUsed": state.guiAddressUsed, "lastDialStatus": [String: Any](),
            "myID": state.myID.description, "pathSeparator": "/", "startTime": APITime.string(state.startTime),
            "tilde": ProcessInfo.processInfo.environment["HOME"] ?? "", "uptime": Int(Date().timeIntervalSince(state.startTime)),
            "urVersionMax": 3,
        ]
    }

    private func connectionsJSON() -> [String: Any] {
        let now = APITime.string(Date())
        var connections: [String: Any] = [:]
        var totalIn: Int64 = 0
        var totalOut: Int64 = 0
        for connection in state.connections() {
            totalIn += connection.inBytesTotal
            totalOut += connection.outBytesTotal
            let link: [String: Any] = [
                "at": connection.connected ? now : APITime.never, "inBytesTotal": connection.inBytesTotal,
                "outBytesTotal": connection.outBytesTotal, "startedAt": connection.startedAt.map(APITime.string) ?? APITime.never,
                "address": connection.address, "type": connection.type, "crypto": connection.crypto,
                "isLocal": connection.connected && !connection.type.hasPrefix("relay"),
            ]
            var entry = link.merging(["connected": connection.connected, "paused": connection.paused, "clientVersion": connection.clientVersion]) { a, _ in a }
            // syncthing 2.x: the connection carrying the traffic, when there is one.
            if connection.connected { entry["primary"] = link }
            connections[connection.deviceID.description] = entry
        }
        return [
            "connections": connections,
            "total": ["at": now, "inBytesTotal": totalIn, "outBytesTotal": totalOut],
        ]
    }

    static func messageJSON(_ message: APIMessage) -> [String: Any] {
        ["when": APITime.string(message.when), "message": message.message, "level": message.level.rawValue]
    }

    /// This process's resident memory (`/proc/self/statm`), what syncthing's `alloc`/`sys` approximate.
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let pages = text.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
