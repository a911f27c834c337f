import KaitenApp

/// `kaiten select` and `deselect` as text: what each argument did; a refusal is an error line.
public enum SelectionView {
    public static func line(_ result: Selected) -> String {
        switch result {
        case .path(let path): return "selected \(path)"
        case .pattern(let pattern, let matched): return "selected the pattern \(pattern) (\(matched) path\(matched == 1 ? "" : "s") now)"
        case .alreadySelected(let path): return "\(path): already selected"
        case .coveredBy(let path, let parent): return "\(path): already selected through \(parent)"
        }
    }

    /// The line, and whether it is a refusal (said on stderr).
    public static func line(_ result: Deselected) -> (text: String, refused: Bool) {
        switch result {
        case .path(let path): return ("deselected \(path)", false)
        case .pattern(let pattern): return ("deselected the pattern \(pattern)", false)
        case .notSelected(let path): return ("\(path): not selected", false)
        case .selectedThrough(let path, let parent): return ("\(path) is selected through \(parent); deselect \(parent) and select what to keep", true)
        case .selectedByPattern(let path, let pattern, let file): return ("\(path) is selected by the pattern \"\(pattern)\"; edit \(file)", true)
        }
    }
}
