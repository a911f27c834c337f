import Foundation
import KaitenConfig
import KaitenProtocol
import Testing

@testable import KaitenHTTPAPI

/// The endpoints' shapes over a fixed state: the key sets syncthing 2.1.3 answers with
/// (checked against real syncthing in `RESTInteropTests`; here, without a socket).
struct APIRouterTests {
    static let me = try! DeviceID("55TXZAL-GEB4AJL-IDYPCQ2-HQNF7F6-GEHBGKO-TT6EVON-S5KD4FK-V6MQVAX")
    static let peer = try! DeviceID("C27VSZQ-GSBLQRN-AK57PLK-HVMRDS5-Q26UCGH-GL6FSUN-RKXAQXS-M7Q3NQW")

    struct State: APIState {
        var myID: DeviceID { APIRouterTests.me }
        var startTime: Date { Date(timeIntervalSince1970: 1_800_000_000) }
        var guiAddressUsed: String { "127.0.0.1:8384" }
        let config: String
        func configJSON() -> [String: Any] { (try? ConfigFile.parse(data: Data(config.utf8), path: "config.xml").syncthingJSON()) ?? [:] }
        func listeners() -> [APIListener] { [APIListener(address: "tcp://127.0.0.1:22000")] }
        func connections() -> [APIConnection] {
            [APIConnection(deviceID: APIRouterTests.peer, connected: true, address: "127.0.0.1:22001", clientVersion: "v2.1.3", type: "tcp-client",
                crypto: "TLS1.3-TLS_AES_128_GCM_SHA256", startedAt: startTime)]
        }
        func messages() -> [APIMessage] { [APIMessage(when: startTime, level: .warning, message: "a warning")] }
        let events = EventLog()
        func folderSummary(_ folder: String, device: DeviceID?) throws -> APIFolderSummary? { nil }
        func metrics() -> [MetricFamily] { [MetricFamily("kaiten_test", .gauge, help: "a \\ test\nline", [.init([("folder", "a\"b")], 1.5)])] }
        var useCases: (any APIUseCases)? { nil }
        func paths() -> [String: String] { ["config": "/home/k/config.xml"] }
        func deviceStats() -> [DeviceID: APIDeviceStats] { [APIRouterTests.peer: APIDeviceStats(lastSeen: startTime, lastConnectionDuration: 12)] }
        func folderStats() -> [String: APIFolderStats] { ["photos": APIFolderStats(lastScan: startTime, lastFile: ("a.jpg", startTime, false))] }
        func folderErrors(_ folder: String) -> [(path: String, error: String)] { [("b.jpg", "no peer holds it")] }
        func scan(folder: String?, subdirectories: [String]) -> Bool { folder == nil || folder == "photos" }
        func restart() {}
        func shutdown() {}
        func recentRounds() -> [APIRound] { [] }
        var onDemandPort: Int? { nil }
        func onDemandCache() -> (bytes: Int, limit: Int, blocks: Int, fetched: Int) { (0, 8 << 20, 0, 0) }
    }

    static let config = """
        <configuration version="37">
            <folder id="photos" label="Photos" path="/srv/photos" type="sendreceive" rescanIntervalS="3600" fsWatcherEnabled="true">
                <filesystemType>basic</filesystemType>
                <device id="\(peer)" introducedBy=""><encryptionPassword></encryptionPassword></device>
                <minDiskFree unit="%">2</minDiskFree>
                <versioning type="simple"><param key="keep" val="5"></param><cleanupIntervalS>3600</cleanupIntervalS></versioning>
                <maxConflicts>-1</maxConflicts>
            </folder>
            <device id="\(peer)" name="nas" compression="metadata" introducer="false">
                <address>tcp://127.0.0.1:22001</address><address>dynamic</address>
                <paused>false</paused>
            </device>
            <gui enabled="true" tls="false"><address>127.0.0.1:8384</address><apikey>k</apikey></gui>
            <options><listenAddress>tcp://127.0.0.1:22000</listenAddress><relaysEnabled>false</relaysEnabled></options>
        </configuration>
        """

    func get(_ path: String) async throws -> (status: Int, json: Any) {
        let response = await APIRouter(state: State(config: Self.config), version: APIVersion(version: "v0.1.0"))
            .respond(to: APIRequest(method: "GET", uri: path, headers: ["host": "127.0.0.1", "x-api-key": "k"]))
        guard response.contentType.hasPrefix("application/json") else { return (response.status, String(decoding: response.body, as: UTF8.self)) }
        return (response.status, try JSONSerialization.jsonObject(with: Data(response.body)))
    }

    @Test func theConfigurationHasSyncthingsObjectsKeysAndTypes() async throws {
        let config = try #require(try await get("/rest/config").json as? [String: Any])
        #expect(Set(config.keys) == ["version", "folders", "devices", "gui", "ldap", "options", "remoteIgnoredDevices", "defaults"])
        let folder = try #require((config["folders"] as? [[String: Any]])?.first)
        #expect(folder["id"] as? String == "photos" && folder["path"] as? String == "/srv/photos" && folder["fsWatcherEnabled"] as? Bool == true)
        #expect(folder["maxConflicts"] as? Int == -1 && folder["rescanIntervalS"] as? Int == 3600)
        #expect((folder["minDiskFree"] as? [String: Any])?["value"] as? Int == 2 && (folder["minDiskFree"] as? [String: Any])?["unit"] as? String == "%")
        let versioning = try #require(folder["versioning"] as? [String: Any])
        #expect(versioning["type"] as? String == "simple" && (versioning["params"] as? [String: String]) == ["keep": "5"])
        #expect((folder["devices"] as? [[String: Any]])?.map { $0["deviceID"] as? String } == [Self.peer.description])
        #expect(folder.count == 43)
        let device = try #require((config["devices"] as? [[String: Any]])?.first)
        #expect(device["addresses"] as? [String] == ["tcp://127.0.0.1:22001", "dynamic"] && device["name"] as? String == "nas")
        #expect(device["introducer"] as? Bool == false && device["ignoredFolders"] as? [Any] != nil)
        let gui = try #require(config["gui"] as? [String: Any])
        #expect(gui["useTLS"] as? Bool == false && gui["apiKey"] as? String == "k")
        let options = try #require(config["options"] as? [String: Any])
        #expect(options["listenAddresses"] as? [String] == ["tcp://127.0.0.1:22000"] && options["relaysEnabled"] as? Bool == false)
        // The deprecated alias answers the same.
        #expect(NSDictionary(dictionary: try #require(try await get("/rest/system/config").json as? [String: Any])) == NSDictionary(dictionary: config))
        let one = try #require(try await get("/rest/config/folders/photos").json as? [String: Any])
        #expect(one["label"] as? String == "Photos")
        #expect(try await get("/rest/config/folders/nope").status == 404)
        #expect(try await get("/rest/config/devices/\(Self.peer.shortDescription)").status == 404)
        #expect((try await get("/rest/config/devices/\(Self.peer)").json as? [String: Any])?["name"] as? String == "nas")
    }

    @Test func systemEndpointsAnswerWithSyncthingsKeys() async throws {
        let status = try #require(try await get("/rest/system/status").json as? [String: Any])
        #expect(Set(status.keys) == [
            "alloc", "connectionServiceStatus", "cpuPercent", "goroutines", "guiAddressOverridden", "guiAddressUsed", "lastDialStatus", "myID",
            "pathSeparator", "startTime", "sys", "tilde", "uptime", "urVersionMax",
        ])
        #expect(status["myID"] as? String == Self.me.description)
        let connections = try #require(try await get("/rest/system/connections").json as? [String: Any])
        let peer = try #require((connections["connections"] as? [String: Any])?[Self.peer.description] as? [String: Any])
        #expect(peer["connected"] as? Bool == true && peer["clientVersion"] as? String == "v2.1.3" && peer["primary"] is [String: Any])
        let errors = try #require(try await get("/rest/system/error").json as? [String: Any])
        #expect((errors["errors"] as? [[String: Any]])?.first?["message"] as? String == "a warning")
        #expect((try await get("/rest/system/ping").json as? [String: String]) == ["ping": "pong"])
        #expect(try await get("/rest/noauth/health").json as? [String: String] == ["status": "OK"])
        #expect(try await get("/rest/nothing").status == 404)
        #expect(try await get("/rest/noauth/../system/config").status == 404)
    }
}

/// Prometheus's text format, escaped as its parser wants (checked by promtool in
/// RESTInteropTests, here without it).
struct PrometheusTextTests {
    @Test func familiesAreWrittenWithHelpTypeAndEscapedLabels() {
        let text = PrometheusText.render([
            MetricFamily("b_total", .counter, help: "B", [.init([("device", "X")], 3), .init([("device", "Y\\\"\n")], 0)]),
            MetricFamily("a", .gauge, help: "A\nsecond", [.init([], 2.5)]),
        ])
        #expect(text == """
            # HELP a A\\nsecond
            # TYPE a gauge
            a 2.5
            # HELP b_total B
            # TYPE b_total counter
            b_total{device="X"} 3
            b_total{device="Y\\\\\\"\\n"} 0

            """)
    }
}
