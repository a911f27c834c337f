import Foundation
import KaitenTransfer

#if canImport(Glibc)
import Glibc
#endif

/// The two changes to a folder that settling a conflict makes on the user's word (`kaiten
/// resolve`): deleting a local file, and keeping local content under a conflict copy's name.
/// Here, beside the executor, so that what writes under a folder's root is in one layer.
public enum LocalFileChoices {
    /// Deletes the regular file or symlink `path` under `root`.
    public static func delete(_ path: String, under root: String) throws {
        try SafePath.validate(path)
        var info = stat()
        guard lstat(root + "/" + path, &info) == 0, info.st_mode & S_IFMT != S_IFDIR else {
            throw ApplyError(.changedLocally, path: path, "not a local file")
        }
        guard unlink(root + "/" + path) == 0 else {
            throw ApplyError(.io, path: path, "cannot delete: \(String(cString: strerror(errno)))")
        }
    }

    /// Renames `path` under `root` to its conflict copy's name (syncthing's, with `shortID` as
    /// the device that made the version kept), and returns that name.
    public static func keepAsConflictCopy(_ path: String, under root: String, shortID: String) throws -> String {
        try SafePath.validate(path)
        let copy = SafePath.conflictName(for: path, shortID: shortID)
        guard rename(root + "/" + path, root + "/" + copy) == 0 else {
            throw ApplyError(.io, path: path, "cannot keep the local copy: \(String(cString: strerror(errno)))")
        }
        return copy
    }
}
