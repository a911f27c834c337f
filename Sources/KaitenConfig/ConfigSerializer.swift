import Foundation

#if canImport(FoundationXML)
import FoundationXML
#endif

/// Writes an XML tree the way syncthing's Go encoder (encoding/xml) does, so that a
/// config.xml syncthing wrote is reproduced byte for byte: no XML declaration, `<a></a>` for
/// empty elements, and Go's escapes (`&#34;` and `&#39;` for quotes, `&#xA;` for a newline
/// inside a value). libxml2's own writer differs on each of these.
enum ConfigSerializer {
    static func serialize(_ root: XMLElement) -> String {
        var out = ""
        write(root, into: &out)
        out.append("\n")
        return out
    }

    private static func write(_ node: XMLNode, into out: inout String) {
        switch node.kind {
        case .element:
            guard let element = node as? XMLElement else { return }
            let name = element.name ?? ""
            out.append("<")
            out.append(name)
            for attribute in element.attributes ?? [] {
                out.append(" ")
                out.append(attribute.name ?? "")
                out.append("=\"")
                out.append(escape(attribute.stringValue ?? ""))
                out.append("\"")
            }
            out.append(">")
            let children = element.children ?? []
            let hasElementChildren = children.contains { $0.kind == .element }
            for child in children {
                if child.kind == .text, hasElementChildren, let text = child.stringValue,
                    text.allSatisfy({ $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" })
                {
                    out.append(text)  // layout between elements, written as is
                } else {
                    write(child, into: &out)
                }
            }
            out.append("</")
            out.append(name)
            out.append(">")
        case .text:
            out.append(escape(node.stringValue ?? ""))
        case .comment:
            out.append("<!--")
            out.append(node.stringValue ?? "")
            out.append("-->")
        default:
            out.append(node.xmlString(options: []))
        }
    }

    /// Go's xml.EscapeText.
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out.append("&amp;")
            case "<": out.append("&lt;")
            case ">": out.append("&gt;")
            case "\"": out.append("&#34;")
            case "'": out.append("&#39;")
            case "\t": out.append("&#x9;")
            case "\n": out.append("&#xA;")
            case "\r": out.append("&#xD;")
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
