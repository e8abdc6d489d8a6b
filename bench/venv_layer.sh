#!/usr/bin/env bash
# Benchmark (issue 21): the venv layer's pass of `wheels: host` against pip. pip's install of
# torch 2.13.0's wheels into a venv on the host (`--no-deps --no-index --no-compile`, then `sync`;
# the reference: what imagegen's `wheels: cache` Docker build runs, without byte-compiling) against
# imagegen's own install written as the venv's layer (`pipeline::wheel_install::write_layer`, every
# wheel member inflated straight into the normalized tar) twice, nothing written to disk: into a
# hash alone (the floor), and into the compressing writer `imagegen build` uses (`GzipWriter`: the
# chunks compressed on every core while the tar is written). The second pass is the one
# `imagegen build` makes; the test checks both give one diff ID. Prints the times, the sizes and
# the ratios. About 2 minutes with the wheels downloaded, plus the release build of the lib tests.
#
#   bash bench/venv_layer.sh [WHEEL_FOLDER]     # without a folder: pip downloads the wheels first
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

wheels=${1:-}
if [ -z "$wheels" ]; then
  wheels=$work/wheels
  start=$(now)
  python3 -m pip download -q --only-binary=:all: torch==2.13.0 -d "$wheels"
  printf 'download of %s wheels (%s): %.1f s\n' "$(find "$wheels" -name '*.whl' | wc -l)" "$(du -sh "$wheels" | cut -f1)" "$(since "$start")"
fi
wheels=$(cd "$wheels" && pwd)
cargo test --release --lib --no-run -q 2>/dev/null

python3 -m venv "$work/venv"
sync
start=$(now)
"$work/venv/bin/pip" install -q --no-deps --no-index --no-compile "$wheels"/*.whl
sync
pip_s=$(since "$start")
printf 'pip install --no-compile (the reference): %.1f s, %s written\n' "$pip_s" "$(du -sh "$work/venv" | cut -f1)"
rm -rf "$work/venv"

line=$(IMAGEGEN_WHEEL_FOLDER=$wheels cargo test --release --lib -q the_venv_layer_of_a_wheel_folder -- --ignored --nocapture 2>&1 | grep 'wheels, ')
echo "$line"
hash_s=$(sed -E 's/.*into a hash ([0-9.]+) s.*/\1/' <<<"$line")
gzip_s=$(sed -E 's/.*into the gzip writer ([0-9.]+) s.*/\1/' <<<"$line")
printf 'ratio layer pass / pip install: %.2f (%.1f s / %.1f s); floor (tar into a hash) / pip install: %.2f\n' \
  "$(echo "$gzip_s / $pip_s" | bc -l)" "$gzip_s" "$pip_s" "$(echo "$hash_s / $pip_s" | bc -l)"
