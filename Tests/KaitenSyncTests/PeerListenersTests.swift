import Foundation
import KaitenConfig
import KaitenPeer
import KaitenProtocol
import KaitenTestSupport
import Logging
import Synchronization
import Testing

@testable import KaitenSync

#if canImport(Glibc)
import Glibc
#endif

/// The ways in that config.xml's listen addresses open: one that cannot be bound, one that is
/// not a relay URI and relays that are off are each said, and the others listen anyway.
@Suite(.timeLimit(.minutes(5)))
struct PeerListenersTests {
    @Test func whatCannotListenIsSaidAndTheRestListens() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        // A port another program holds.
        let taken = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(taken) }
        var address = LoopbackSocket.address(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(taken, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(bound == 0 && listen(taken, 1) == 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(taken, $0, &length) } }
        let busy = Int(UInt16(bigEndian: address.sin_port))

        let home = Home(path: directory.file("home"))
        _ = try KaitenHome.initialize(home, name: "k", listenAddress: "tcp://127.0.0.1:0")
        let config = try ConfigFile.load(path: home.configPath)
        config.setListenAddresses(["tcp://127.0.0.1:\(busy)", "tcp://127.0.0.1:0", "relay://127.0.0.1:1"])
        config.setOption("relaysEnabled", "false")
        try config.write()
        let opened = try KaitenHome.open(home)

        let said = Mutex<[String]>([])
        let (listeners, addresses) = await PeerListeners.open(
            home: opened, settings: PeerSettings(), logger: Logger(label: "test"), isAllowed: { _ in false }, accept: { _ in },
            warn: { line in said.withLock { $0.append(line) } })
        #expect(listeners.count == 1)
        #expect(addresses.count == 1 && addresses[0].hasPrefix("tcp://127.0.0.1:") && addresses[0] != "tcp://127.0.0.1:0")
        let lines = said.withLock { $0 }
        #expect(lines.count == 2, "\(lines)")
        #expect(lines.first?.hasPrefix("cannot listen for peers at tcp://127.0.0.1:\(busy): ") == true, "\(lines)")
        #expect(lines.last == "listen addresses relay://127.0.0.1:1 are not used: relaysEnabled is false in config.xml")
        for listener in listeners { await listener.close() }
    }
}
