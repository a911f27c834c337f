import Foundation

/// JSON objects of strings, numbers, booleans and nulls, written directly with their keys
/// sorted. Event streams write one per event: JSONSerialization per event was a tenth of the
/// service's CPU in an apply of 5,000 small files, and more than the pull of a small file.
public enum FlatJSON {
    /// `object` as JSON with sorted keys, or nil when a value is not a string, an integer, a
    /// double, a boolean or NSNull.
    public static func object(_ object: [String: Any]) -> String? {
        var out = "{"
        for (i, key) in object.keys.sorted().enumerated() {
            if i > 0 { out += "," }
            quote(key, into: &out)
            out += ":"
            switch object[key]! {
            case let text as String: quote(text, into: &out)
            case let flag as Bool: out += flag ? "true" : "false"
            case let number as Int: out += String(number)
            case let number as Int64: out += String(number)
            case let number as Int32: out += String(number)
            case let number as Double:
                guard number.isFinite else {
                    out += "null"
                    continue
                }
                // An integral double as an integer, as JSONSerialization writes it.
                out += number == number.rounded() && abs(number) < 1e15 ? String(Int64(number)) : String(number)
            case is NSNull: out += "null"
            default: return nil
            }
        }
        return out + "}"
    }

    /// `text` as a JSON string: quotes, backslashes and control characters escaped, the rest
    /// as it is (UTF-8, slashes unescaped).
    public static func quote(_ text: String, into out: inout String) {
        out += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }
}
