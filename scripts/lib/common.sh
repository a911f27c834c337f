# Shared by scripts/test, scripts/demo and scripts/bench. Source it; do not run it.
#
# ensure_deps installs what a fresh Debian machine with Swift lacks: syncthing (the real peer
# the tests and the demo run against), liblz4-dev (BEP's LZ4 blocks), zlib1g-dev, libxml2-dev
# (FoundationXML links it), pkg-config, libvips-dev and ffmpeg's -dev libraries (the
# kaiten-media helper's decoders), ffmpeg, exiftool and heif-enc (the media tests make their
# files), curl, systemd (for systemd-analyze, which checks the example units) and iproute2
# (network namespaces for the discovery tests). ensure_build_deps installs only what building the
# release binaries needs (scripts/install, scripts/package); ensure_packaging_deps what making
# and checking the .deb needs (dpkg-dev for dpkg-shlibdeps, lintian, man-db for `man -w`).

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

missing_build_deps() {
    local missing=()
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    [[ -f /usr/include/lz4.h ]] || missing+=(liblz4-dev)
    [[ -f /usr/include/zlib.h ]] || missing+=(zlib1g-dev)
    [[ -f /usr/include/libxml2/libxml/parser.h ]] || missing+=(libxml2-dev)
    # The kaiten-media helper's decoders: libvips (images) and ffmpeg's libraries (video frames).
    pkg-config --exists vips 2>/dev/null || missing+=(libvips-dev)
    pkg-config --exists libavformat libavcodec libswscale libavutil 2>/dev/null \
        || missing+=(libavformat-dev libavcodec-dev libswscale-dev libavutil-dev)
    # kaiten mount: libfuse 3 (the library kaiten links, and fusermount3 to unmount as a user).
    pkg-config --exists fuse3 2>/dev/null || missing+=(libfuse3-dev)
    command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
    echo "${missing[@]:-}"
}

missing_deps() {
    local missing=()
    command -v syncthing >/dev/null 2>&1 || missing+=(syncthing)
    # shellcheck disable=SC2207
    missing+=($(missing_build_deps))
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    # systemd-analyze verifies the example units (ExamplesTests).
    command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
    # ip makes the network namespaces the discovery tests run their parties in.
    [[ -x /usr/sbin/ip ]] || missing+=(iproute2)
    # The media tests make their pictures and videos with ffmpeg and write EXIF with exiftool.
    command -v ffmpeg >/dev/null 2>&1 || missing+=(ffmpeg)
    command -v exiftool >/dev/null 2>&1 || missing+=(libimage-exiftool-perl)
    command -v heif-enc >/dev/null 2>&1 || missing+=(libheif-examples)
    # The web page is tested in a real browser: Debian's Chromium, driven through chromedriver.
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
    # And in Firefox (ESR, Debian's), driven through its own Marionette protocol (no geckodriver
    # in Debian): the page must work in both.
    command -v firefox-esr >/dev/null 2>&1 || missing+=(firefox-esr)
    # The mount is tested with what users run on it: find, rsync, ffprobe (ffmpeg), getfattr (attr).
    command -v rsync >/dev/null 2>&1 || missing+=(rsync)
    command -v getfattr >/dev/null 2>&1 || missing+=(attr)
    echo "${missing[@]:-}"
}

# The discovery and relay servers the discovery tests run: Debian's syncthing-discosrv and
# syncthing-relaysrv (1.19.2), unpacked into .build/peer-servers rather than installed, because
# installing them enables system services that serve anyone on ports 8443 and 22067. The tests
# find them through KAITEN_STDISCOSRV and KAITEN_STRELAYSRV.
PEER_SERVERS="$ROOT/.build/peer-servers"
ensure_peer_servers() {
    export KAITEN_STDISCOSRV="$PEER_SERVERS/usr/bin/stdiscosrv" KAITEN_STRELAYSRV="$PEER_SERVERS/usr/bin/strelaysrv"
    [[ -x $KAITEN_STDISCOSRV && -x $KAITEN_STRELAYSRV ]] && return 0
    log "unpacking syncthing-discosrv and syncthing-relaysrv into $PEER_SERVERS (not installed: no services start)"
    local tmp sudo=()
    tmp=$(mktemp -d)
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    if ! (cd "$tmp" && apt-get download -qq syncthing-discosrv syncthing-relaysrv 2>/dev/null); then
        "${sudo[@]}" apt-get update -qq
        (cd "$tmp" && apt-get download -qq syncthing-discosrv syncthing-relaysrv 2>/dev/null) \
            || die "cannot download syncthing-discosrv and syncthing-relaysrv with apt-get"
    fi
    mkdir -p "$PEER_SERVERS"
    local deb
    for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$PEER_SERVERS"; done
    rm -rf "$tmp"
    [[ -x $KAITEN_STDISCOSRV && -x $KAITEN_STRELAYSRV ]] || die "no stdiscosrv/strelaysrv in the unpacked packages"
}

# promtool, which checks the REST API's /metrics as Prometheus reads it: Debian's prometheus
# package unpacked beside the peer servers rather than installed, because installing it starts a
# Prometheus server on port 9090. The tests find it through KAITEN_PROMTOOL.
ensure_promtool() {
    export KAITEN_PROMTOOL="$PEER_SERVERS/usr/bin/promtool"
    [[ -x $KAITEN_PROMTOOL ]] && return 0
    log "unpacking prometheus's promtool into $PEER_SERVERS (not installed: no server starts)"
    local tmp sudo=()
    tmp=$(mktemp -d)
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    if ! (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null); then
        "${sudo[@]}" apt-get update -qq
        (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null) || die "cannot download prometheus with apt-get"
    fi
    mkdir -p "$PEER_SERVERS"
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/unpacked"
    install -D -m 0755 "$tmp/unpacked/usr/bin/promtool" "$KAITEN_PROMTOOL"
    rm -rf "$tmp"
}

missing_packaging_deps() {
    local missing=()
    command -v dpkg-shlibdeps >/dev/null 2>&1 || missing+=(dpkg-dev)
    command -v lintian >/dev/null 2>&1 || missing+=(lintian)
    command -v man >/dev/null 2>&1 || missing+=(man-db)
    echo "${missing[@]:-}"
}

# kaiten-bench talks to syncthing's REST API through FoundationNetworking, which, linked
# statically (RELEASE_FLAGS), needs libcurl's development library.
missing_bench_deps() {
    local missing=()
    # shellcheck disable=SC2207
    missing+=($(missing_deps))
    ls /usr/lib/*/libcurl.so >/dev/null 2>&1 || missing+=(libcurl4-openssl-dev)
    # The thumbnail bench runs libvips's own vipsthumbnail beside kaiten thumb.
    command -v vipsthumbnail >/dev/null 2>&1 || missing+=(libvips-tools)
    # The mount bench runs rclone mount and rclone serve http beside kaiten mount.
    command -v rclone >/dev/null 2>&1 || missing+=(rclone)
    # The scale bench plots its curves.
    command -v gnuplot >/dev/null 2>&1 || missing+=(gnuplot-nox)
    echo "${missing[@]:-}"
}

ensure_deps() { install_missing missing_deps; }
ensure_bench_deps() { install_missing missing_bench_deps; }
ensure_build_deps() { install_missing missing_build_deps; }
ensure_packaging_deps() { install_missing missing_packaging_deps; }

# install_missing CHECK: apt-get installs the packages the function CHECK names, if any.
install_missing() {
    local check=$1
    command -v swift >/dev/null 2>&1 || die "swift is not on PATH; install the Swift toolchain first (https://swift.org/install)"
    local missing
    missing=$($check)
    [[ -z $missing ]] && return 0
    log "installing: $missing"
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to install: $missing"
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    # shellcheck disable=SC2086
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends $missing >/dev/null
    [[ -z $($check) ]] || die "still missing after apt-get: $($check)"
}

# The release build: the Swift runtime and Foundation linked into the binary, so that it runs
# where no Swift toolchain is (it needs glibc, libstdc++, zlib, liblz4 and libxml2 only), and no
# $ORIGIN run path. Every release build uses these flags (install, package, bench): SwiftPM
# recompiles every module when they change, so mixing them would rebuild from scratch each time.
# -z now: every symbol bound at start, so that with RELRO the whole GOT is read-only (Debian's
# hardening "bindnow"; RELRO itself is the linker's default).
RELEASE_FLAGS=(-c release --static-swift-stdlib --disable-local-rpath -Xlinker -z -Xlinker now)

# build_release: builds kaiten, its media helper kaiten-media, and swift-argument-parser's generate-manual (the engine of its
# generate-manual plugin, built here with the same flags: the plugin would make a second
# release build with its own) and prints the directory that holds them.
build_release() {
    log "building kaiten (release, Swift runtime linked in; the first build takes minutes)"
    (cd "$ROOT" && swift build "${RELEASE_FLAGS[@]}" --product kaiten >&2)
    (cd "$ROOT" && swift build "${RELEASE_FLAGS[@]}" --product kaiten-media >&2)
    (cd "$ROOT" && swift build "${RELEASE_FLAGS[@]}" --product generate-manual >&2)
    (cd "$ROOT" && swift build "${RELEASE_FLAGS[@]}" --show-bin-path)
}

# The date the generated manual pages carry: the last commit's, so that the same source makes
# the same pages (today's date outside a git checkout).
source_date() {
    git -C "$ROOT" log -1 --format=%cs 2>/dev/null || date -u +%F
}

# stage_tree BINDIR DEST PREFIX FLAVOUR: lays out everything an installation holds under
# DEST/PREFIX: the binary (stripped), one manual page per command (`man kaiten-index-sync`),
# completions for bash, zsh and fish, the systemd user units from examples/ (their ExecStart
# pointing at PREFIX/bin/kaiten) and the examples and README under share/doc/kaiten.
# FLAVOUR is "local" (scripts/install) or "deb" (scripts/package): Debian's zsh reads packaged
# completions from vendor-completions, a /usr/local one from site-functions.
stage_tree() {
    local bindir=$1 dest=$2 prefix=$3 flavour=$4
    local root="$dest$prefix"
    install -d -m 0755 "$root/bin"
    # Stripped as dh_strip strips (no symbols, no .comment or .note): 78 MiB instead of 152.
    install -m 0755 "$bindir/kaiten" "$root/bin/kaiten"
    strip --remove-section=.comment --remove-section=.note "$root/bin/kaiten"
    # The decoders' process (thumbnails), where `kaiten thumb` and `serve` look for it.
    install -d -m 0755 "$root/lib/kaiten"
    install -m 0755 "$bindir/kaiten-media" "$root/lib/kaiten/kaiten-media"
    strip --remove-section=.comment --remove-section=.note "$root/lib/kaiten/kaiten-media"

    local pages
    pages=$(mktemp -d)
    "$bindir/generate-manual" "$bindir/kaiten" --multi-page --date "$(source_date)" \
        --output-directory "$pages" >/dev/null
    install -d -m 0755 "$root/share/man/man1"
    local page name command
    for page in "$pages"/*.1; do
        # generate-manual names a subcommand's page kaiten.index.sync; git's convention
        # (man kaiten-index-sync) is what people type. The page is renamed, and so are its title,
        # its cross-references and the NAME entry (whatis and apropos index that one name); the
        # synopsis keeps the command as typed. A blank line becomes the paragraph macro (troff
        # reads a blank line as text).
        name=$(basename "$page" .1)
        command=${name//./ }
        name=${name//./-}
        sed -e '/^\.Dt /s/\./-/2g' -e '/^\.Xr kaiten\./s/\./-/2g' "$page" \
            | awk -v page="$name" -v command="$command" '
                /^\.Nm / && !named { print ".Nm " page; named = 1; next }
                /^\.Nm$/ { print ".Nm \"" command "\""; next }
                /^$/ { print ".Pp"; next }
                { print }' \
            | gzip -9n >"$root/share/man/man1/$name.1.gz"
        chmod 0644 "$root/share/man/man1/$name.1.gz"
    done
    rm -rf "$pages"

    local zsh_dir=site-functions
    [[ $flavour == deb ]] && zsh_dir=vendor-completions
    install -d -m 0755 "$root/share/bash-completion/completions" "$root/share/zsh/$zsh_dir" \
        "$root/share/fish/vendor_completions.d"
    # bash sources a completion file; its #! line would only mislead.
    "$bindir/kaiten" --generate-completion-script bash | sed '1{/^#!/d}' >"$root/share/bash-completion/completions/kaiten"
    "$bindir/kaiten" --generate-completion-script zsh >"$root/share/zsh/$zsh_dir/_kaiten"
    "$bindir/kaiten" --generate-completion-script fish >"$root/share/fish/vendor_completions.d/kaiten.fish"
    chmod 0644 "$root/share/bash-completion/completions/kaiten" "$root/share/zsh/$zsh_dir/_kaiten" \
        "$root/share/fish/vendor_completions.d/kaiten.fish"

    # systemd looks for user units in PREFIX/lib/systemd/user for /usr and /usr/local, and in
    # ~/.local/share/systemd/user for a prefix of ~/.local.
    local units="$root/lib/systemd/user"
    [[ -n ${HOME:-} && $prefix == "$HOME/.local" ]] && units="$root/share/systemd/user"
    install -d -m 0755 "$units"
    local unit
    for unit in "$ROOT"/examples/systemd/*.service "$ROOT"/examples/systemd/*.timer; do
        sed "s|/usr/local/bin/kaiten|$prefix/bin/kaiten|g" "$unit" >"$units/$(basename "$unit")"
        chmod 0644 "$units/$(basename "$unit")"
    done

    local doc="$root/share/doc/kaiten"
    install -d -m 0755 "$doc/examples"
    cp -R "$ROOT"/examples/. "$doc/examples/"
    find "$doc/examples" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
    install -m 0644 "$ROOT/README.md" "$doc/README.md"
}

# A TCP port on 127.0.0.1 that nothing listens on.
free_port() {
    local port
    for _ in $(seq 1 100); do
        port=$((20000 + RANDOM % 20000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    die "no free port found"
}
