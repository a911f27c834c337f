import ArgumentParser
import Foundation
import KaitenApp
import KaitenTerminal

extension Kaiten {
    struct Thumb: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make thumbnails of a folder's images and videos, local or only on peers.",
            discussion: """
                Thumbnails go to a cache keyed by content, in Sushitrain's layout: the file's \
                blocks hash in base64, lower-cased, only a-z0-9 kept, the first two characters \
                as two directory levels, .jpg, neither side over 255 px. Point --cache into a \
                synced folder and the phones running Sushitrain use the thumbnails this machine \
                makes (and the other way round). A thumbnail already in the cache is not made again.

                A local copy is read from disk. For a file only on peers, as few bytes as \
                possible are fetched, every block SHA-256-verified: a JPEG's EXIF thumbnail from \
                its first block when it has one (160 px or more on its long side); a video's \
                frame through ranges (the decoder seeks; only the blocks it reads are fetched); \
                other images whole. Decoding runs in kaiten-media helper processes (libvips, \
                ffmpeg), one per core, each with a memory limit: a damaged or hostile file costs \
                its own thumbnail, with the reason, never the run.

                Formats: JPEG, PNG, WebP, HEIC/HEIF/AVIF, GIF, TIFF; MP4, MOV, MKV, WebM, AVI \
                and other containers ffmpeg reads. Other files are left out.

                Exit status: 0 when every thumbnail was made or found, 1 when any failed.

                Examples:
                  kaiten thumb photos 2024 --recursive
                  kaiten thumb photos --recursive --cache ~/Sync/thumbnails
                  kaiten thumb media film.mkv --json | jq -r '.files[0].thumbnail'
                """)

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The folder ID.")
        var folder: String

        @Argument(help: "Files or directories, folder-relative (the whole folder when none).")
        var paths: [String] = []

        @Flag(name: [.customShort("R"), .long], help: "Go into subdirectories.")
        var recursive = false

        @Option(help: "Neither side larger than this many pixels (16 to 255; 255 is the shared cache's size).")
        var size: Int = ThumbnailCache.sharedSize

        @Option(help: ArgumentHelp("The cache directory (default: the home's thumbnails/).", valueName: "dir"))
        var cache: String?

        @Flag(help: "Make thumbnails again even when the cache has them.")
        var force = false

        @Option(help: "Refuse images (other than JPEG) and video frames larger than this.")
        var maxMegapixels: Int = 64

        @Flag(help: "Print {files: [{path, status, thumbnail, width, height, method, local, size, error}], counts, fetched bytes} as JSON.")
        var json = false

        func validate() throws {
            guard (16...ThumbnailLimits.largest).contains(size) else { throw ValidationError("--size takes 16 to \(ThumbnailLimits.largest)") }
            guard maxMegapixels > 0 else { throw ValidationError("--max-megapixels takes a positive number") }
        }

        func run() async throws {
            try await reportingErrors {
                var request = ThumbnailRequest(folder: folder, paths: paths)
                request.recursive = recursive
                request.options.size = size
                request.options.force = force
                request.options.maxPixels = Int64(maxMegapixels) * 1_000_000
                request.cache = cache
                let run = try await global.app.thumbnails(request, done: show)
                if json { try Terminal.json(ThumbnailRunDocument(run)) } else { print(MediaView.summary(run)) }
                if run.outcomes.contains(where: { $0.status == .failed }) { throw VerbEnded(.failure) }
            }
        }

        /// One file's line (text mode; --json prints everything at the end).
        func show(_ outcome: ThumbnailOutcome) {
            guard !json else { return }
            if let line = MediaView.line(outcome) { print(line) } else { Terminal.error("\(folder)/\(outcome.path): \(outcome.error ?? "failed")") }
        }
    }
}
