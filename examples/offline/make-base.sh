#!/usr/bin/env bash
# Makes the offline example's base image: a minbase debootstrap of Debian bookworm with Debian's
# own apt sources (archive, updates, security, as the debian:12 image has them), imported into the
# Docker daemon. Nothing is pulled from a registry; it needs deb.debian.org (or DEBIAN_MIRROR).
# The same steps as the real-build test's base (tests/it/real_build.rs, base_image()).
#
# Usage: bash examples/offline/make-base.sh [IMAGE]    IMAGE: default imagegen-example/bookworm:1
#        bash examples/offline/make-base.sh --help     prints this text
# Needs debootstrap and debian-archive-keyring (apt-get install debootstrap debian-archive-keyring),
# root for debootstrap (through sudo when not root) and access to the Docker daemon.
# About a minute on 2 cores (BENCHMARKS.md: 61 s); the image is 121 MB (49 MB compressed).
set -euo pipefail
image="imagegen-example/bookworm:1"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

fail() {
  echo "make-base.sh: $*" >&2
  exit 2
}

case "${1:-}" in
  -h | --help)
    sed -n '2,/^set -euo pipefail$/p' "${BASH_SOURCE[0]}" | sed '$d' | sed -E 's/^# ?//'
    exit 0
    ;;
  -*) fail "unknown option '$1' (--help prints the usage)" ;;
  "") ;;
  *) image="$1" ;;
esac
[ "$#" -le 1 ] || fail "one IMAGE at most (--help prints the usage)"

command -v docker >/dev/null || fail "the docker CLI is missing (Debian: apt-get install docker.io)"
[ -x /usr/sbin/debootstrap ] || fail "/usr/sbin/debootstrap is missing (Debian: apt-get install debootstrap debian-archive-keyring)"
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "$image is already in the daemon; remove it (docker rmi $image) to make it again"
  exit 0
fi
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)

work="$(mktemp -d)"
cleanup() { "${as_root[@]}" rm -rf "$work"; }
trap cleanup EXIT
rootfs="$work/rootfs"
echo "== [${SECONDS} s] debootstrap --variant=minbase bookworm from $mirror"
"${as_root[@]}" /usr/sbin/debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  fail "debootstrap failed (it needs root and $mirror); its log: $(tail -n 20 "$work/debootstrap.log")"
"${as_root[@]}" tee "$rootfs/etc/apt/sources.list.d/debian.sources" >/dev/null <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
# What a base image does not carry: the .deb files, apt's lists, logs, the old-style list.
"${as_root[@]}" sh -c "rm -rf '$rootfs/etc/apt/sources.list' '$rootfs'/var/cache/apt/archives/*.deb '$rootfs'/var/cache/apt/*.bin '$rootfs'/var/lib/apt/lists/* '$rootfs'/var/log/* '$rootfs'/tmp/*"
echo "== [${SECONDS} s] docker import $image"
"${as_root[@]}" tar --numeric-owner -C "$rootfs" -c . | docker import --change 'CMD ["bash"]' - "$image"
echo "== [${SECONDS} s] done: $image"
