import Testing

@testable import KaitenProtocol

/// Device-ID vectors from syncthing's own tests (lib/protocol/deviceid_test.go, luhn_test.go)
/// and from certificates checked against the real binary (bep-brief §3.2).
@Suite(.timeLimit(.minutes(5)))
struct DeviceIDTests {
    static let formatted = "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2"

    @Test func luhnVectorFromSyncthing() {
        #expect(Luhn32.checkCharacter(for: Array("AB725E4GHIQPL3ZFGT")) == "G")
    }

    @Test(arguments: [
        ("7f7c8723ecca5b4d22061c4981b34c34d865ec376be1eb74330873c9a6f9b205", formatted),
        (
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            "AAAQEAY-EAUDAOB-CAJBIFQ-YDIOB4B-IBCEQTC-QKRMFYX-YDENBWH-A5DYPQG"
        ),
        (
            "4b1193c862cf57daad57439ee4ef6161f82ace353523f80a00cd3d5ddb8ee7b1",
            "JMIZHSD-CZ5L5VC-LKXIOPO-J33BMH4-4CVTRVG-UR7QCQF-AZU6V3W-4O46YQ3"
        ),
    ])
    func formatsRawBytes(hex: String, want: String) throws {
        let id = try DeviceID(bytes: Self.bytes(hex))
        #expect(id.description == want)
        #expect(try DeviceID(want) == id)
    }

    /// Every spelling syncthing's TestFormatDeviceID accepts: grouping, spaces, lower case,
    /// 0/1/8 for O/I/B, and the old 52-character form without check characters.
    @Test(arguments: [
        "P56IOI-7MZJNU-2IQGDR-EYDM2M-GTMGL3-BXNPQ6-W5BTBB-Z4TJXZ-WICQ",
        "P56IOI-7MZJNU2Y-IQGDR-EYDM2M-GTI-MGL3-BXNPQ6-W5BM-TBB-Z4TJXZ-WICQ2",
        "P56IOI7 MZJNU2I QGDREYD M2MGTMGL 3BXNPQ6W 5BTB BZ4T JXZWICQ",
        "P56IOI7 MZJNU2Y IQGDREY DM2MGTI MGL3BXN PQ6W5BM TBBZ4TJ XZWICQ2",
        "P56IOI7MZJNU2IQGDREYDM2MGTMGL3BXNPQ6W5BTBBZ4TJXZWICQ",
        "p56ioi7mzjnu2iqgdreydm2mgtmgl3bxnpq6w5btbbz4tjxzwicq",
        "P56IOI7MZJNU2YIQGDREYDM2MGTIMGL3BXNPQ6W5BMTBBZ4TJXZWICQ2",
        "P561017MZJNU2YIQGDREYDM2MGTIMGL3BXNPQ6W5BMT88Z4TJXZWICQ2",
        "p56ioi7mzjnu2yiqgdreydm2mgtimgl3bxnpq6w5bmtbbz4tjxzwicq2",
        "p561017mzjnu2yiqgdreydm2mgtimgl3bxnpq6w5bmt88z4tjxzwicq2",
    ])
    func parsesEverySpellingSyncthingAccepts(_ text: String) throws {
        #expect(try DeviceID(text).description == Self.formatted)
    }

    @Test func wrongCheckCharacterIsATypo() {
        // Last character Q2 → Q3: the fourth group's check character no longer matches.
        let typo = "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ3"
        #expect(throws: DeviceIDError(input: typo, reason: .checkCharacterMismatch(group: 4))) {
            try DeviceID(typo)
        }
        let error = #expect(throws: DeviceIDError.self) { try DeviceID(typo) }
        #expect(error?.description.contains("check character") == true)
        // Said in the eight groups the ID is shown in: the typo is in the last two.
        #expect(error?.description.contains("ends group 8 of 8") == true, "\(error?.description ?? "")")
        #expect(error?.description.contains("group 7 or 8 is mistyped") == true, "\(error?.description ?? "")")
    }

    @Test(arguments: [
        "a",
        "P56IOI7MZJNU2IQGDREYDM2MGTMGL3BXNPQ6W5BTBBZ4TJXZWICQCCCC",
        "p56ioi7mzjnu2iqgdreydm2mgtmgl3bxnpq6w5btbbz4tjxzwicqCCCC",
        "",
        "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWIC!2",
    ])
    func rejectsMalformedIDs(_ text: String) {
        #expect(throws: DeviceIDError.self) { try DeviceID(text) }
    }

    @Test func shortIDIsTheFirstEightBytesBigEndian() throws {
        let id = try DeviceID("JMIZHSD-CZ5L5VC-LKXIOPO-J33BMH4-4CVTRVG-UR7QCQF-AZU6V3W-4O46YQ3")
        #expect(id.shortID == 0x4b11_93c8_62cf_57da)
        #expect(id.shortID == 5_409_267_116_309_174_234)
        #expect(id.shortDescription == "JMIZHSD")
    }

    @Test func rejectsWrongByteCount() {
        #expect(throws: DeviceIDError.self) { try DeviceID(bytes: [1, 2, 3]) }
    }

    static func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return out
    }
}

@Suite(.timeLimit(.minutes(1)))
struct LoopbackHostTests {
    @Test(arguments: ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LocalHost", "0:0:0:0:0:0:0:1"])
    func loopback(_ host: String) { #expect(LoopbackHost.contains(host)) }

    /// A name that begins like a loopback address resolves wherever its DNS says.
    @Test(arguments: ["127.attacker.example", "127.0.0.1.nip.io", "0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "", "localhost.example", "::2"])
    func notLoopback(_ host: String) { #expect(!LoopbackHost.contains(host)) }
}
