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
