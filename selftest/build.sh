#!/usr/bin/env bash
# Builds gpu-selftest once per CUDA major for glibc 2.17 (runs on Ubuntu 20.04 and later) with
# cargo-zigbuild, and places the binaries where imagegen's build copies them from:
#   target/selftest/gpu-selftest-cu11, -cu12, -cu13          (x86_64)
#   target/selftest/gpu-selftest-cu12-arm64, -cu13-arm64    (aarch64 / SBSA, for linux/arm64 images)
# (relative to the repository root). aarch64 builds need `rustup target add aarch64-unknown-linux-gnu`.
# Needs: cargo-zigbuild (`cargo install cargo-zigbuild --locked`) and zig on PATH
# (`python3 -m venv /work/zigenv && /work/zigenv/bin/pip install ziglang`; then put
# /work/zigenv/bin on PATH). Usage: selftest/build.sh [cu11 cu12 cu13 cu12-arm64 cu13-arm64]
set -euo pipefail
repository_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repository_root"
glibc_floor="2.17"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repository_root/target/zig}"
majors=("$@")
if [ "${#majors[@]}" -eq 0 ]; then majors=(cu11 cu12 cu13 cu12-arm64 cu13-arm64); fi
mkdir -p target/selftest
for name in "${majors[@]}"; do
  case "$name" in
    cu11|cu12|cu13) major="$name"; target_triple="x86_64-unknown-linux-gnu" ;;
    cu11-arm64|cu12-arm64|cu13-arm64) major="${name%-arm64}"; target_triple="aarch64-unknown-linux-gnu" ;;
    *) echo "build.sh: unknown build '$name' (cu11, cu12, cu13, cu12-arm64, cu13-arm64)" >&2; exit 2 ;;
  esac
  echo "== building gpu-selftest-$name ($target_triple, glibc $glibc_floor)"
  # One cargo target folder per build: the cudarc feature changes the whole dependency graph.
  CARGO_TARGET_DIR="$CARGO_TARGET_DIR/$name" cargo zigbuild --release -p gpu-selftest \
    --no-default-features --features "$major" --target "$target_triple.$glibc_floor"
  built="$CARGO_TARGET_DIR/$name/$target_triple/release/gpu-selftest"
  install -m 0755 "$built" "target/selftest/gpu-selftest-$name"
  major="$name"
  # Verify the glibc floor: no symbol may need a newer version than $glibc_floor (readelf reads
  # any architecture's ELF).
  newest="$(readelf --dyn-syms -W "target/selftest/gpu-selftest-$major" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
  if [ "$(printf '%s\n%s\n' "$newest" "$glibc_floor" | sort -V | tail -n 1)" != "$glibc_floor" ]; then
    echo "build.sh: gpu-selftest-$major needs GLIBC_$newest, newer than $glibc_floor" >&2
    exit 1
  fi
  echo "   target/selftest/gpu-selftest-$major: newest glibc symbol GLIBC_$newest (<= $glibc_floor)"
done
