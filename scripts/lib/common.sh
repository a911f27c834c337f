# Shared by scripts/test, scripts/demo and scripts/bench. Source it; do not run it.
#
# ensure_deps installs what a fresh Debian machine with Swift lacks: syncthing (the real peer
# the tests and the demo run against), liblz4-dev (BEP's LZ4 blocks), zlib1g-dev, pkg-config,
# curl, and systemd (for systemd-analyze, which checks the example units).

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

missing_deps() {
    local missing=()
    command -v syncthing >/dev/null 2>&1 || missing+=(syncthing)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    [[ -f /usr/include/lz4.h ]] || missing+=(liblz4-dev)
    [[ -f /usr/include/zlib.h ]] || missing+=(zlib1g-dev)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    # systemd-analyze verifies the example units (ExamplesTests).
    command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
    echo "${missing[@]:-}"
}

ensure_deps() {
    command -v swift >/dev/null 2>&1 || die "swift is not on PATH; install the Swift toolchain first (https://swift.org/install)"
    local missing
    missing=$(missing_deps)
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
    [[ -z $(missing_deps) ]] || die "still missing after apt-get: $(missing_deps)"
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
