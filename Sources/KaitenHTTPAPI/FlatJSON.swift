import Foundation

/// JSON objects of strings, numbers, booleans and nulls, written directly with their keys
/// sorted. Event streams write one per event: JSONSerialization per event was a tenth of the
/// service's CPU in an apply of 5,000 small files, and more than the pull of a small file.
public enum FlatJSON {
    /// `object` as JSON with sorted keys, or nil when a value is not a String, an Int, Int64,
    /// Int32, a Double, a Bool or NSNull.
    public static func object(_ object: [String: Any]) -> String? {
        var out = "{"
        for (i, key) in object.keys.sorted().enumerated() {
            if i > 0 { out += "," }
            quote(key, into: &out)
            out += ":"
            // By exact type: an NSNumber would cast to Bool and to Int alike (JSONSerialization
            // tells them apart), so it is left to JSONSerialization.
            let value = object[key]!
            let kind = type(of: value)
            if kind == String.self {
                quote(value as! String, into: &out)
            } else if kind == Bool.self {
                out += value as! Bool ? "true" : "false"
            } else if kind == Int.self {
                out += String(value as! Int)
            } else if kind == Int64.self {
                out += String(value as! Int64)
            } else if kind == Int32.self {
                out += String(value as! Int32)
            } else if kind == Double.self {
                let number = value as! Double
                // An integral double as an integer, as JSONSerialization writes it.
                out += !number.isFinite ? "null" : number == number.rounded() && abs(number) < 1e15 ? String(Int64(number)) : String(number)
            } else if kind == NSNull.self {
                out += "null"
            } else {
                return nil
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
