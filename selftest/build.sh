#!/usr/bin/env bash
# Builds gpu-selftest once per CUDA major (and architecture) for glibc 2.17, so the binaries run
# on Ubuntu 20.04 and later, and places them where imagegen's build copies them from
# (relative to the repository root):
#   target/selftest/gpu-selftest-cu11, -cu12, -cu13          (x86_64)
#   target/selftest/gpu-selftest-cu12-arm64, -cu13-arm64    (aarch64 / SBSA, linux/arm64 images)
#
# Usage: bash selftest/build.sh [BUILD...]   BUILD: cu11 cu12 cu13 cu11-arm64 cu12-arm64 cu13-arm64
#        bash selftest/build.sh --help       prints this text
# Without arguments it builds only what the repository's matrix needs: the distinct `selftest`
# values of the images `imagegen resolve --format json` prints (IMAGEGEN_PROJECT=DIR or
# IMAGEGEN_MATRIX=FILE: another project's matrix). imagegen's release build answers when there is
# one, else its debug build (cargo brings either up to date first); with neither, a debug build of
# imagegen comes first, a few minutes on 2 cores (BENCHMARKS.md: its release build took 3 min 20 s
# cold); naming the builds skips it.
#
# Needs a Rust toolchain (cargo, rustc), python3 with its venv module, and readelf (binutils).
# It installs the rest under target/tools/ when missing, never into the system:
#   zig            PyPI's ziglang, in the virtual environment target/tools/zigenv
#   cargo-zigbuild cargo install --locked --root target/tools
#   cargo-auditable cargo install --locked --root target/tools: every binary carries its crates
#                  (name, version, source) in a `.dep-v0` section that syft, trivy and grype read
# Versions: selftest/tool-versions.sh.
# An aarch64 build also needs the Rust standard library for aarch64-unknown-linux-gnu
# (`rustup target add aarch64-unknown-linux-gnu`); without it the script stops before building.
set -euo pipefail
repository_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repository_root"
glibc_floor="2.17"
# Versions checked together, in one file with .ci/install-deps.sh.
# shellcheck source=selftest/tool-versions.sh
source "$repository_root/selftest/tool-versions.sh"
tools="$repository_root/target/tools"
known_builds="cu11 cu12 cu13 cu11-arm64 cu12-arm64 cu13-arm64"

fail() {
  echo "build.sh: $*" >&2
  exit 2
}

# The header above, without its `# `, is the usage text.
usage() {
  sed -n '2,/^set -euo pipefail$/p' "$repository_root/selftest/build.sh" | sed '$d' | sed -E 's/^# ?//'
}
for argument in "$@"; do
  case "$argument" in
    -h | --help)
      usage
      exit 0
      ;;
    -*) fail "unknown option '$argument' (bash selftest/build.sh --help prints the usage)" ;;
  esac
done

command -v cargo >/dev/null || fail "cargo not found: install a Rust toolchain (https://rustup.rs)"
command -v python3 >/dev/null ||
  fail "python3 not found; it holds zig's virtual environment (Debian: apt-get install python3 python3-venv)"
command -v readelf >/dev/null ||
  fail "readelf not found; it checks the glibc floor of each binary (Debian: apt-get install binutils)"

# 1. What to build: the arguments, else what the matrix's images name.
builds=("$@")
if [ "${#builds[@]}" -eq 0 ]; then
  # Never a release build of imagegen only to ask it this: the release binary when there is one,
  # else the debug one, else a debug build (said first, with its cost).
  imagegen_target="${CARGO_TARGET_DIR:-$repository_root/target}"
  profile=()
  if [ -x "$imagegen_target/release/imagegen" ]; then
    profile=(--release)
  elif [ ! -x "$imagegen_target/debug/imagegen" ]; then
    echo "== [${SECONDS} s] no imagegen build in $imagegen_target yet: a debug build comes first (a few minutes on 2 cores cold; name the builds to skip it, e.g. bash selftest/build.sh cu13)"
  fi
  echo "== [${SECONDS} s] which self-test builds the matrix needs: cargo run ${profile[*]} -q -- resolve --format json"
  resolution="$(cargo run "${profile[@]}" -q -- resolve --format json)" ||
    fail "imagegen resolve failed; name the builds instead, e.g. bash selftest/build.sh cu12 cu13"
  mapfile -t builds < <(python3 -c '
import json, sys
resolution = json.load(sys.stdin)
print("\n".join(sorted({image["selftest"].removeprefix("gpu-selftest-") for image in resolution["images"]})))
' <<<"$resolution")
  [ "${#builds[@]}" -gt 0 ] || fail "the matrix resolves to no image, so no self-test is needed"
  echo "   ${builds[*]}"
fi
for name in "${builds[@]}"; do
  case " $known_builds " in
    *" $name "*) ;;
    *) fail "unknown build '$name' (builds: $known_builds)" ;;
  esac
done

# 2. Every aarch64 build needs the aarch64 standard library; check before building anything.
sysroot="$(rustc --print sysroot)"
for name in "${builds[@]}"; do
  if [[ "$name" == *-arm64 ]] && [ ! -d "$sysroot/lib/rustlib/aarch64-unknown-linux-gnu" ]; then
    x86_only=()
    for other in "${builds[@]}"; do [[ "$other" == *-arm64 ]] || x86_only+=("$other"); done
    fail "gpu-selftest-$name needs the Rust target aarch64-unknown-linux-gnu, which this toolchain lacks: run \`rustup target add aarch64-unknown-linux-gnu\` where a toolchain can be downloaded, or skip the arm64 builds with \`bash selftest/build.sh ${x86_only[*]:-cu13}\`"
  fi
done

# 3. zig (through PyPI's ziglang, in our own virtual environment), cargo-zigbuild and
#    cargo-auditable (the build is `cargo auditable zigbuild`: zigbuild's glibc floor, and the
#    crates recorded in the binary for scanners).
export PATH="$tools/bin:$tools/zigenv/bin:$PATH"
if ! command -v zig >/dev/null && ! python3 -m ziglang version >/dev/null 2>&1; then
  echo "== [${SECONDS} s] installing zig (ziglang $ziglang_version from PyPI) into target/tools/zigenv"
  python3 -m venv "$tools/zigenv" ||
    fail "cannot make a Python virtual environment (Debian: apt-get install python3-venv)"
  "$tools/zigenv/bin/python3" -m pip install --quiet --disable-pip-version-check "ziglang==$ziglang_version"
fi
if ! command -v cargo-zigbuild >/dev/null; then
  echo "== [${SECONDS} s] installing cargo-zigbuild $zigbuild_version into target/tools"
  cargo install --quiet --locked --version "$zigbuild_version" --root "$tools" cargo-zigbuild
fi
if ! cargo install --list --root "$tools" | grep -qx "cargo-auditable v$auditable_version:"; then
  echo "== [${SECONDS} s] installing cargo-auditable $auditable_version into target/tools"
  cargo install --quiet --locked --version "$auditable_version" --root "$tools" cargo-auditable
fi

# 4. The builds, one cargo target folder each: the cudarc feature changes the whole graph.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repository_root/target/zig}"
mkdir -p target/selftest
for name in "${builds[@]}"; do
  major="${name%-arm64}"
  if [[ "$name" == *-arm64 ]]; then target_triple="aarch64-unknown-linux-gnu"; else target_triple="x86_64-unknown-linux-gnu"; fi
  echo "== [${SECONDS} s] building gpu-selftest-$name ($target_triple, glibc $glibc_floor)"
  CARGO_TARGET_DIR="$CARGO_TARGET_DIR/$name" cargo auditable zigbuild --release -p gpu-selftest \
    --no-default-features --features "$major" --target "$target_triple.$glibc_floor"
  built="$CARGO_TARGET_DIR/$name/$target_triple/release/gpu-selftest"
  output="target/selftest/gpu-selftest-$name"
  install -m 0755 "$built" "$output"
  # The glibc floor: no symbol may need a newer version (readelf reads any architecture's ELF).
  newest="$(readelf --dyn-syms -W "$output" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
  if [ "$(printf '%s\n%s\n' "$newest" "$glibc_floor" | sort -V | tail -n 1)" != "$glibc_floor" ]; then
    echo "build.sh: $output needs GLIBC_$newest, newer than $glibc_floor" >&2
    exit 1
  fi
  echo "   $output: newest glibc symbol GLIBC_$newest (<= $glibc_floor)"
done
echo "== [${SECONDS} s] done: ${builds[*]}"
