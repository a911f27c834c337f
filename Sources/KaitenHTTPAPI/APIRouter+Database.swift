import Foundation
import KaitenIndex
import KaitenProtocol

/// `/rest/db/…` over the index, `/rest/stats/…`, the configuration's writes and Kaiten's own
/// endpoints: each one call on ``APIUseCases``, its answer in syncthing's shape.
extension APIRouter {
    /// syncthing pages need lists by `page` (from 1) and `perpage` (65536 by default).
    struct Page {
        var page = 1
        var perPage = 65536

        init(_ request: APIRequest) throws {
            if let text = request.query["page"], !text.isEmpty {
                guard let value = Int(text), value >= 1 else { throw APIFailure(status: 400, "invalid page: want a number from 1") }
                page = value
            }
            if let text = request.query["perpage"], !text.isEmpty {
                guard let value = Int(text), value >= 1 else { throw APIFailure(status: 400, "invalid perpage: want a number from 1") }
                perPage = value
            }
        }

        func slice<T>(_ items: [T]) -> ArraySlice<T> {
            let start = min(items.count, (page - 1).multipliedReportingOverflow(by: perPage).partialValue)
            return items[start..<min(items.count, start + perPage)]
        }
    }

    func dbRead(_ request: APIRequest, _ useCases: any APIUseCases) throws -> APIResponse {
        guard let folder = request.query["folder"], !folder.isEmpty else {
            // syncthing's words for a missing or unknown folder.
            throw APIFailure(status: 404, "no such folder")
        }
        let page = try Page(request)
        switch request.path {
        case "/rest/db/need":
            let need = try useCases.need(folder: folder, device: nil)
            return .json([
                "progress": [Any](), "queued": [Any](), "rest": page.slice(need).map { Self.fileInfoJSON($0) }, "page": page.page,
                "perpage": page.perPage,
            ])
        case "/rest/db/remoteneed":
            guard let text = request.query["device"], let device = try? DeviceID(text) else {
                throw APIFailure(status: 400, "\"\(request.query["device"] ?? "")\": not a device ID")
            }
            let need = try useCases.need(folder: folder, device: device)
            return .json(["files": page.slice(need).map { Self.fileInfoJSON($0) }, "page": page.page, "perpage": page.perPage])
        case "/rest/db/localchanged":
            let changed = try useCases.localChanges(folder: folder)
            return .json(["files": page.slice(changed).map(Self.fileInfoJSON), "page": page.page, "perpage": page.perPage])
        case "/rest/db/browse":
            var levels: Int?
            if let text = request.query["levels"], !text.isEmpty, let value = Int(text), value >= 0 { levels = value }
            let prefix = request.query["prefix"] ?? ""
            let entries: [GlobalEntry]
            do {
                entries = try useCases.browse(folder: folder, prefix: prefix, levels: levels)
            } catch let failure as APIFailure where failure.status == 404 && !prefix.isEmpty {
                // syncthing answers a prefix that is not a directory with an empty tree.
                entries = []
            }
            return .json(Self.tree(entries, under: prefix.trimmingCharacters(in: CharacterSet(charactersIn: "/"))))
        case "/rest/db/file":
            let versions = try useCases.file(folder: folder, path: request.query["file"] ?? "")
            let availability = versions.holders.filter { $0 != state.myID }.map { ["id": $0.description, "fromTemporary": false] as [String: Any] }
            let never = ["real": APITime.never, "virtual": APITime.never]
            return .json([
                "availability": availability.isEmpty ? NSNull() : availability as Any,
                "global": versions.global.map { Self.fileInfoJSON($0) } ?? NSNull(),
                "local": versions.local.map(Self.fileInfoJSON) ?? NSNull(),
                // syncthing 1.x: the mtime its file system wrapper keeps; Kaiten keeps none.
                "mtime": ["err": NSNull(), "value": never] as [String: Any],
            ])
        case "/rest/db/ignores":
            let (lines, error) = try useCases.ignores(folder: folder)
            return .json(["ignore": lines, "expanded": lines, "error": error.map { $0 as Any } ?? NSNull()])
        case "/rest/folder/errors":
            // What the last rounds could not do in this folder, as syncthing lists pull errors.
            let errors = state.folderErrors(folder).map { ["path": $0.path, "error": $0.error] }
            return .json(["folder": folder, "errors": page.slice(errors).map { $0 }, "page": page.page, "perpage": page.perPage])
        default:
            return .notFound()
        }
    }

    /// `db/browse`'s nested list: each entry's name within its directory, directories with
    /// their `children` when they were listed.
    static func tree(_ entries: [GlobalEntry], under prefix: String) -> [[String: Any]] {
        final class Node {
            var entry: GlobalEntry?
            var children: [String: Node] = [:]
        }
        let root = Node()
        let skip = prefix.isEmpty ? 0 : WireName.components(prefix).count
        for entry in entries {
            var node = root
            for part in WireName.components(entry.path).dropFirst(skip) {
                let name = String(part)
                if node.children[name] == nil { node.children[name] = Node() }
                node = node.children[name]!
            }
            node.entry = entry
        }
        func render(_ node: Node) -> [[String: Any]] {
            node.children.sorted { $0.key < $1.key }.compactMap { name, child in
                guard let file = child.entry?.file else { return nil }
                var object: [String: Any] = [
                    "name": name, "modTime": APITime.string(nanoseconds: file.modifiedS * 1_000_000_000 + Int64(file.modifiedNs)),
                    "size": file.size, "type": typeName(file.type),
                ]
                if file.type == .directory, !child.children.isEmpty { object["children"] = render(child) }
                return object
            }
        }
        return render(root)
    }

    /// A file's version as syncthing's `jsonFileInfo` writes it (every key of 1.19.2 and 2.1.3).
    static func fileInfoJSON(_ entry: FileEntry) -> [String: Any] {
        fileInfoJSON(APILocalVersion(entry))
    }

    static func fileInfoJSON(_ file: APILocalVersion) -> [String: Any] {
        [
            "name": file.name, "type": typeName(file.type), "size": file.size, "permissions": String(format: "%04o", file.permissions & 0o7777),
            "modified": APITime.string(nanoseconds: file.modifiedNs), "modifiedBy": DeviceID.shortIDString(file.modifiedBy),
            "deleted": file.deleted, "invalid": file.invalid, "ignored": false, "mustRescan": false, "noPermissions": false,
            "sequence": file.sequence, "numBlocks": file.blockCount, "localFlags": 0,
            "version": file.version.counters.map { "\(DeviceID.shortIDString($0.id)):\($0.value)" },
            "blocksHash": NSNull(), "previousBlocksHash": NSNull(),
            "platform": ["Unix": NSNull(), "Windows": NSNull(), "Linux": NSNull(), "Darwin": NSNull(), "FreeBSD": NSNull(), "NetBSD": NSNull()],
        ]
    }

    static func typeName(_ type: BEPFileInfoType) -> String {
        switch type {
        case .file: "FILE_INFO_TYPE_FILE"
        case .directory: "FILE_INFO_TYPE_DIRECTORY"
        case .symlinkFile: "FILE_INFO_TYPE_SYMLINK_FILE"
        case .symlinkDirectory: "FILE_INFO_TYPE_SYMLINK_DIRECTORY"
        default: "FILE_INFO_TYPE_SYMLINK"
        }
    }

    func deviceStatsJSON() -> [String: Any] {
        var stats: [String: Any] = [:]
        for (device, seen) in state.deviceStats() {
            stats[device.description] = [
                "lastSeen": seen.lastSeen.map(APITime.string) ?? "1970-01-01T00:00:00Z", "lastConnectionDurationS": seen.lastConnectionDuration,
            ]
        }
        return stats
    }

    func folderStatsJSON() -> [String: Any] {
        var stats: [String: Any] = [:]
        for (folder, folderStats) in state.folderStats() {
            stats[folder] = [
                "lastFile": [
                    "at": folderStats.lastFile.map { APITime.string($0.at) } ?? APITime.never, "filename": folderStats.lastFile?.path ?? "",
                    "deleted": folderStats.lastFile?.deleted ?? false,
                ] as [String: Any],
                "lastScan": folderStats.lastScan.map(APITime.string) ?? APITime.never,
            ]
        }
        return stats
    }

    // MARK: Configuration writes

    /// `PUT`/`PATCH`/`DELETE /rest/config/folders/ID` and `…/devices/ID`, `POST`/`PUT` of
    /// `/rest/config/folders` and `/rest/config/devices` (one object or a list).
    func configWrite(_ request: APIRequest, _ useCases: any APIUseCases) throws -> APIResponse {
        let isFolder = request.path.hasPrefix("/rest/config/folders")
        let base = isFolder ? "/rest/config/folders" : "/rest/config/devices"
        let rest = request.path.dropFirst(base.count)
        let key = isFolder ? "id" : "deviceID"
        func apply(_ id: String, _ object: [String: Any], replace: Bool) throws {
            if isFolder {
                guard !id.isEmpty else { throw APIFailure(status: 400, "folder has empty ID") }
                try useCases.putFolder(id: id, object: object, replace: replace)
            } else {
                guard let device = try? DeviceID(id) else { throw APIFailure(status: 400, "\"\(id)\": not a device ID") }
                try useCases.putDevice(id: device, object: object, replace: replace)
            }
        }
        if rest.isEmpty || rest == "/" {
            guard request.method == "POST" || request.method == "PUT" else { return .text("Method Not Allowed", status: 405) }
            let body = try Self.jsonBody(request)
            let objects: [[String: Any]]
            if let list = body as? [[String: Any]] {
                objects = list
            } else if let one = body as? [String: Any] {
                objects = [one]
            } else {
                throw APIFailure(status: 400, "want a JSON object or a list of objects")
            }
            for object in objects { try apply(object[key] as? String ?? "", object, replace: true) }
            return .empty
        }
        guard rest.hasPrefix("/") else { return .notFound() }
        let id = String(rest.dropFirst())
        switch request.method {
        case "PUT", "PATCH":
            guard let object = try Self.jsonBody(request) as? [String: Any] else { throw APIFailure(status: 400, "want a JSON object") }
            try apply(id, object, replace: request.method == "PUT")
        case "DELETE":
            if isFolder {
                try useCases.removeFolder(id: id)
            } else {
                guard let device = try? DeviceID(id) else { throw APIFailure(status: 400, "\"\(id)\": not a device ID") }
                try useCases.removeDevice(id: device)
            }
        default:
            return .text("Method Not Allowed", status: 405)
        }
        return .empty
    }

    static func jsonBody(_ request: APIRequest) throws -> Any {
        do {
            return try JSONSerialization.jsonObject(with: Data(request.body))
        } catch {
            throw APIFailure(status: 400, "the body is not JSON: \(request.body.isEmpty ? "it is empty" : "\(error)")")
        }
    }

    // MARK: Kaiten's own

    /// `/rest/kaiten/…`: the selection, the plan, conflicts, last copies and the on-demand cache.
    func kaiten(_ request: APIRequest, _ useCases: any APIUseCases) async throws -> APIResponse {
        let folders = (request.query["folder"] ?? "").split(separator: ",").map(String.init)
        func folder() throws -> String {
            guard folders.count == 1 else { throw APIFailure(status: 400, "name one folder: ?folder=ID") }
            return folders[0]
        }
        func document(_ data: Data) -> APIResponse { APIResponse(status: 200, contentType: "application/json; charset=utf-8", body: Array(data)) }
        func strings(_ object: [String: Any], _ key: String) throws -> [String] {
            guard let list = object[key] as? [String] else { throw APIFailure(status: 400, "\"\(key)\" must be a list of paths") }
            return list
        }
        switch (request.method, request.path) {
        case ("GET", "/rest/kaiten/selection"): return document(try useCases.selection(folder: try folder()))
        case ("PUT", "/rest/kaiten/selection"):
            // The selection file's text, as a body of text/plain or as {"text": …} in JSON.
            var text = String(decoding: request.body, as: UTF8.self)
            if request.header("content-type")?.hasPrefix("application/json") == true {
                guard let object = try Self.jsonBody(request) as? [String: Any], let given = object["text"] as? String else {
                    throw APIFailure(status: 400, "want {\"text\": \"the selection file\"}")
                }
                text = given
            }
            return document(try useCases.replaceSelection(folder: try folder(), text: text, force: request.query["force"] == "true"))
        case ("POST", "/rest/kaiten/select"), ("POST", "/rest/kaiten/deselect"):
            guard let object = try Self.jsonBody(request) as? [String: Any] else { throw APIFailure(status: 400, "want {\"paths\": [...]}") }
            let paths = try strings(object, "paths")
            if request.path.hasSuffix("/select") {
                return document(try useCases.select(folder: try folder(), paths: paths, force: object["force"] as? Bool ?? false))
            }
            return document(try useCases.deselect(folder: try folder(), paths: paths))
        case ("GET", "/rest/kaiten/plan"): return document(try await useCases.plan(folders: folders))
        case ("GET", "/rest/kaiten/conflicts"): return document(try await useCases.conflicts(folders: folders))
        case ("POST", "/rest/kaiten/resolve"):
            guard let object = try Self.jsonBody(request) as? [String: Any], let path = object["path"] as? String,
                let choice = object["choice"] as? String
            else { throw APIFailure(status: 400, "want {\"path\": …, \"choice\": \"select|keep|delete-local|use-global\"}") }
            return document(try useCases.resolve(folder: try folder(), path: path, choice: choice))
        case ("GET", "/rest/kaiten/lastcopies"): return document(try useCases.lastCopies(folders: folders))
        case ("GET", "/rest/kaiten/search"):
            // q (glob or text), type, min/max (bytes), after/before (seconds since 1970), limit.
            func number(_ key: String) throws -> Int64? {
                guard let text = request.query[key], !text.isEmpty else { return nil }
                guard let value = Int64(text), value >= 0 else { throw APIFailure(status: 400, "\(key) must be a whole number ≥ 0, not \"\(text)\"") }
                return value
            }
            var query = SearchQuery()
            query.text = request.query["q"] ?? ""
            query.type = request.query["type"].flatMap { $0.isEmpty ? nil : $0 }
            query.minSize = try number("min")
            query.maxSize = try number("max")
            query.modifiedAfter = try number("after")
            query.modifiedBefore = try number("before")
            if let limit = try number("limit") { query.limit = Int(min(limit, Int64(SearchQuery.maximumLimit))) }
            return document(try useCases.search(folder: try folder(), query: query))
        case ("GET", "/rest/kaiten/link"):
            guard let path = request.query["path"], !path.isEmpty else { throw APIFailure(status: 400, "want path=FILE") }
            var thumbnail: Int?
            if let size = request.query["thumb"], !size.isEmpty {
                guard let pixels = Int(size), (16...255).contains(pixels) else { throw APIFailure(status: 400, "thumb must be 16 to 255 pixels, not \"\(size)\"") }
                thumbnail = pixels
            }
            return document(try useCases.link(folder: try folder(), path: path, thumbnail: thumbnail))
        case ("GET", "/rest/kaiten/thumbs"):
            let size = request.query["size"].flatMap { Int($0) } ?? 255
            guard (16...255).contains(size) else { throw APIFailure(status: 400, "size must be 16 to 255 pixels") }
            return document(try useCases.thumbnailLinks(folder: try folder(), directory: request.query["dir"] ?? "", size: size))
        case ("GET", "/rest/kaiten/ls"): return document(try useCases.listing(folder: try folder(), directory: request.query["dir"] ?? ""))
        case ("POST", "/rest/kaiten/apply"):
            // The plan the page showed, applied as a saved plan is (stale if things moved).
            return document(try await useCases.apply(plan: Data(request.body)))
        case ("GET", "/rest/kaiten/rounds"):
            return .json(state.recentRounds().map { round -> [String: Any] in
                var object: [String: Any] = [
                    "number": round.number, "at": round.at, "planned": round.planned, "applied": round.applied, "failed": round.failed,
                    "pending": round.pending, "conflicts": round.conflicts,
                ]
                if let error = round.error { object["error"] = error }
                return object
            })
        case ("GET", "/rest/kaiten/apply/progress"): return document(try useCases.applyProgress())
        case ("GET", "/rest/kaiten/cache"):
            let cache = state.onDemandCache()
            return .json(["bytes": cache.bytes, "limit": cache.limit, "blocks": cache.blocks, "fetchedBlocks": cache.fetched])
        default:
            return .notFound()
        }
    }
}
