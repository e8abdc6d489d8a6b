#!/usr/bin/env bash
# Builds gpu-selftest once per CUDA major for glibc 2.17 (runs on Ubuntu 20.04 and later) with
# cargo-zigbuild, and places the binaries where imagegen's build copies them from:
#   target/selftest/gpu-selftest-cu11, -cu12, -cu13   (relative to the repository root)
# Needs: cargo-zigbuild (`cargo install cargo-zigbuild --locked`) and zig on PATH
# (`python3 -m venv /work/zigenv && /work/zigenv/bin/pip install ziglang`; then put
# /work/zigenv/bin on PATH). Usage: selftest/build.sh [cu11 cu12 cu13]
set -euo pipefail
repository_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repository_root"
target_triple="x86_64-unknown-linux-gnu"
glibc_floor="2.17"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repository_root/target/zig}"
majors=("$@")
if [ "${#majors[@]}" -eq 0 ]; then majors=(cu11 cu12 cu13); fi
mkdir -p target/selftest
for major in "${majors[@]}"; do
  case "$major" in cu11|cu12|cu13) ;; *) echo "build.sh: unknown CUDA major '$major' (cu11, cu12, cu13)" >&2; exit 2 ;; esac
  echo "== building gpu-selftest-$major (glibc $glibc_floor)"
  # One cargo target folder per major: the cudarc feature changes the whole dependency graph.
  CARGO_TARGET_DIR="$CARGO_TARGET_DIR/$major" cargo zigbuild --release -p gpu-selftest \
    --no-default-features --features "$major" --target "$target_triple.$glibc_floor"
  built="$CARGO_TARGET_DIR/$major/$target_triple/release/gpu-selftest"
  install -m 0755 "$built" "target/selftest/gpu-selftest-$major"
  # Verify the glibc floor: no symbol may need a newer version than $glibc_floor.
  newest="$(objdump -T "target/selftest/gpu-selftest-$major" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
  if [ "$(printf '%s\n%s\n' "$newest" "$glibc_floor" | sort -V | tail -n 1)" != "$glibc_floor" ]; then
    echo "build.sh: gpu-selftest-$major needs GLIBC_$newest, newer than $glibc_floor" >&2
    exit 1
  fi
  echo "   target/selftest/gpu-selftest-$major: newest glibc symbol GLIBC_$newest (<= $glibc_floor)"
done
