#!/usr/bin/env bash
# Benchmark (issue 21): what the cold path could cost with the venv made in one pass. pip's
# install of torch 2.13.0's wheels into a venv (what imagegen's Docker build runs, here on the host,
# without byte-compiling; the reference) against bench/onepass: the same wheels inflated straight
# into one tar stream, compressed as imagegen normalizes (level 1, 4 MiB chunks, two threads) and
# hashed, nothing written to disk. onepass leaves out what pip adds (entry points, RECORD, .data
# mapping, .pyc), so it is a floor. Prints both times, the sizes and the ratio.
#
#   bash bench/onepass.sh [WHEEL_FOLDER]     # without a folder: pip downloads the wheels first
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
cargo build --release -q -p onepass

python3 -m venv "$work/venv"
sync
start=$(now)
"$work/venv/bin/pip" install -q --no-deps --no-index --no-compile "$wheels"/*.whl
sync
pip_s=$(since "$start")
printf 'pip install --no-compile (the reference): %.1f s, %s written\n' "$pip_s" "$(du -sh "$work/venv" | cut -f1)"
rm -rf "$work/venv"

start=$(now)
target/release/onepass "$wheels"
onepass_s=$(since "$start")
printf 'ratio one pass / pip install: %.2f (%.1f s / %.1f s)\n' "$(echo "$onepass_s / $pip_s" | bc -l)" "$onepass_s" "$pip_s"
