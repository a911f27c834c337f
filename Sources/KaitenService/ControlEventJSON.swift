import Foundation
import KaitenApply
import KaitenHTTPAPI
import KaitenReconcile

/// A batch of an apply's events as the control socket sends it, written directly: the JSON
/// JSONEncoder makes of ``ControlReply`` (`{"type":"event","events":[…]}`, each event keyed by
/// its case, nil fields left out), which the client reads with JSONDecoder. An apply of 5,000
/// small files is 10,000 such events, and JSONEncoder spent about 5 % of the service's CPU on
/// them. The two frequent kinds (a finished action, progress) are written here; the others go
/// through JSONEncoder.
enum ControlEventJSON {
    static func reply(_ events: [ApplyEvent]) -> Data {
        var out = #"{"type":"event","events":["#
        out.reserveCapacity(events.count * 256)
        for (index, event) in events.enumerated() {
            if index > 0 { out += "," }
            append(event, to: &out)
        }
        out += "]}"
        return Data(out.utf8)
    }

    static func append(_ event: ApplyEvent, to out: inout String) {
        switch event {
        case .done(let folder, let action, let note):
            out += #"{"done":{"folder":"#
            FlatJSON.quote(folder, into: &out)
            out += #","action":"#
            append(action, to: &out)
            if let note {
                out += #","note":"#
                FlatJSON.quote(note, into: &out)
            }
            out += "}}"
        case .progress(let filesDone, let filesTotal, let bytesDone, let bytesTotal, let current):
            out += #"{"progress":{"filesDone":\#(filesDone),"filesTotal":\#(filesTotal),"bytesDone":\#(bytesDone),"bytesTotal":\#(bytesTotal),"current":"#
            FlatJSON.quote(current, into: &out)
            out += "}}"
        default:
            out += String(decoding: ControlSocket.encode(event), as: UTF8.self)
        }
    }

    static func append(_ action: Action, to out: inout String) {
        out += #"{"action":"#
        FlatJSON.quote(action.action.rawValue, into: &out)
        out += #","path":"#
        FlatJSON.quote(action.path, into: &out)
        out += #","size":\#(action.size),"reason":"#
        FlatJSON.quote(action.reason, into: &out)
        out += #","type":"#
        FlatJSON.quote(action.type.rawValue, into: &out)
        out += #","version":"#
        append(action.version, to: &out)
        out += #","peers":"#
        append(action.peers, to: &out)
        if let cause = action.cause {
            out += #","cause":"#
            FlatJSON.quote(cause.rawValue, into: &out)
        }
        if let mode = action.mode { out += #","mode":\#(mode)"# }
        out += "}"
    }

    static func append(_ strings: [String], to out: inout String) {
        out += "["
        for (index, string) in strings.enumerated() {
            if index > 0 { out += "," }
            FlatJSON.quote(string, into: &out)
        }
        out += "]"
    }
}
