import Foundation

/// Creating a folder's directory for a new folder entry.
public enum FolderDirectory {
    /// Creates `path` and its marker if the directory does not exist yet.
    ///
    /// The marker is made only in a directory Kaiten created itself: an existing directory
    /// without a marker may be an unmounted disk, and must not start to look like a folder
    /// whose files were all deleted.
    /// - Returns: whether the directory was created.
    public static func prepare(path: String, markerName: String) throws(ConfigError) -> Bool {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw ConfigError(.invalidValue, file: path, "exists and is not a directory")
            }
            return false
        }
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(
                atPath: (path as NSString).appendingPathComponent(markerName), withIntermediateDirectories: false)
        } catch {
            throw ConfigError(.writeFailed, file: path, "cannot create folder directory: \(error.localizedDescription)")
        }
        return true
    }
}
