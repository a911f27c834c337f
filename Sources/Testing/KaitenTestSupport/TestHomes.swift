import Foundation
import KaitenConfig
import KaitenProtocol

/// Homes as the unit tests need them, made the way `kaiten init`, `peer add` and `folder add`
/// make them.
public enum TestHomes {
    /// A home at `directory/name` with a receive-only folder `f` at `directory/data` (its
    /// `.stfolder` made) shared with `peer`, listed at a loopback address.
    public static func receiveOnly(in directory: TemporaryDirectory, name: String = "home", data: String = "data", peer: DeviceID) throws -> KaitenHome {
        let home = Home(path: directory.file(name))
        _ = try KaitenHome.initialize(home, name: "k", listenAddress: "tcp://127.0.0.1:0")
        let config = try ConfigFile.load(path: home.configPath)
        try config.addDevice(DeviceConfiguration(id: peer, name: "a", addresses: ["tcp://127.0.0.1:22000"]))
        try FileManager.default.createDirectory(atPath: directory.file(data + "/.stfolder"), withIntermediateDirectories: true)
        try config.addFolder(FolderConfiguration(id: "f", path: directory.file(data), type: .receiveonly, devices: [peer]))
        try config.write()
        return try KaitenHome.open(home)
    }
}
