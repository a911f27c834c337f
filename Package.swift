// swift-tools-version:6.0
// Kaiten: selective sync and on-demand access for Syncthing, as a headless Syncthing device.
//
// Targets are cut by concern and import downward only (see Docs/architecture.md):
//
//   kaiten (CLI) → KaitenPeer → KaitenConfig → KaitenProtocol → CLZ4, SwiftProtobuf, NIOCore
import PackageDescription

#if canImport(Glibc)
import Glibc

/// How the `kaiten` executable is linked: by lld, exporting only the symbols other objects need
/// (37,000 exported symbols kept 2.2 MB of symbol tables resident in every process), and with
/// its 120,000 relative relocations packed (DT_RELR: 2.9 MB that every start read and kept
/// resident) where the glibc it is built against applies them (2.36 and later; an older
/// ld.so would ignore them and the program could not start, so older systems link without).
let kaitenLinkerFlags: [String] = {
    var flags = ["-use-ld=lld", "-Xlinker", "--no-export-dynamic"]
    // "glibc 2.36"
    var buffer = [CChar](repeating: 0, count: 64)
    _ = confstr(Int32(_CS_GNU_LIBC_VERSION), &buffer, buffer.count)
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    let version = (text.split(separator: " ").last ?? "").split(separator: ".").compactMap { Int($0) }
    if version.count >= 2, (version[0], version[1]) >= (2, 36) {
        flags += ["-Xlinker", "-z", "-Xlinker", "pack-relative-relocs"]
    }
    return flags
}()
#else
let kaitenLinkerFlags: [String] = []
#endif

let package = Package(
    name: "kaiten",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "kaiten", targets: ["kaiten"]),
        .executable(name: "kaiten-media", targets: ["kaiten-media"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.30.0"),
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.0.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.10.0"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.3.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        // liblz4 from the system (Debian: liblz4-dev); only KaitenProtocol's LZ4.swift imports it.
        .systemLibrary(
            name: "CLZ4",
            path: "Sources/C/CLZ4",
            pkgConfig: "liblz4",
            providers: [.apt(["liblz4-dev"])]
        ),
        // Wire protocol: device IDs, BEP messages, framing, LZ4. No file system, no sockets.
        .target(
            name: "KaitenProtocol",
            dependencies: [
                "KaitenErrors", "CLZ4",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            exclude: ["Proto/bep.proto", "Proto/discovery.proto"]
        ),
        // Writing files so that a crash leaves the old content or the new (temp file, fsync,
        // rename, directory fsync), and flushing directories: the one place every layer uses.
        .target(name: "KaitenErrors"),
        .target(name: "KaitenFiles", dependencies: ["KaitenErrors"]),
        // zlib from the system, for CRC32 in index log records.
        .systemLibrary(name: "CZlib", path: "Sources/C/CZlib", providers: [.apt(["zlib1g-dev"])]),
        // libxcrypt's bcrypt: the GUI password hash syncthing stores (`$2a$10$…`); swift-crypto
        // and OpenSSL have no bcrypt, and libcrypt1 is in every Debian system.
        .systemLibrary(name: "CCrypt", path: "Sources/C/CCrypt", providers: [.apt(["libcrypt-dev"])]),
        // zlib's CRC-32, folded with carry-less multiplication where the CPU has it: every log
        // record, snapshot and scan cache is checked with it.
        .target(name: "CKaitenCRC32", dependencies: ["CZlib"], path: "Sources/C/CKaitenCRC32"),
        // The global index: an append-only log per folder, replayed into syncthing's global view.
        .target(
            name: "KaitenIndex",
            dependencies: [
                "KaitenFiles", "KaitenProtocol", "CKaitenCRC32", .product(name: "SwiftProtobuf", package: "swift-protobuf")]
        ),
        // Selection files and the .stignore allowlist (Sushitrain's grammar). No I/O.
        .target(name: "KaitenSelection", dependencies: ["KaitenProtocol"]),
        // syncthing's encryption for untrusted devices: keys, encrypted names, blocks and
        // FileInfos, the stored trailer. Pure functions over bytes; no I/O but reading a trailer.
        .target(
            name: "KaitenEncryption",
            dependencies: [
                "KaitenProtocol", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"), .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ]
        ),
        // The local side: walk a folder, hash changed files into syncthing's blocks, keep the
        // scan cache and the record of what Kaiten synced.
        .target(
            name: "KaitenScan",
            dependencies: [
                "KaitenFiles", "KaitenProtocol", "KaitenConfig", "CZlib", "CKaitenCRC32", .product(name: "Crypto", package: "swift-crypto")]
        ),
        // The plan: a pure function from selection x global index x local scan to actions and
        // conflicts. No I/O.
        .target(
            name: "KaitenReconcile",
            dependencies: ["KaitenProtocol", "KaitenIndex", "KaitenSelection", "KaitenScan", .product(name: "Crypto", package: "swift-crypto")]
        ),
        // Transfers, used alike by apply, on demand and the block server: where blocks come
        // from (verified), the puller (temp + fsync + rename), safe paths, answering requests.
        .target(
            name: "KaitenTransfer",
            dependencies: [
                "KaitenFiles",
                "KaitenReconcile", "KaitenScan", "KaitenIndex", "KaitenPeer", "KaitenConfig", "KaitenProtocol", "KaitenEncryption",
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // Listening sockets whose accepted connections are each served by a task from the moment
        // they exist (the control socket, the HTTP servers).
        .target(
            name: "KaitenServer",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // syncthing's REST API over a device's live state: who may ask (API key, Host check),
        // the endpoints with syncthing's JSON shapes, the HTTP listener. The service gives it
        // the state; nothing here decides about files.
        .target(
            name: "KaitenHTTPAPI",
            dependencies: [
                "KaitenServer", "KaitenConfig", "KaitenIndex", "KaitenProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // Apply: runs a plan (the order, deletions re-checked, the lock, stale-plan and
        // safety-brake checks) with the transfers.
        .target(
            name: "KaitenApply",
            dependencies: [
                "KaitenFiles",
                "KaitenTransfer", "KaitenSync", "KaitenReconcile", "KaitenScan", "KaitenIndex", "KaitenPeer", "KaitenConfig", "KaitenProtocol",
                "KaitenEncryption",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // On demand: read files of the global index without selecting them; the signed-URL
        // HTTP server with range support.
        .target(
            name: "KaitenStream",
            dependencies: [
                "KaitenFiles", "KaitenServer",
                "KaitenTransfer", "KaitenSync", "KaitenScan", "KaitenIndex", "KaitenPeer", "KaitenConfig", "KaitenProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // config.xml (read, edit, write back losslessly), the identity (cert.pem/key.pem), the home.
        .target(
            name: "KaitenConfig",
            dependencies: [
                "KaitenFiles",
                "KaitenProtocol",
                "CCrypt",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]
        ),
        // TLS 1.3 connections to peers: dialling, listening, device-ID verification, BEP sessions.
        .target(
            name: "KaitenPeer",
            dependencies: [
                "KaitenProtocol",
                "KaitenEncryption",
                "KaitenConfig",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // Finding peers' addresses: local discovery (UDP broadcast/multicast on the LAN) and
        // global discovery (HTTPS announce/lookup), merged with config.xml's static addresses.
        .target(
            name: "KaitenDiscovery",
            dependencies: [
                "KaitenPeer", "KaitenConfig", "KaitenProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Orchestration over several concerns: index sync (peers + log), planning (log + scan + selection).
        .target(
            name: "KaitenSync",
            dependencies: [
                "KaitenFiles",
                "KaitenPeer", "KaitenDiscovery", "KaitenIndex", "KaitenConfig", "KaitenProtocol", "KaitenScan", "KaitenSelection",
                "KaitenReconcile", "KaitenEncryption",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // `kaiten run`: the reconcile loop as a service, composed of the sessions, the block
        // server, the change watcher, the planner and the applier; it only schedules.
        .target(
            name: "KaitenService",
            dependencies: [
                "KaitenFiles", "KaitenServer",
                "KaitenDiscovery", "KaitenApply", "KaitenStream", "KaitenSync", "KaitenTransfer", "KaitenReconcile", "KaitenPeer", "KaitenConfig",
                "KaitenProtocol", "KaitenHTTPAPI",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Media decoders from Debian: libvips (images: shrink-on-load for JPEG, HEIF, WebP; a
        // loader allowlist) and libavformat/libavcodec (a video frame read by ranges). Only the
        // kaiten-media helper process links them (below): `kaiten` starts without their
        // hundred shared libraries, and a decoder crash costs one thumbnail, not the service.
        .systemLibrary(name: "CVips", path: "Sources/C/CVips", pkgConfig: "vips", providers: [.apt(["libvips-dev"])]),
        .systemLibrary(
            name: "CFFmpeg", path: "Sources/C/CFFmpeg", pkgConfig: "libavformat",
            providers: [.apt(["libavformat-dev", "libavcodec-dev", "libswscale-dev", "libavutil-dev"])]
        ),
        // The C side of the helper: libvips's API is variadic, which Swift cannot call.
        .target(
            name: "CKaitenMedia", dependencies: ["CVips", "CFFmpeg"], path: "Sources/C/CKaitenMedia",
            // The glue that copies decoder messages into buffers: checked string functions.
            cSettings: [.define("_FORTIFY_SOURCE", to: "2", .when(configuration: .release))],
            // pkg-config names one library per system-library target; the other three of ffmpeg's.
            linkerSettings: [.linkedLibrary("avcodec"), .linkedLibrary("swscale"), .linkedLibrary("avutil")]
        ),
        // The helper process: thumbnail jobs as JSON lines on stdin, results on stdout.
        .executableTarget(name: "kaiten-media", dependencies: ["CKaitenMedia"]),
        // Media without decoders: the thumbnail cache in Sushitrain's layout, EXIF (embedded
        // thumbnails, orientation, capture dates), the helper processes, and thumbnails of files
        // local or on peers (through on demand's reads and its signed URLs).
        .target(
            name: "KaitenMedia",
            dependencies: [
                "KaitenFiles", "KaitenStream", "KaitenIndex", "KaitenSync", "KaitenConfig", "KaitenProtocol", "KaitenTransfer"]
        ),
        // libfuse 3 from the system (Debian: libfuse3-dev), for `kaiten mount`.
        .systemLibrary(name: "CFuse3", path: "Sources/C/CFuse3", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
        // The folder in the file system: libfuse's requests as calls on a MountedFolder, which
        // the use-case layer gives. Nothing here decides about files.
        .target(name: "KaitenMount", dependencies: ["CFuse3"]),
        // The use-case layer and composition root: one call per verb for every front-end.
        .target(
            name: "KaitenApp",
            dependencies: [
                "KaitenProtocol", "KaitenConfig", "KaitenFiles", "KaitenPeer", "KaitenDiscovery", "KaitenIndex", "KaitenSync",
                "KaitenSelection", "KaitenScan", "KaitenReconcile", "KaitenTransfer", "KaitenApply", "KaitenStream",
                "KaitenService", "KaitenHTTPAPI", "KaitenMedia", "KaitenMount", "KaitenEncryption", .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The terminal's view of results: plan lines, apply's progress and summary, tables,
        // remarks on stderr. Strings from values; no decision is made here.
        .target(name: "KaitenTerminal", dependencies: ["KaitenApp"]),
        // The thin command line: parse, call one library function, render, exit.
        .executableTarget(
            name: "kaiten",
            dependencies: [
                "KaitenApp", "KaitenTerminal", "KaitenFiles",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            // ~5 MiB less memory in every kaiten process (kaitenLinkerFlags, above). Only the link
            // of this executable changes, in debug builds (the tests run it) as in release.
            linkerSettings: [.unsafeFlags(kaitenLinkerFlags)]
        ),
        // Test-only helpers: real syncthing instances on 127.0.0.1, temp dirs, running the CLI.
        .target(
            name: "KaitenTestSupport",
            dependencies: [
                "KaitenProtocol", "KaitenConfig",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            path: "Sources/Testing/KaitenTestSupport"
        ),
        // Runs a test on a thread of its own (a Swift Testing trait): for tests that block.
        .target(name: "KaitenTestThreads", path: "Sources/Testing/KaitenTestThreads"),
        // scripts/bench: Kaiten next to syncthing on the same data in the same run. Not a test.
        .executableTarget(
            name: "kaiten-bench",
            dependencies: ["KaitenPeer", "KaitenConfig", "KaitenProtocol", "KaitenIndex", "KaitenTestSupport", "KaitenScan", "KaitenReconcile", "KaitenSelection", "KaitenApply", "KaitenTransfer", "KaitenSync", "KaitenStream", "KaitenMount", "KaitenFiles"],
            path: "Benchmarks/KaitenBench"
        ),
        .testTarget(name: "KaitenProtocolTests", dependencies: ["KaitenTestThreads", "KaitenProtocol", "KaitenTestSupport"]),
        .testTarget(name: "KaitenEncryptionTests", dependencies: ["KaitenTestThreads", "KaitenEncryption", "KaitenProtocol", "KaitenTestSupport"]),
        .testTarget(name: "KaitenSelectionTests", dependencies: ["KaitenTestThreads", "KaitenSelection", "KaitenTestSupport"]),
        .testTarget(name: "KaitenScanTests", dependencies: ["KaitenTestThreads", "KaitenScan", "KaitenTestSupport", .product(name: "Crypto", package: "swift-crypto")]),
        .testTarget(
            name: "KaitenApplyTests",
            dependencies: [
                "KaitenTestThreads", "KaitenApply", "KaitenTransfer", "KaitenSync", "KaitenReconcile", "KaitenConfig", "KaitenIndex", "KaitenProtocol",
                "KaitenTestSupport",
            ]
        ),
        .testTarget(name: "KaitenTerminalTests", dependencies: ["KaitenTerminal", "KaitenApp"]),
        .testTarget(name: "KaitenHTTPAPITests", dependencies: ["KaitenTestThreads", "KaitenHTTPAPI", "KaitenConfig", "KaitenProtocol", "KaitenTestSupport"]),
        .testTarget(name: "KaitenServerTests", dependencies: ["KaitenTestThreads", "KaitenServer", "KaitenTestSupport"]),
        .testTarget(name: "KaitenStreamTests", dependencies: ["KaitenTestThreads", "KaitenStream", "KaitenTestSupport"]),
        // The orchestrators' parts, without a syncthing: the service's trigger coalescer, the
        // terms a peer's connection stands on, the block server's refusals.
        .testTarget(
            name: "KaitenServiceTests",
            dependencies: [
                "KaitenService", "KaitenApply", "KaitenFiles", "KaitenProtocol", "KaitenConfig", "KaitenStream", "KaitenTransfer", "KaitenTestSupport",
                "KaitenTestThreads", .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "KaitenSyncTests", dependencies: ["KaitenTestThreads", "KaitenSync", "KaitenConfig", "KaitenIndex", "KaitenPeer", "KaitenProtocol", "KaitenTestSupport", .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "KaitenTransferTests", dependencies: ["KaitenTestThreads", "KaitenTransfer", "KaitenConfig", "KaitenProtocol", "KaitenTestSupport"]),
        .testTarget(
            name: "KaitenMediaTests",
            dependencies: ["KaitenTestThreads", "KaitenMedia", "KaitenTestSupport", "KaitenProtocol", .product(name: "Crypto", package: "swift-crypto")],
            // C built by the tests themselves, with AddressSanitizer.
            exclude: ["AddressSanitizer"]
        ),
        .testTarget(name: "KaitenReconcileTests", dependencies: ["KaitenTestThreads", "KaitenReconcile", "KaitenIndex", "KaitenScan", "KaitenSelection"]),
        .testTarget(name: "KaitenDiscoveryTests", dependencies: ["KaitenTestThreads", "KaitenDiscovery", "KaitenProtocol"]),
        .testTarget(name: "KaitenIndexTests", dependencies: ["KaitenTestThreads", "KaitenIndex", "CKaitenCRC32", "KaitenTestSupport"]),
        .testTarget(
            name: "KaitenConfigTests",
            dependencies: [
                "KaitenConfig", "KaitenTestSupport", "KaitenTestThreads",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            resources: [.copy("Fixtures")]
        ),
        .testTarget(
            name: "KaitenPeerTests",
            dependencies: ["KaitenTestThreads", "KaitenPeer", "KaitenEncryption", .product(name: "Crypto", package: "swift-crypto"), "KaitenDiscovery", "KaitenTestSupport", .product(name: "NIOEmbedded", package: "swift-nio")]
        ),
        // The use-case layer without a process or a peer: outcomes and exit codes, verbs on a home.
        .testTarget(
            name: "KaitenAppTests",
            dependencies: [
                "KaitenApp", "KaitenApply", "KaitenConfig", "KaitenProtocol", "KaitenReconcile", "KaitenService", "KaitenTestSupport", "KaitenErrors",
                "KaitenFiles", "KaitenIndex", "KaitenPeer", "KaitenScan", "KaitenSelection", "KaitenStream", "KaitenTransfer", "KaitenMedia",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "KaitenCLITests", dependencies: ["KaitenTestThreads", "kaiten", "KaitenTestSupport", "KaitenIndex", "KaitenConfig", "KaitenProtocol"]),
        .testTarget(
            name: "InteropTests",
            dependencies: [
                "kaiten", "KaitenPeer", "KaitenConfig", "KaitenProtocol", "KaitenTestSupport", "KaitenTestThreads", "KaitenIndex", "KaitenSync",
                "KaitenSelection", "KaitenScan", "KaitenReconcile", "KaitenApply", "KaitenTransfer", "KaitenStream", "KaitenService",
                "KaitenDiscovery", "KaitenMedia", "KaitenMount", "KaitenEncryption",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
    ]
)
