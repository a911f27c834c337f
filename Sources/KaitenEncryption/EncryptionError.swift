/// Why something encrypted could not be made or opened. An authentication failure means the
/// bytes were altered, swapped or made with another password: never a reason to use them.
public enum EncryptionError: Error, Equatable, Sendable, CustomStringConvertible {
    case authentication(String)
    case keySize(Int)
    case primitive(String)
    case malformedName(String)
    case malformed(String)

    public var description: String {
        switch self {
        case .authentication(let why): return "does not decrypt with this password (\(why)): altered, swapped or made with another password"
        case .keySize(let bytes): return "a key of \(bytes) bytes where 32 are needed"
        case .primitive(let what): return "encryption failed: \(what)"
        case .malformedName(let why): return "not an encrypted name: \(why)"
        case .malformed(let why): return why
        }
    }
}
