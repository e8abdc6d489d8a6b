#!/usr/bin/env bash
# Makes the offline example's base image: a minbase debootstrap of a Debian suite (trixie, Debian
# 13, unless --suite names another) with Debian's own apt sources (archive, updates, security, as
# the debian:13 image has them), imported into the Docker daemon. Nothing is pulled from a
# registry; it needs deb.debian.org (or DEBIAN_MIRROR). The same steps as the real-build test's
# base (tests/it/support/debian.rs).
#
# Usage: bash examples/offline/make-base.sh [--suite SUITE] [IMAGE]
#          SUITE: trixie by default (the example's os: debian13); bookworm for a debian12 cell
#          IMAGE: default imagegen-example/SUITE:1
#        bash examples/offline/make-base.sh --help     prints this text
# Needs debootstrap and debian-archive-keyring (apt-get install debootstrap debian-archive-keyring),
# root for debootstrap (through sudo when not root) and access to the Docker daemon.
# About a minute on 2 cores (BENCHMARKS.md: 61 s for bookworm); the bookworm image is 121 MB
# (49 MB compressed).
set -euo pipefail
suite="trixie"
image=""
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

fail() {
  echo "make-base.sh: $*" >&2
  exit 2
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help)
      sed -n '2,/^set -euo pipefail$/p' "${BASH_SOURCE[0]}" | sed '$d' | sed -E 's/^# ?//'
      exit 0
      ;;
    --suite)
      [ "$#" -ge 2 ] || fail "--suite needs a suite name (--help prints the usage)"
      suite="$2"
      shift 2
      ;;
    --suite=*)
      suite="${1#--suite=}"
      shift
      ;;
    -*) fail "unknown option '$1' (--help prints the usage)" ;;
    *)
      [ -z "$image" ] || fail "one IMAGE at most (--help prints the usage)"
      image="$1"
      shift
      ;;
  esac
done
case "$suite" in
  "" | *[!a-z]*) fail "'$suite' is not a Debian suite name (trixie, bookworm, ...)" ;;
esac
image="${image:-imagegen-example/$suite:1}"

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
echo "== [${SECONDS} s] debootstrap --variant=minbase $suite from $mirror"
"${as_root[@]}" /usr/sbin/debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  fail "debootstrap failed (it needs root and $mirror); its log: $(tail -n 20 "$work/debootstrap.log")"
"${as_root[@]}" tee "$rootfs/etc/apt/sources.list.d/debian.sources" >/dev/null <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
# What a base image does not carry: the .deb files, apt's lists, logs, the old-style list.
"${as_root[@]}" sh -c "rm -rf '$rootfs/etc/apt/sources.list' '$rootfs'/var/cache/apt/archives/*.deb '$rootfs'/var/cache/apt/*.bin '$rootfs'/var/lib/apt/lists/* '$rootfs'/var/log/* '$rootfs'/tmp/*"
echo "== [${SECONDS} s] docker import $image"
"${as_root[@]}" tar --numeric-owner -C "$rootfs" -c . | docker import --change 'CMD ["bash"]' - "$image"
echo "== [${SECONDS} s] done: $image"
