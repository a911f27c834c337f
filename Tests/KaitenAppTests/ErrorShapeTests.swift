import KaitenApp
import KaitenConfig
import KaitenErrors
import KaitenFiles
import KaitenIndex
import KaitenMedia
import KaitenPeer
import KaitenProtocol
import KaitenScan
import KaitenSelection
import KaitenService
import KaitenStream
import KaitenTransfer
import Testing

/// Every error Kaiten shows has one shape: where, and what. The line a person reads is the two
/// joined, as each error said it before it had the shape; a front-end that shows errors as data
/// takes the parts.
@Suite struct ErrorShapeTests {
    @Test func eachErrorSaysWhereAndWhatInOneLine() throws {
        let deviceError = try #require(throws: DeviceIDError.self) { try DeviceID("ABC") }
        let cases: [(any KaitenError, location: String?, line: String)] = [
            (ConfigError(.invalidValue, file: "/h/config.xml", line: 12, "bad value"), "/h/config.xml:12", "/h/config.xml:12: bad value"),
            (ConfigError(.missingFile, file: "/h/cert.pem", "missing"), "/h/cert.pem", "/h/cert.pem: missing"),
            (IndexLogError(.corruptRecord, file: "/h/index/f.log", offset: 4096, "torn record"), "/h/index/f.log at byte 4096",
             "/h/index/f.log at byte 4096: torn record"),
            (IndexLogError(.io, file: "/h/index/f.log", "cannot open"), "/h/index/f.log", "/h/index/f.log: cannot open"),
            (PeerError(.timeout, peer: "ABCDEFG", "no answer"), "peer ABCDEFG", "peer ABCDEFG: no answer"),
            (SelectionError(.badPattern, file: "/h/selections/f.txt", line: 3, "bad"), "/h/selections/f.txt:3", "/h/selections/f.txt:3: bad"),
            (SelectionError(.badPattern, file: "argument", line: 0, "bad"), nil, "bad"),
            (ScanError(.markerMissing, path: "/data/f", ".stfolder is missing"), "/data/f", "/data/f: .stfolder is missing"),
            (ApplyError(.noSpace, path: "a.iso", "not enough free space"), "a.iso", "a.iso: not enough free space"),
            (ApplyError(.locked, path: "", "another apply runs"), nil, "another apply runs"),
            (FileWriteError(file: "/h/x", message: "read-only"), "/h/x", "/h/x: read-only"),
            (ServiceError("no control socket"), nil, "no control socket"),
            (MediaError("no helper"), nil, "no helper"),
            (ArgumentError("--max-delete: not a number"), nil, "--max-delete: not a number"),
            (deviceError, nil, "invalid device ID \"ABC\": 3 characters, want 56 (or 52 without check characters)"),
        ]
        for (error, location, line) in cases {
            #expect(error.location == location, "\(type(of: error))")
            #expect(error.description == line, "\(type(of: error))")
            #expect("\(error)" == line, "\(type(of: error))")
        }
    }
}
