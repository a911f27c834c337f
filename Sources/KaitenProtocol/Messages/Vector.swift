/// How two version vectors relate (syncthing lib/protocol/vector.go).
public enum VectorOrdering: Sendable, Equatable {
    case equal
    case greater
    case lesser
    /// Concurrent, and `a` is ahead on the lowest-ID counter where they differ.
    case concurrentGreater
    /// Concurrent, and `a` is behind on the lowest-ID counter where they differ.
    case concurrentLesser

    public var isConcurrent: Bool { self == .concurrentGreater || self == .concurrentLesser }
}

extension BEPVector {
    /// Compares two vectors as syncthing does: walk both sorted counter lists, a missing
    /// counter counts as 0; the first difference decides greater or lesser, a later difference
    /// the other way makes them concurrent.
    public func compare(_ other: BEPVector) -> VectorOrdering {
        let a = counters
        let b = other.counters
        var i = 0
        var j = 0
        var result = VectorOrdering.equal
        while i < a.count || j < b.count {
            let (valueA, valueB): (UInt64, UInt64)
            if i < a.count && (j >= b.count || a[i].id < b[j].id) {
                (valueA, valueB) = (a[i].value, 0)
                i += 1
            } else if j < b.count && (i >= a.count || b[j].id < a[i].id) {
                (valueA, valueB) = (0, b[j].value)
                j += 1
            } else {
                (valueA, valueB) = (a[i].value, b[j].value)
                i += 1
                j += 1
            }
            if valueA > valueB {
                switch result {
                case .equal: result = .greater
                case .lesser: return .concurrentLesser
                default: break
                }
            } else if valueA < valueB {
                switch result {
                case .equal: result = .lesser
                case .greater: return .concurrentGreater
                default: break
                }
            }
        }
        return result
    }

    /// The text form the REST API uses: `SHORTID:value` per counter.
    public var descriptions: [String] { counters.map { "\(DeviceID.shortIDString($0.id)):\($0.value)" } }
}

extension BEPVector {
    /// The counter-wise maximum of both (syncthing's `Vector.Merge`): a version that has seen
    /// both histories.
    public func merged(with other: BEPVector) -> BEPVector {
        var values: [UInt64: UInt64] = [:]
        for counter in counters { values[counter.id] = max(values[counter.id] ?? 0, counter.value) }
        for counter in other.counters { values[counter.id] = max(values[counter.id] ?? 0, counter.value) }
        var out = BEPVector()
        out.counters = values.keys.sorted().map {
            var counter = BEPCounter()
            counter.id = $0
            counter.value = values[$0]!
            return counter
        }
        return out
    }

    /// This version changed by the device with `shortID` (syncthing's `Vector.Update`): its
    /// counter becomes the larger of its value + 1 and the time in seconds, so that a device
    /// whose history was lost still counts above what it announced before.
    public func updated(by shortID: UInt64, now: UInt64) -> BEPVector {
        var out = self
        if let i = out.counters.firstIndex(where: { $0.id == shortID }) {
            out.counters[i].value = max(out.counters[i].value + 1, now)
        } else {
            var counter = BEPCounter()
            counter.id = shortID
            counter.value = now
            out.counters.append(counter)
            out.counters.sort { $0.id < $1.id }
        }
        return out
    }
}
