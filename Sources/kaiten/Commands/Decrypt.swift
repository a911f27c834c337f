import ArgumentParser
import Foundation
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Decrypt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Decrypt a folder an untrusted device stores, offline, with its password.",
            discussion: """
                An untrusted device (a rented server, a friend's NAS) keeps only ciphertext of \
                the folders it holds: encrypted names cut into directories like \
                "K.syncthing-enc/UQ/…", each file's blocks sealed with XChaCha20-Poly1305 and its \
                metadata at its end. This reads such a folder, whether Kaiten or syncthing \
                stored it, and gives back the plain files: a recovery that needs no other \
                device, only the folder password. It reads what `syncthing decrypt` reads.

                Every block is checked twice: its tag (the bytes are those a trusted device \
                sealed, under this name) and then the SHA-256 of the plain block. A file is \
                written to a temporary name and renamed into place only when all its blocks \
                passed, with its mode and modification time; a file that fails is named with \
                the reason and leaves nothing behind. A destination file with the same content \
                is left as it is; one with other content is kept unless --overwrite.

                The password is read from a file (or stdin with -), never from the command \
                line, and never printed. The folder ID comes from the folder's token file \
                (.stfolder/syncthing-encryption_password_token), which also tells a wrong \
                password at once; without one, give --folder-id.

                Exit status: 0 when every file decrypted, 1 when any failed or the password is \
                wrong, 64 on a usage error.

                Examples:
                  kaiten decrypt /srv/untrusted/photos --password-file ~/.photos-pass --to ~/restored
                  kaiten decrypt /srv/untrusted/photos --password-file - --verify-only < pass
                  kaiten decrypt ./copy --folder-id photos --password-file pass --to out --json
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: ArgumentHelp("The encrypted folder.", valueName: "dir"))
        var source: String

        @Option(help: ArgumentHelp("A file holding the folder password (- for stdin); one trailing newline is not part of it.", valueName: "file"))
        var passwordFile: String

        @Option(help: ArgumentHelp("Write the plain files here (created if missing).", valueName: "dir"))
        var to: String?

        @Flag(help: "Decrypt and check every file, write nothing.")
        var verifyOnly = false

        @Option(help: ArgumentHelp("The folder's ID, when the folder has no token file.", valueName: "id"))
        var folderID: String?

        @Flag(help: "Replace destination files whose content differs.")
        var overwrite = false

        @Flag(help: "Print {folder_id, files: [{stored, name, size, status, error}], written, verified, unchanged, failed} as JSON.")
        var json = false

        func validate() throws {
            guard (to == nil) != (!verifyOnly) else { throw ValidationError("give either --to DIR or --verify-only") }
        }

        func run() async throws {
            try await reportingErrors {
                let password = try PasswordFile.read(passwordFile)
                var request = DecryptRequest(source: source, password: password, destination: verifyOnly ? nil : to)
                request.folderID = folderID
                request.overwrite = overwrite
                let run = try global.app.decrypt(request) { outcome in
                    guard !json else { return }
                    if outcome.status == .failed {
                        Terminal.error(EncryptionView.failure(outcome))
                    } else {
                        print(EncryptionView.line(outcome))
                    }
                }
                if json { try Terminal.json(DecryptRunDocument(run)) } else { print(EncryptionView.summary(run)) }
                if run.failed > 0 { throw VerbEnded(.failure) }
            }
        }
    }
}
