#!/usr/bin/env bash
# Fetches Debian's fuse3 source and builds libfuse's example/passthrough_hp once into a
# cache directory outside the repository, keyed by the Debian version and the meson
# options; prints the binary's path on stdout (everything else goes to stderr).
#
#   bash benches/support/passthrough_hp.sh   # -> ~/.cache/reftablefs/bench/fuse3_3.17.2-3-<key>/build/example/passthrough_hp
#
# Version: 3.17.2-3 (Debian trixie) by default. It is the first Debian fuse3 whose
# passthrough_hp has kernel passthrough (FUSE_PASSTHROUGH: reads and writes go from the
# kernel straight to the backing file, on unless --nopassthrough); bookworm's 3.14.0-4
# has none, and FLOOR_FUSE3_VERSION=3.14.0-4 builds that one for a comparison.
#
# Source: `apt-get source fuse3=VERSION` when a configured deb-src entry offers that
# version (this script adds none), else the pinned .dsc and tarballs from deb.debian.org's
# pool, checked against pinned SHA-256 sums and unpacked with dpkg-source (Debian's
# patches applied either way). Build: meson + ninja, the library and the examples only
# (-Dutils=false -Dtests=false; upstream's default buildtype debugoptimized, -O2 -g); the
# example links the library built beside it, not the system's libfuse3. Build
# dependencies: meson and ninja-build (installed with apt-get when missing and we are
# root), a C and C++ compiler, pkg-config, dpkg-dev (dpkg-source), curl.
#
# Variables: FLOOR_CACHE (cache root), FLOOR_FUSE3_VERSION, FLOOR_FUSE3_POOL (pool URL
# of the fallback), FLOOR_NO_APT=1 (the pinned files only), FLOOR_NO_INSTALL=1 (never
# apt-get install the build tools). Exit status 0 with the path printed, else non-zero
# with the reason on stderr (the benchmark then prints a SKIP line).
set -euo pipefail

cache_root=${FLOOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reftablefs/bench}
version=${FLOOR_FUSE3_VERSION:-3.17.2-3}
pool=${FLOOR_FUSE3_POOL:-http://deb.debian.org/debian/pool/main/f/fuse3}
meson_opts=(--buildtype=debugoptimized -Dexamples=true -Dutils=false -Dtests=false -Duseroot=false)

log() { echo "passthrough_hp: $*" >&2; }

# Pinned fallback: file name and SHA-256 of each part of the source package.
case "$version" in
    3.17.2-3) pinned=(
        "fuse3_3.17.2-3.dsc 1339847e7e6512f31d61cf1fe4598341c4b8aa43ea6dc546914b21f96f29deb3"
        "fuse3_3.17.2.orig.tar.gz 3d932431ad94e86179e5265cddde1d67aa3bb2fb09a5bd35c641f86f2b5ed06f"
        "fuse3_3.17.2.orig.tar.gz.asc df18d3972c68dd0e8f7ad2a544a24ac54d48aa4b42d99b717448f7fe8e71cea4"
        "fuse3_3.17.2-3.debian.tar.xz eaf7a177761ae8bf99ea97619f2cccf83f169b4f000e17b6106834e69456b5a2"
    ) ;;
    3.14.0-4) pinned=(
        "fuse3_3.14.0-4.dsc 84a6d64bbcd5dda71276393a1cca300543932aa3a822859d0f799c7ee29227cc"
        "fuse3_3.14.0.orig.tar.xz 96115b2a8ff34bd1e0c7b00c5dfd8297571d7e165042b94498c9a26356a9a70a"
        "fuse3_3.14.0.orig.tar.xz.asc 246ae20731da98c5f5a5cf6cdf8d10aa54ea986b4e71fe24805154b186ad30d0"
        "fuse3_3.14.0-4.debian.tar.xz 671b7cb079f845c4032e0796e1a45426fa8e5602ffda438335f8f0483289c69f"
    ) ;;
    *) pinned=() ;;
esac

upstream=${version%%-*}
key=$(printf '%s\n' "$version" "${meson_opts[@]}" | sha256sum | cut -c1-12)
dir="$cache_root/fuse3_$version-$key"
src="$dir/fuse3-$upstream"
build="$dir/build"
bin="$build/example/passthrough_hp"
mkdir -p "$dir"

# One fetch/build at a time per cache entry (two benchmarks started together share it).
exec 9>"$dir/.lock"
flock 9

if [ -x "$bin" ] && [ -f "$dir/.built" ]; then
    echo "$bin"
    exit 0
fi

fetch_with_apt() {
    command -v apt-cache >/dev/null 2>&1 || return 1
    # Only a deb-src entry already configured: the version must be one it offers.
    timeout 60 apt-cache showsrc fuse3 2>/dev/null </dev/null | grep -qx "Version: $version" || {
        log "no configured deb-src entry offers fuse3 $version"
        return 1
    }
    (cd "$dir" && timeout 600 apt-get source -qq "fuse3=$version" </dev/null >&2)
}

fetch_pinned() {
    [ "${#pinned[@]}" -gt 0 ] || { log "no pinned files for fuse3 $version"; return 1; }
    local entry name sum
    for entry in "${pinned[@]}"; do
        read -r name sum <<<"$entry"
        log "downloading $pool/$name"
        timeout 300 curl -fsSL --retry 3 --connect-timeout 20 -o "$dir/$name" "$pool/$name" || return 1
        echo "$sum  $dir/$name" | sha256sum -c --quiet - >&2 || return 1
    done
    (cd "$dir" && timeout 300 dpkg-source -x "${pinned[0]%% *}" "fuse3-$upstream" >&2)
}

if [ ! -f "$src/.reftablefs-unpacked" ]; then
    rm -rf "$src"
    log "fetching fuse3 $version source into $dir"
    if [ -n "${FLOOR_NO_APT:-}" ] || ! fetch_with_apt; then
        rm -rf "$src"
        fetch_pinned || { log "could not fetch fuse3 $version source"; exit 1; }
    fi
    [ -f "$src/example/passthrough_hp.cc" ] || { log "$src: no example/passthrough_hp.cc"; exit 1; }
    touch "$src/.reftablefs-unpacked"
fi

need=()
command -v meson >/dev/null 2>&1 || need+=(meson)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || [ -n "${FLOOR_NO_INSTALL:-}" ]; then
        log "missing build tools: ${need[*]} (apt-get install ${need[*]})"
        exit 1
    fi
    log "installing build tools: ${need[*]}"
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends "${need[@]}" </dev/null >&2 || {
        log "apt-get install ${need[*]} failed"
        exit 1
    }
fi
command -v c++ >/dev/null 2>&1 || { log "no C++ compiler (apt-get install g++)"; exit 1; }

log "building example/passthrough_hp in $build (meson ${meson_opts[*]}, niced)"
start=$(date +%s)
rm -rf "$build"
{
    timeout 600 nice -n 10 meson setup "${meson_opts[@]}" "$build" "$src" &&
        timeout 1200 nice -n 10 ninja -C "$build" -j2 example/passthrough_hp
} >"$dir/build.log" 2>&1 || {
    tail -n 30 "$dir/build.log" >&2
    log "build failed (log: $dir/build.log)"
    exit 1
}
"$bin" --help >/dev/null 2>&1 || { log "$bin --help failed"; exit 1; }
printf '%s\n' "$version" "${meson_opts[@]}" >"$dir/.built"
log "built in $(($(date +%s) - start))s"
echo "$bin"
