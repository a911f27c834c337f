import Foundation

/// Small facts about bytes and text that several layers report to people.
public enum TextFacts {
    /// `1.5 MiB`, `300 B`: sizes as every Kaiten message shows them.
    public static func human(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        guard unit > 0 else { return "\(bytes) B" }
        // One decimal, rounded as printf's %.1f rounds (half to even); String(format:) was most
        // of the time of printing a 100,000-line plan.
        let tenths = Int((value * 10).rounded(.toNearestOrEven))
        return "\(tenths / 10).\(tenths % 10) \(units[unit])"
    }

    /// The 1-based line holding the first byte that is not UTF-8 (the last line when all are).
    public static func lineOfFirstInvalidUTF8(_ data: Data) -> Int {
        var line = 1
        var iterator = data.makeIterator()
        var decoder = UTF8()
        while case .scalarValue(let scalar) = decoder.decode(&iterator) {
            if scalar == "\n" { line += 1 }
        }
        return line
    }
}
