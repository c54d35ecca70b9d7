#!/usr/bin/env bash
# Fetches Debian bookworm's git 2.39 source and builds it once into a cache directory
# outside the repository, keyed by the Debian version and the make flags; prints the
# built tree's path on stdout (everything else goes to stderr).
#
#   bash tests/git-suite/fetch-build.sh        # -> /root/.cache/reftablefs/git-suite/git_2.39.5-0+deb12u3-<key>/git-2.39.5
#
# Source: `apt-get source git=$GIT_SUITE_DEB_VERSION` (a deb-src entry for bookworm is
# added under /etc/apt/sources.list.d when none is configured and we are root), else the
# pinned .dsc and tarballs from deb.debian.org's pool, checked against pinned SHA-256 sums
# and unpacked with dpkg-source (Debian's patches applied either way). The version must be
# 2.39.x. Each run also (re)writes t/test-lib.sh from the pristine copy plus
# tests/git-suite/test-lib.patch, so a changed patch needs no rebuild.
#
# Variables: GIT_SUITE_CACHE (cache root), GIT_SUITE_JOBS (make -j, at most 2),
# GIT_SUITE_DEB_VERSION, GIT_SUITE_POOL (pool URL of the fallback), GIT_SUITE_NO_APT=1
# (skip apt-get source: the pinned files only).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${GIT_SUITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reftablefs/git-suite}
deb_version=${GIT_SUITE_DEB_VERSION:-1:2.39.5-0+deb12u3}
pool=${GIT_SUITE_POOL:-http://deb.debian.org/debian/pool/main/g/git}
jobs=${GIT_SUITE_JOBS:-2}
[ "$jobs" -le 2 ] 2>/dev/null || jobs=2

# The build the issue names, plus NO_OPENSSL/NO_EXPAT: with NO_CURL nothing the tests run
# needs OpenSSL (imap-send) or expat (http-push), and CI then needs no libssl-dev.
make_flags=(NO_GETTEXT=1 NO_TCLTK=1 NO_CURL=1 NO_PYTHON=1 NO_OPENSSL=1 NO_EXPAT=1)

# Pinned fallback: file name and SHA-256 of each part of the source package.
pinned=(
    "git_2.39.5-0+deb12u3.dsc 183f02891326496b439a24c87843fb8849178b21517640fc703787754aad6bd1"
    "git_2.39.5.orig.tar.xz c58da92c378df4a986ca33266897a7397e86c22ee266a284d8c2432c39066b59"
    "git_2.39.5-0+deb12u3.debian.tar.xz b19cbf9a483a6625d924119ebe99f997acfe83616906d33d2079ca3d7d668d22"
)

log() { echo "git-suite: $*" >&2; }

upstream=${deb_version#*:}
upstream=${upstream%%-*}
case "$upstream" in
    2.39.*) ;;
    *) log "GIT_SUITE_DEB_VERSION=$deb_version is not git 2.39.x"; exit 1 ;;
esac
key=$(printf '%s\n' "$deb_version" "${make_flags[@]}" | sha256sum | cut -c1-12)
dir="$cache_root/git_${deb_version#*:}-$key"
src="$dir/git-$upstream"
mkdir -p "$dir"

# One fetch/build at a time per cache entry (two runners started together share it).
exec 9>"$dir/.lock"
flock 9

fetch_with_apt() {
    if ! grep -rqs '^[^#]*deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        if [ "$(id -u)" -ne 0 ]; then
            log "no deb-src entry in /etc/apt and not root: skipping apt-get source"
            return 1
        fi
        log "adding a deb-src entry for bookworm (/etc/apt/sources.list.d/reftablefs-git-src.sources)"
        cat >/etc/apt/sources.list.d/reftablefs-git-src.sources <<'EOF'
# Added by reftablefs tests/git-suite/fetch-build.sh: Debian's git source for the git-suite harness.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
        apt-get update -qq </dev/null >&2 || return 1
    fi
    (cd "$dir" && apt-get source -qq "git=$deb_version" </dev/null >&2)
}

fetch_pinned() {
    [ "$deb_version" = "1:2.39.5-0+deb12u3" ] || { log "no pinned URLs for $deb_version"; return 1; }
    local entry name sum
    for entry in "${pinned[@]}"; do
        read -r name sum <<<"$entry"
        log "downloading $pool/$name"
        curl -fsSL --retry 3 -o "$dir/$name" "$pool/${name//+/%2b}" || return 1
        echo "$sum  $dir/$name" | sha256sum -c --quiet - >&2 || return 1
    done
    (cd "$dir" && dpkg-source -x "${pinned[0]%% *}" >&2)
}

if [ ! -f "$src/.reftablefs-unpacked" ]; then
    rm -rf "$src"
    log "fetching git $deb_version source into $dir"
    if [ -n "${GIT_SUITE_NO_APT:-}" ] || ! fetch_with_apt; then
        log "apt-get source failed; trying the pinned source package"
        rm -rf "$src"
        fetch_pinned || { log "could not fetch git $deb_version source"; exit 1; }
    fi
    [ -f "$src/GIT-VERSION-GEN" ] || { log "$src: not a git source tree"; exit 1; }
    cp "$src/t/test-lib.sh" "$src/t/test-lib.sh.orig"
    touch "$src/.reftablefs-unpacked"
fi

if [ ! -f "$src/.reftablefs-built" ]; then
    log "building git $upstream in $src (make -j$jobs ${make_flags[*]}, niced)"
    start=$(date +%s)
    nice -n 10 make -C "$src" -j"$jobs" "${make_flags[@]}" all >"$dir/build.log" 2>&1 || {
        tail -n 30 "$dir/build.log" >&2
        log "build failed (log: $dir/build.log)"
        exit 1
    }
    "$src/git" --version | grep -q "^git version $upstream" || { log "built git is not $upstream"; exit 1; }
    printf '%s\n' "${make_flags[@]}" >"$src/.reftablefs-built"
    log "built in $(( $(date +%s) - start ))s"
fi

# test-lib.sh = pristine + our hook points, rewritten when the patch changed.
if ! cmp -s "$here/test-lib.patch" "$src/t/.reftablefs-test-lib.patch"; then
    cp "$src/t/test-lib.sh.orig" "$src/t/test-lib.sh"
    patch -s -p1 -d "$src" <"$here/test-lib.patch" >&2 || { log "test-lib.patch does not apply"; exit 1; }
    cp "$here/test-lib.patch" "$src/t/.reftablefs-test-lib.patch"
fi

echo "$src"
