/// `Range: bytes=…` (RFC 9110 §14), resolved against a representation of `size` bytes.
public enum HTTPRange {
    public enum Resolved: Equatable, Sendable {
        /// No Range header, or one to ignore (not `bytes`, or syntactically invalid): send it all.
        case full
        /// The satisfiable ranges, in request order, each as a closed byte interval.
        case ranges([ClosedRange<Int64>])
        /// Every range lies beyond the end: 416.
        case unsatisfiable
    }

    /// Parses a Range header value. Invalid syntax is ignored (RFC 9110: a server MAY ignore
    /// it), as is a request for more than `maxRanges` ranges.
    public static func resolve(_ header: String?, size: Int64, maxRanges: Int = 32) -> Resolved {
        guard let header else { return .full }
        let trimmed = header.trimmingSpaces()
        guard trimmed.lowercased().hasPrefix("bytes=") else { return .full }
        let specs = trimmed.dropFirst(6).split(separator: ",", omittingEmptySubsequences: true)
        guard !specs.isEmpty, specs.count <= maxRanges else { return .full }
        var out: [ClosedRange<Int64>] = []
        for raw in specs {
            let spec = String(raw).trimmingSpaces()
            guard let dash = spec.firstIndex(of: "-") else { return .full }
            let first = spec[..<dash]
            let last = spec[spec.index(after: dash)...]
            if first.isEmpty {
                // Suffix: the last N bytes.
                guard let n = Int64(last), n >= 0 else { return .full }
                if n == 0 || size == 0 { continue }
                out.append(max(0, size - n)...(size - 1))
            } else {
                guard let start = Int64(first), start >= 0 else { return .full }
                var end = size - 1
                if !last.isEmpty {
                    guard let e = Int64(last), e >= start else { return .full }
                    end = min(e, size - 1)
                }
                if start >= size { continue }
                out.append(start...end)
            }
        }
        return out.isEmpty ? .unsatisfiable : .ranges(out)
    }
}

extension String {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" { s.removeLast() }
        return String(s)
    }
}
