import Foundation
import KaitenHTTPAPI
import KaitenIndex
import KaitenProtocol
import Testing

@testable import KaitenService

/// The local changes an event reports are counted in full and kept only as far as the events
/// name them: a folder's first announcement at ten million paths made an array of every entry.
struct LocalChangesTests {
    @Test func theCountIsWholeAndTheFirstChangesAreKeptInSequenceOrder() {
        var changes = APIEvents.LocalChanges()
        let limit = APIEvents.changesPerUpdate
        let sequences = (1...(5 * limit)).map(Int64.init).shuffled()
        for sequence in sequences {
            var file = BEPFileInfo()
            file.name = "f\(sequence)"
            file.sequence = sequence
            changes.add(APIEvents.LocalChange(entry: FileEntry(announced: file), madeHere: true, isNew: true))
        }
        #expect(changes.count == 5 * limit)
        #expect(changes.earliest.map(\.entry.sequence) == (1...limit).map(Int64.init))
    }
}

/// ItemStarted's and ItemFinished's data, written directly, are the documents FlatJSON makes of
/// the same dictionaries, byte for byte, with names that need escapes and with and without an
/// error.
struct ItemEventJSONTests {
    @Test func theItemEventsAreFlatJSONsOwnBytes() {
        for (item, error) in [("docs/a.txt", nil), ("we\"ird\\/näme\n.txt", "cannot write: \"no space\"\t"), ("x", "")] as [(String, String?)] {
            let (started, finished) = APIEvents.itemJSON(action: "update", folder: "f \"1\"", item: item, type: "file", error: error)
            let fields: [String: Any] = ["action": "update", "folder": "f \"1\"", "item": item, "type": "file"]
            #expect(String(decoding: started, as: UTF8.self) == FlatJSON.object(fields))
            let withError = fields.merging(["error": error.map { $0 as Any } ?? NSNull()]) { a, _ in a }
            #expect(String(decoding: finished, as: UTF8.self) == FlatJSON.object(withError))
        }
    }
}
