#!/usr/bin/env bash
# Benchmark (issue 21, cold): the real runtime image (torch 2.13.0 from PyPI on the debootstrapped
# Debian trixie base, as tests/it/real_build.rs builds it, without the team's additions), today's
# path against imagegen's with the venv made on the host (`wheels: host`), cold, in one run, each
# pushed to an empty registry on 127.0.0.1:
#   today, cold     `docker build` (the classic builder) of the context imagegen renders for
#                   `wheels: index` (pip downloads and installs the lock in the build), then
#                   `docker push`; each timed
#   imagegen, cold  every image of today's path removed (no layer cache shared), an empty wheel
#                   cache, then `imagegen build --selftest-dir selftest --no-test --push` with
#                   `wheels: host` to a second registry: the wheels fetched on the host, the
#                   Docker build of the image around the venv and, beside it, the venv's layer
#                   written and compressed in one pass from the wheels (imagegen's own install),
#                   host-venv.sh (byte-compiling, pip check, loader cache) in a container of that
#                   build (which lists the packages too), the layers uploaded as they are ready,
#                   the push from memory (a pushed, untested image is not loaded into the daemon)
#   imagegen, warm  one label changed, the same build again (the wheels in the cache; with
#                   `wheels: host` a label change is not relabelled without a build: the Docker
#                   build is cached, and the venv the cold round made is taken as it is, its
#                   layers being in the registry)
# It prints each time, imagegen's phases as its log states them (seconds since its start), its
# peak memory (GNU time), the digests and the ratio imagegen / today, cold. About 12 minutes on 2
# cores. Same needs as bench/warm_label.sh.
#
#   cargo build --release && bash bench/host_venv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bench=host-venv
IMAGEGEN_BIN=${IMAGEGEN_BIN:-$PWD/target/release/imagegen}
# shellcheck source=bench/lib.sh
. bench/lib.sh

two_registries_and_a_project index
export IMAGEGEN_WHEEL_CACHE=$work/wheel-cache
"$bin" render >/dev/null

# Today's path: pip in the build (wheels: index).
context=$work/today-context
cp -r "images/$name" "$context"
rm -f "$context/apt.lock"
cp -p selftest/gpu-selftest-cu13 "$context/gpu-selftest"
cleanup
start=$(now)
DOCKER_BUILDKIT=0 docker build -t "$today/$repository:$name" "$context" > "$work/today-build.log" 2>&1 ||
  { cat "$work/today-build.log" >&2; exit 1; }
today_build=$(since "$start")
start=$(now)
docker push "$today/$repository:$name" > "$work/today-push.log" 2>&1 || { cat "$work/today-push.log" >&2; exit 1; }
today_push=$(since "$start")
today_digest=$(grep -o 'digest: sha256:[0-9a-f]*' "$work/today-push.log" | cut -d' ' -f2)

# imagegen's path, the venv made on the host, from a clean daemon and an empty wheel cache.
cleanup
rm -rf imagegen-manifest.json .imagegen "$IMAGEGEN_WHEEL_CACHE"
sed -i 's/^wheels: index$/wheels: host/' matrix.yaml
imagegen_round() {
  set_round "$1"
  "$bin" render >/dev/null 2>&1 || { "$bin" render; exit 2; }
  local line
  start=$(now)
  if ! { /usr/bin/time -f 'imagegen peak KiB %M' "$bin" build --selftest-dir selftest --no-test --push --format json 2>&1 > "$work/report-$1.json"; } |
    while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done > "$work/build-$1.log"; then
    cat "$work/build-$1.log" >&2; exit 1
  fi
  imagegen_s=$(since "$start")
  imagegen_start=$start
}
phases_of() {
  awk -v start="$2" '/(== (built|exported|normalized|loaded|not loaded|pushed|venv installed|venv as an earlier run) |wheels: .* ready in|venv on the host:)/ {
    line = $0; sub(/^[^ ]* /, "", line); printf "    %7.1f s  %s\n", $1 - start, line }' "$work/build-$1.log"
}
imagegen_round 1
cold=$imagegen_s cold_start=$imagegen_start
imagegen_round 2
warm=$imagegen_s warm_start=$imagegen_start

today_cold=$(echo "$today_build + $today_push" | bc)
printf 'real runtime image %s (torch 2.13.0, PyPI, trixie), %s cores, %s\n' "$name" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf 'today, cold (wheels: index):  docker build %7.1f s + docker push %6.2f s = %7.1f s   digest %s\n' \
  "$today_build" "$today_push" "$today_cold" "$today_digest"
printf 'imagegen, cold (wheels: host): build --push --no-test                %7.1f s   digest %s   peak memory %s\n' \
  "$cold" "$(jq -r '.images[0].digest' "$work/report-1.json")" \
  "$(awk '/imagegen peak KiB/ { printf "%.2f GiB", $NF / 1048576 }' "$work/build-1.log")"
phases_of 1 "$cold_start"
printf 'imagegen, warm (wheels: host, a label changed): %7.1f s   digest %s\n' "$warm" "$(jq -r '.images[0].digest' "$work/report-2.json")"
phases_of 2 "$warm_start"
printf 'ratio imagegen / today, cold: %.2f (%.1f s / %.1f s)\n' "$(echo "$cold / $today_cold" | bc -l)" "$cold" "$today_cold"
printf 'ratio imagegen warm / today, cold: %.2f (%.1f s / %.1f s)\n' "$(echo "$warm / $today_cold" | bc -l)" "$warm" "$today_cold"
